"""Reference fixtures for Mistral from Hugging Face transformers: tests/data/mistral_hf/.

Regenerate with `scripts/make-reference-fixtures mistral_hf` (commit what it writes).

A tiny MistralForCausalLM with every parameter random (the RMSNorm weights 1 + 0.1 randn, so
that a tensor mapped to the wrong place shows): vocab 100, hidden 32, intermediate 40, 2 layers,
4 query heads, 2 key/value heads, head_dim 8, rope_theta 10000, no biases, eager attention,
float32, and a sliding window of 5 positions while the sequences are T = 16 long, so that the
window changes the output: check_window() asserts that the same weights without a window give
the same logits at positions 0..4 and different ones from position 5 on. Mistral does not tie
its head, so there is no tied/ variant. Files as _causal_lm.py describes: fp32/ (an untied
lm_head), train.bin, reference.safetensors (input_ids, target_ids, logits, loss, grad.NAME, and
train_losses of 20 AdamW steps from fp32/, where every base fixture keeps them), train.json,
versions.json.

What hoist must read from fp32/config.json:
  architectures ["MistralForCausalLM"], model_type "mistral"
  vocab_size 100, hidden_size 32, intermediate_size 40, num_hidden_layers 2,
  num_attention_heads 4, num_key_value_heads 2
  head_dim 8 (written although it equals hidden_size / num_attention_heads; Mistral checkpoints
      may also carry null or leave it out, meaning that quotient)
  hidden_act "silu", rms_norm_eps 1e-05
  rope_parameters {"rope_theta": 10000.0, "rope_type": "default"}
  tie_word_embeddings false
  sliding_window 5, and no layer_types key: every layer uses the window. Query position t
      attends to key positions s with t - 5 < s <= t (transformers' sliding_window_overlay:
      kv_idx > q_idx - sliding_window), that is, to itself and the 4 before it. A null
      sliding_window means full causal attention.
  no attention_bias key: Mistral has no biases
  also written, no effect here: attention_dropout 0.0, bos_token_id 1, eos_token_id 2,
      pad_token_id null, dtype "float32", initializer_range, max_position_embeddings 512,
      transformers_version, use_cache
"""
import torch
from transformers import MistralConfig, MistralForCausalLM

from _causal_lm import T, randomize, write_fixture

SLIDING_WINDOW = 5


def tiny_model(tied, sliding_window=SLIDING_WINDOW):
    config = MistralConfig(vocab_size=100, hidden_size=32, intermediate_size=40,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           max_position_embeddings=512,
                           rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                           rms_norm_eps=1e-5, sliding_window=sliding_window,
                           tie_word_embeddings=tied, attention_dropout=0.0, bos_token_id=1,
                           eos_token_id=2, pad_token_id=None)
    model = MistralForCausalLM(config)
    model.config._attn_implementation = "eager"
    return randomize(model, 1729, lambda p: 1.0 + 0.1 * torch.randn_like(p))


def check_window(model, inputs):
    """The window bites: the same weights without it agree below position SLIDING_WINDOW (every
    key is still in reach) and not from there on."""
    assert SLIDING_WINDOW < T and model.config.sliding_window == SLIDING_WINDOW
    full = tiny_model(tied=False, sliding_window=None)
    for a, b in zip(model.parameters(), full.parameters()):
        assert torch.equal(a, b)
    with torch.no_grad():
        diff = (model(inputs).logits - full(inputs).logits).abs().amax(dim=(0, 2))
    print("  max |logits - logits without the window| per position", diff.tolist())
    assert diff[:SLIDING_WINDOW].max().item() < 1e-6, diff
    assert diff[SLIDING_WINDOW:].min().item() > 1e-4, diff


def main():
    write_fixture("mistral_hf", tiny_model, token_seed=1732, untied=True, tied=False,
                  checks=check_window)


if __name__ == "__main__":
    main()
