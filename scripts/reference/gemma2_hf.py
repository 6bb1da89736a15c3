"""Reference fixtures for Gemma 2 from Hugging Face transformers: tests/data/gemma2_hf/.

Regenerate with `scripts/make-reference-fixtures gemma2_hf` (commit what it writes; lora_peft
loads fp32/ as a base, so rerun it after).

A tiny Gemma2ForCausalLM with every parameter random, eager attention, float32: vocab 100,
hidden 32, intermediate 40, 3 layers, 4 query heads, 2 key/value heads, head_dim 16 (hidden /
heads is 8), rope_theta 10000, no biases. Gemma's RMSNorm multiplies by (1 + w), so its weights
w are 0.1 randn (a misplaced one shows); every other tensor is 0.1 randn. Each of the reference
run's features is set so that it changes the output:
  query_pre_attn_scalar 24: the scores are scaled by 24^-0.5, not head_dim^-0.5
  layer_types: transformers' default for 3 layers, sliding_attention where (i + 1) is odd:
      layers 0 and 2 slide, layer 1 is full. sliding_window 6 while T = 16: check() asserts
      that the same weights with a window of 4096 agree at positions 0..5 only.
  attn_logit_softcapping 0.5 and final_logit_softcapping 1.5 (ATTN_SOFTCAP, FINAL_SOFTCAP
      below): small enough that tanh bends; check() prints the largest |x / cap| before tanh
      on the reference batch and asserts it is over 0.5 for both.
Gemma always ties its head to the embedding, so fp32/ is the tied model (no lm_head.weight in
its file) and there is no tied/ folder. Files as _causal_lm.py describes: fp32/, train.bin,
reference.safetensors (input_ids, target_ids, logits, loss, grad.NAME, train_losses of 20 AdamW
steps from fp32/), train.json, versions.json.

What hoist must read from fp32/config.json:
  architectures ["Gemma2ForCausalLM"], model_type "gemma2"
  vocab_size 100, hidden_size 32, intermediate_size 40, num_hidden_layers 3,
  num_attention_heads 4, num_key_value_heads 2
  head_dim 16: the attention width is num_attention_heads * head_dim = 64, not hidden_size
  query_pre_attn_scalar 24: scores = q . k * 24^-0.5
  attn_logit_softcapping 0.5: scores = 0.5 * tanh(scores / 0.5), after the scale and before the
      mask and the softmax (null: none)
  final_logit_softcapping 1.5: logits = 1.5 * tanh(logits / 1.5); the loss and the logits in
      reference.safetensors are the capped ones (null: none)
  hidden_activation "gelu_pytorch_tanh" (there is no hidden_act key): the MLP is
      down(gelu_tanh(gate(x)) * up(x)), gelu's tanh approximation
  layer_types ["sliding_attention", "full_attention", "sliding_attention"] with sliding_window
      6: on a sliding layer query t attends to keys s with t - 6 < s <= t (itself and the 5
      before it), on a full layer to the whole causal prefix
  rms_norm_eps 1e-06; every norm is x * rsqrt(mean(x^2) + eps) * (1 + w), computed in float32
  rope_parameters {"rope_theta": 10000.0, "rope_type": "default"}
  tie_word_embeddings true
  attention_bias false; use_bidirectional_attention null (causal)
  not in the file but implied by gemma2: the embedding output is multiplied by sqrt(hidden_size)
      rounded to float32 (5.656854...); the head is not. Each layer has four norms, the output
      of attention and of the MLP each normalized before its residual add:
        h = h + post_attention_layernorm(attn(input_layernorm(h)))
        h = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h)))
      then model.norm before the head.
  also written, no effect here: attention_dropout 0.0, bos_token_id 2, eos_token_id 1,
      pad_token_id null (no padding_idx, so every embedding row gets its gradient), dtype
      "float32", initializer_range, max_position_embeddings 512, transformers_version, use_cache
"""
import torch
from transformers import Gemma2Config, Gemma2ForCausalLM
from transformers.models.gemma2 import modeling_gemma2

from _causal_lm import T, randomize, write_fixture

