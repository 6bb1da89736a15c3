"""Reference fixtures for Llama from Hugging Face transformers: tests/data/llama_hf/.

Regenerate with `scripts/make-reference-fixtures llama_hf` (commit what it writes).

A tiny LlamaForCausalLM with every parameter random (the RMSNorm weights 1 + 0.1 randn, so that a
tensor mapped to the wrong place shows), grouped-query attention (4 query heads, 2 key/value
heads, head_dim 8), Llama 3's rope_scaling with its settings chosen so that the head's four
frequencies fall in all three of its bands (kept, smoothed, divided by factor: printed below),
saved by transformers' save_pretrained:
  fp32/      config.json, model.safetensors (an untied lm_head)
  tied/      the same model with tie_word_embeddings (no lm_head.weight in the file)
  train.bin  a token shard (llm.c format, uint16) of random tokens
  reference.safetensors
      input_ids, target_ids (B, T) I32: the first B*T + 1 tokens of train.bin, shifted by one
      logits (B, T, V) F32: the fp32 model's output on input_ids
      loss () F32: its mean cross-entropy on target_ids
      grad.NAME: d loss / d parameter NAME (transformers' names)
  tied_reference.safetensors
      logits, loss, grad.NAME: the same for the tied model (a file of its own: each stays small)
      train_losses (STEPS,) F32: the losses of STEPS steps of torch.optim.AdamW from the fp32
          weights, one micro-batch of train.bin per step in order (llm.c's loader), constant lr,
          weight decay on the 2-D tensors only, no clipping
  train.json   the optimizer's settings and the batch shape of that run
"""
import json
import os

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

from _common import fixture_dir, write_versions

B, T = 2, 16
STEPS = 20
LR, BETAS, EPS, WEIGHT_DECAY = 1e-2, (0.9, 0.95), 1e-8, 0.1
# head_dim 8 has four frequencies, theta^(-i/4): wavelengths 2 pi x {1, 26.6, 707, 18803}. With
# original_max_position_embeddings 256 and the factors (1, 4), the bands' edges are 64 and 256:
# the first is kept, the second smoothed, the last two divided by factor. transformers wants the
# original context below max_position_embeddings, hence 512.
ROPE_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 256}


def tiny_model(tied):
    config = LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=40,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, rope_theta=500000.0,
                         rope_scaling=dict(ROPE_SCALING), rms_norm_eps=1e-5,
                         tie_word_embeddings=tied, attention_bias=False, mlp_bias=False,
                         attention_dropout=0.0, bos_token_id=1, eos_token_id=2,
                         pad_token_id=None)
    torch.manual_seed(4321)
    model = LlamaForCausalLM(config)
    model.config._attn_implementation = "eager"
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    return model.eval()


def check_rope_bands(model):
    rotary = model.model.rotary_emb
    inv_freq = rotary.inv_freq.detach().double()
    hd = model.config.hidden_size // model.config.num_attention_heads
    theta = 500000.0
    plain = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ratio = (plain / inv_freq).tolist()
    print("inv_freq", inv_freq.tolist(), "plain / scaled", ratio)
    kept = sum(abs(r - 1.0) < 1e-6 for r in ratio)
    divided = sum(abs(r - 8.0) < 1e-4 for r in ratio)
    smoothed = len(ratio) - kept - divided
    assert kept >= 1 and divided >= 1 and smoothed >= 1, ratio


def write_shard(path, tokens):
    header = np.zeros(256, np.int32)
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, np.uint16).tobytes())


def forward_backward(model, inputs, targets, prefix, reference):
    V = model.config.vocab_size
    model.zero_grad()
    logits = model(inputs).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    loss.backward()
    reference[prefix + "logits"] = logits.detach().contiguous()
    reference[prefix + "loss"] = loss.detach().reshape(())
    for name, p in model.named_parameters():
        reference[prefix + "grad." + name] = p.grad.detach().clone()
    return loss.item()


def main():
    out = fixture_dir("llama_hf")
    model = tiny_model(tied=False)
    check_rope_bands(model)
    tied = tiny_model(tied=True)
    V = model.config.vocab_size
    model.save_pretrained(os.path.join(out, "fp32"))
    tied.save_pretrained(os.path.join(out, "tied"))

    rng = np.random.default_rng(8765)
    tokens = rng.integers(0, V, size=STEPS * B * T + 1)
    write_shard(os.path.join(out, "train.bin"), tokens)

    window = torch.from_numpy(tokens[: B * T + 1].astype(np.int64))
    inputs, targets = window[:-1].view(B, T), window[1:].view(B, T)
    reference = {"input_ids": inputs.to(torch.int32), "target_ids": targets.to(torch.int32)}
    loss = forward_backward(model, inputs, targets, "", reference)
    tied_reference = {}
    tied_loss = forward_backward(tied, inputs, targets, "", tied_reference)
    save_file(tied_reference, os.path.join(out, "tied_reference.safetensors"))

    # Training: llm.c's loader order, torch's AdamW.
    train = tiny_model(tied=False).train()
    decay = [p for p in train.parameters() if p.dim() >= 2]
    no_decay = [p for p in train.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=LR, betas=BETAS, eps=EPS, foreach=False, fused=False)
    losses = []
    for step in range(STEPS):
        w = torch.from_numpy(tokens[step * B * T: step * B * T + B * T + 1].astype(np.int64))
        x, y = w[:-1].view(B, T), w[1:].view(B, T)
        optimizer.zero_grad()
        step_loss = torch.nn.functional.cross_entropy(train(x).logits.reshape(-1, V), y.reshape(-1))
        step_loss.backward()
        optimizer.step()
        losses.append(step_loss.item())
    reference["train_losses"] = torch.tensor(losses, dtype=torch.float32)
    save_file(reference, os.path.join(out, "reference.safetensors"))
    with open(os.path.join(out, "train.json"), "w") as f:
        json.dump({"B": B, "T": T, "steps": STEPS, "lr": LR, "betas": list(BETAS), "eps": EPS,
                   "weight_decay": WEIGHT_DECAY}, f, indent=2)
        f.write("\n")
    write_versions(out, ["torch", "transformers", "safetensors", "numpy"])
    print("wrote", out, "loss", loss, "tied", tied_loss, "train", losses[0], "->", losses[-1])


if __name__ == "__main__":
    main()
