"""Reference fixtures for Qwen3 from Hugging Face transformers: tests/data/qwen3_hf/.

Regenerate with `scripts/make-reference-fixtures qwen3_hf` (commit what it writes).

A tiny Qwen3ForCausalLM with every parameter random (every RMSNorm weight, q_norm and k_norm
included, 1 + 0.1 randn, so that a tensor mapped to the wrong place shows): vocab 100, hidden 32,
intermediate 40, 2 layers, 4 query heads, 2 key/value heads and an explicit head_dim 16 where
hidden / heads is 8 (as the real Qwen3 models have: q_proj (64, 32), k_proj and v_proj (32, 32),
o_proj (32, 64)), rope_theta 1e6, no biases, no sliding window, eager attention, float32.
Files as _causal_lm.py describes: fp32/ (an untied lm_head), tied/ (tie_word_embeddings: no
lm_head.weight in the file), train.bin, reference.safetensors (input_ids, target_ids, logits,
loss, grad.NAME, train_losses of 20 AdamW steps from fp32/), tied_reference.safetensors (logits,
loss, grad.NAME of tied/), train.json, versions.json.

What hoist must read from fp32/config.json (tied/ differs only in tie_word_embeddings: true):
  architectures ["Qwen3ForCausalLM"], model_type "qwen3"
  vocab_size 100, hidden_size 32, intermediate_size 40, num_hidden_layers 2,
  num_attention_heads 4, num_key_value_heads 2
  head_dim 16: the attention width is num_attention_heads * head_dim = 64, not hidden_size, and
      the softmax scale head_dim^-0.5 = 0.25
  attention_bias false
  hidden_act "silu", rms_norm_eps 1e-06 (the eps of every RMSNorm, q_norm and k_norm too)
  rope_parameters {"rope_theta": 1000000.0, "rope_type": "default"}, rotating all 16 dims of a head
  tie_word_embeddings false
  use_sliding_window false, sliding_window null, max_window_layers 28,
      layer_types ["full_attention", "full_attention"]
  no key for the QK norm, which Qwen3 always has: model.layers.N.self_attn.q_norm.weight and
      k_norm.weight, shape (head_dim,), an RMSNorm over each head's head_dim values of q and of k
      (weight times the normalized values, as Llama's norms), after q_proj / k_proj and before
      RoPE
  also written, no effect here: attention_dropout 0.0, bos_token_id 1, eos_token_id 2,
      pad_token_id null, dtype "float32", initializer_range, max_position_embeddings 512,
      transformers_version, use_cache
"""
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from _causal_lm import randomize, write_fixture


def tiny_model(tied):
    config = Qwen3Config(vocab_size=100, hidden_size=32, intermediate_size=40,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=16, max_position_embeddings=512,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                         rms_norm_eps=1e-6, attention_bias=False, use_sliding_window=False,
                         tie_word_embeddings=tied, attention_dropout=0.0, bos_token_id=1,
                         eos_token_id=2, pad_token_id=None)
    model = Qwen3ForCausalLM(config)
    model.config._attn_implementation = "eager"
    # q_norm and k_norm end in norm.weight too: 1 + 0.1 randn like the others.
    return randomize(model, 1618, lambda p: 1.0 + 0.1 * torch.randn_like(p))


def check_layout(model, inputs):
    c = model.config
    assert c.head_dim != c.hidden_size // c.num_attention_heads, c.head_dim
    params = dict(model.named_parameters())
    assert not any(n.endswith(".bias") for n in params), [n for n in params if "bias" in n]
    attn = "model.layers.0.self_attn."
    shapes = {n: tuple(params[attn + n + ".weight"].shape)
              for n in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm")}
    assert shapes["q_proj"] == (c.num_attention_heads * c.head_dim, c.hidden_size), shapes
    assert shapes["o_proj"] == (c.hidden_size, c.num_attention_heads * c.head_dim), shapes
    assert shapes["q_norm"] == shapes["k_norm"] == (c.head_dim,), shapes
    assert c.layer_types == ["full_attention"] * c.num_hidden_layers, c.layer_types
    print("  head_dim", c.head_dim, "vs hidden/heads", c.hidden_size // c.num_attention_heads,
          "shapes", shapes, "layer_types", c.layer_types)


def main():
    write_fixture("qwen3_hf", tiny_model, token_seed=1414, checks=check_layout)


if __name__ == "__main__":
    main()