SLIDING_WINDOW = 6
# Small enough for these weights that tanh bends: on the reference batch the largest |x / cap| is
# about 1.9 for the attention scores (a third of them past 0.5) and 1.2 for the logits (a fifth
# past 0.5); check() prints and asserts it.
ATTN_SOFTCAP = 0.5
FINAL_SOFTCAP = 1.5


def tiny_model(tied=True, sliding_window=SLIDING_WINDOW, attn_softcap=ATTN_SOFTCAP,
               final_softcap=FINAL_SOFTCAP):
    assert tied, "Gemma 2 always ties its head to the embedding"
    config = Gemma2Config(vocab_size=100, hidden_size=32, intermediate_size=40,
                          num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=16, query_pre_attn_scalar=24, sliding_window=sliding_window,
                          attn_logit_softcapping=attn_softcap,
                          final_logit_softcapping=final_softcap,
                          hidden_activation="gelu_pytorch_tanh", max_position_embeddings=512,
                          rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                          rms_norm_eps=1e-6, attention_bias=False, tie_word_embeddings=True,
                          attention_dropout=0.0, bos_token_id=2, eos_token_id=1,
                          pad_token_id=None)
    model = Gemma2ForCausalLM(config)
    model.config._attn_implementation = "eager"
    # Gemma's RMSNorm multiplies by (1 + w): w itself is the small perturbation.
    return randomize(model, 1123, lambda p: 0.1 * torch.randn_like(p))


def measure_softcaps(model, inputs):
    """|x / cap| before tanh, over the attention scores that the mask lets through and over the
    logits: (max, fraction above 0.5) for each."""
    found = []
    eager = modeling_gemma2.eager_attention_forward

    def spy(module, query, key, value, attention_mask, scaling=None, softcap=None, **kwargs):
        keys = modeling_gemma2.repeat_kv(key, module.num_key_value_groups)
        scores = torch.matmul(query, keys.transpose(2, 3)) * scaling
        allowed = (attention_mask == 0).expand_as(scores)
        found.append(scores[allowed].abs().flatten() / softcap)
        return eager(module, query, key, value, attention_mask, scaling=scaling,
                     softcap=softcap, **kwargs)

    raw = []
    hook = model.lm_head.register_forward_hook(lambda m, i, o: raw.append(o))
    modeling_gemma2.eager_attention_forward = spy
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        modeling_gemma2.eager_attention_forward = eager
        hook.remove()
    assert len(found) == model.config.num_hidden_layers and len(raw) == 1
    scores = torch.cat(found)
    logits = raw[0].abs().flatten() / model.config.final_logit_softcapping
    return [(x.max().item(), (x > 0.5).float().mean().item()) for x in (scores, logits)]


def check(model, inputs):
    c = model.config
    sliding = [i for i, t in enumerate(c.layer_types) if t == "sliding_attention"]
    windows = [layer.self_attn.sliding_window for layer in model.model.layers]
    print("  layer_types", c.layer_types, "sliding layers", sliding, "windows", windows)
    assert windows == [SLIDING_WINDOW if i in sliding else None for i in range(len(windows))]
    assert c.head_dim != c.hidden_size // c.num_attention_heads
    assert c.query_pre_attn_scalar != c.head_dim
    (scores, scores_past), (logits, logits_past) = measure_softcaps(model, inputs)
    print(f"  max |score / attn_logit_softcapping| {scores:.4f} ({scores_past:.1%} past 0.5), "
          f"max |logit / final_logit_softcapping| {logits:.4f} ({logits_past:.1%} past 0.5)")
    assert scores > 0.5 and logits > 0.5, (scores, logits)
    # The window bites: without it the same weights agree below position SLIDING_WINDOW only.
    assert SLIDING_WINDOW < T
    full = tiny_model(sliding_window=4096)
    for a, b in zip(model.parameters(), full.parameters()):
        assert torch.equal(a, b)
    with torch.no_grad():
        diff = (model(inputs).logits - full(inputs).logits).abs().amax(dim=(0, 2))
    print("  max |logits - logits without the window| per position", diff.tolist())
    assert diff[:SLIDING_WINDOW].max().item() < 1e-6 and diff[SLIDING_WINDOW:].min() > 1e-5, diff


def main():
    write_fixture("gemma2_hf", tiny_model, token_seed=1125, untied=False, tied=True, checks=check)


if __name__ == "__main__":
    main()
