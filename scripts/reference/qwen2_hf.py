"""Reference fixtures for Qwen2 from Hugging Face transformers: tests/data/qwen2_hf/.

Regenerate with `scripts/make-reference-fixtures qwen2_hf` (commit what it writes; lora_peft
loads fp32/ as a base, so rerun it after).

A tiny Qwen2ForCausalLM with every parameter random (the RMSNorm weights 1 + 0.1 randn, the
q/k/v biases 0.1 randn like the weights, so that a tensor mapped to the wrong place shows):
vocab 100, hidden 32, intermediate 40, 2 layers, grouped-query attention (4 query heads, 2
key/value heads, head_dim 8), rope_theta 1e6, no sliding window, eager attention, float32.
Files as _causal_lm.py describes: fp32/ (an untied lm_head), tied/ (tie_word_embeddings, as the
small Qwen2.5 models do: no lm_head.weight in the file), train.bin, reference.safetensors
(input_ids, target_ids, logits, loss, grad.NAME, train_losses of 20 AdamW steps from fp32/),
tied_reference.safetensors (logits, loss, grad.NAME of tied/), train.json, versions.json.

What hoist must read from fp32/config.json (tied/ differs only in tie_word_embeddings: true):
  architectures ["Qwen2ForCausalLM"], model_type "qwen2"
  vocab_size 100, hidden_size 32, intermediate_size 40, num_hidden_layers 2,
  num_attention_heads 4, num_key_value_heads 2
  no head_dim key: head_dim = hidden_size / num_attention_heads = 8
  hidden_act "silu" (down(silu(gate(x)) * up(x))), rms_norm_eps 1e-06
  rope_parameters {"rope_theta": 1000000.0, "rope_type": "default"} (no top-level rope_theta;
      Hub checkpoints written by transformers 4 have a top-level rope_theta instead)
  tie_word_embeddings false
  use_sliding_window false, sliding_window null, max_window_layers 28,
      layer_types ["full_attention", "full_attention"]: every layer attends to the whole causal
      prefix (max_window_layers means nothing while use_sliding_window is false)
  no attention_bias key: Qwen2 always has model.layers.N.self_attn.{q,k,v}_proj.bias (shape
      (out_features,)) and never an o_proj bias; the architecture implies them, the config does
      not say so
  also written, no effect here: attention_dropout 0.0, bos_token_id 1, eos_token_id 2,
      pad_token_id null (no padding_idx, so every embedding row gets its gradient), dtype
      "float32", initializer_range, max_position_embeddings 512, transformers_version, use_cache
"""
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from _causal_lm import randomize, write_fixture


def tiny_model(tied):
    config = Qwen2Config(vocab_size=100, hidden_size=32, intermediate_size=40,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                         rms_norm_eps=1e-6, use_sliding_window=False, tie_word_embeddings=tied,
                         attention_dropout=0.0, bos_token_id=1, eos_token_id=2,
                         pad_token_id=None)
    model = Qwen2ForCausalLM(config)
    model.config._attn_implementation = "eager"
    return randomize(model, 2718, lambda p: 1.0 + 0.1 * torch.randn_like(p))


def check_layout(model, inputs):
    names = dict(model.named_parameters())
    for i in range(model.config.num_hidden_layers):
        prefix = f"model.layers.{i}.self_attn."
        for proj in ("q_proj", "k_proj", "v_proj"):
            assert prefix + proj + ".bias" in names, prefix + proj
        assert prefix + "o_proj.bias" not in names
    assert model.config.layer_types == ["full_attention"] * model.config.num_hidden_layers
    print("  q/k/v biases, no o_proj bias; layer_types", model.config.layer_types)


def main():
    write_fixture("qwen2_hf", tiny_model, token_seed=3141, checks=check_layout)


if __name__ == "__main__":
    main()
