"""Reference fixtures for GPT-2 from Hugging Face transformers: tests/data/gpt2_hf/.

Regenerate with `scripts/make-reference-fixtures gpt2_hf` (commit what it writes).

A tiny GPT-2 with every parameter random (biases and layernorms too, so that a tensor mapped to
the wrong place shows), saved by transformers' save_pretrained:
  fp32/      config.json, model.safetensors
  bf16/      the same weights rounded to bf16
  sharded/   fp32, split into several files with model.safetensors.index.json
  gpt2_tiny.bin       the same model in llm.c's checkpoint format (version 3, fp32), written here
                      from llm.c's definition of the file: a 256-int32 header, then the 16
                      tensors in its order, Linear weights (out, in), wte padded to Vp rows
  gpt2_tiny_bf16.bin  the same in version 5 (bf16)
  train.bin           a token shard (llm.c format, uint16) of random tokens
  reference.safetensors
      input_ids, target_ids (B, T) I32: the first B*T + 1 tokens of train.bin, shifted by one
      logits (B, T, V) F32: the fp32 model's output on input_ids
      loss () F32: its mean cross-entropy on target_ids
      grad.NAME: d loss / d parameter NAME (transformers' names)
      train_losses (STEPS,) F32: the losses of STEPS steps of torch.optim.AdamW from the fp32
          weights, one micro-batch of train.bin per step in order (llm.c's loader), constant lr,
          weight decay on the 2-D tensors only, no clipping
  train.json   the optimizer's settings and the batch shape of that run
"""
import json
import os
import struct

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

from _common import fixture_dir, write_versions

B, T = 2, 8
STEPS = 20
LR, BETAS, EPS, WEIGHT_DECAY = 1e-2, (0.9, 0.95), 1e-8, 0.1


def tiny_model():
    config = GPT2Config(vocab_size=96, n_positions=16, n_embd=16, n_layer=2, n_head=4,
                        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, layer_norm_epsilon=1e-5, tie_word_embeddings=True,
                        bos_token_id=95, eos_token_id=95)
    torch.manual_seed(1234)
    model = GPT2LMHeadModel(config)
    model.config._attn_implementation = "eager"
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    return model.eval()


def write_llmc(path, model, version):
    """llm.c's checkpoint: header [magic, version, maxT, V, L, NH, C, Vp], the 16 tensors."""
    c = model.config
    V, C, L, maxT = c.vocab_size, c.n_embd, c.n_layer, c.n_positions
    Vp = (V + 127) // 128 * 128
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    h = lambda l, k: sd[f"transformer.h.{l}.{k}"]
    wte = np.zeros((Vp, C), np.float32)
    wte[:V] = sd["transformer.wte.weight"]
    tensors = [wte, sd["transformer.wpe.weight"]]
    per_layer = [("ln_1.weight", False), ("ln_1.bias", False), ("attn.c_attn.weight", True),
                 ("attn.c_attn.bias", False), ("attn.c_proj.weight", True),
                 ("attn.c_proj.bias", False), ("ln_2.weight", False), ("ln_2.bias", False),
                 ("mlp.c_fc.weight", True), ("mlp.c_fc.bias", False),
                 ("mlp.c_proj.weight", True), ("mlp.c_proj.bias", False)]
    for key, conv1d in per_layer:
        # transformers' Conv1D keeps (in, out); llm.c's Linear weights are (out, in).
        tensors.append(np.stack([h(l, key).T if conv1d else h(l, key) for l in range(L)]))
    tensors += [sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"]]
    header = np.zeros(256, np.int32)
    header[:8] = [20240326, version, maxT, V, L, c.n_head, C, Vp]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for t in tensors:
            flat = np.ascontiguousarray(t, np.float32).reshape(-1)
            if version == 5:
                flat = torch.from_numpy(flat).to(torch.bfloat16).view(torch.int16).numpy()
            f.write(flat.tobytes())


def write_shard(path, tokens):
    header = np.zeros(256, np.int32)
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, np.uint16).tobytes())


def main():
    out = fixture_dir("gpt2_hf")
    model = tiny_model()
    V = model.config.vocab_size
    model.save_pretrained(os.path.join(out, "fp32"))
    model.save_pretrained(os.path.join(out, "sharded"), max_shard_size="12KB")
    half = tiny_model().to(torch.bfloat16)
    half.save_pretrained(os.path.join(out, "bf16"))
    write_llmc(os.path.join(out, "gpt2_tiny.bin"), model, 3)
    write_llmc(os.path.join(out, "gpt2_tiny_bf16.bin"), half, 5)

    rng = np.random.default_rng(5678)
    tokens = rng.integers(0, V, size=STEPS * B * T + 1)
    write_shard(os.path.join(out, "train.bin"), tokens)

    window = torch.from_numpy(tokens[: B * T + 1].astype(np.int64))
    inputs, targets = window[:-1].view(B, T), window[1:].view(B, T)
    model.zero_grad()
    logits = model(inputs).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    loss.backward()
    reference = {"input_ids": inputs.to(torch.int32), "target_ids": targets.to(torch.int32),
                 "logits": logits.detach().contiguous(), "loss": loss.detach().reshape(())}
    for name, p in model.named_parameters():
        reference["grad." + name] = p.grad.detach().clone()

    # Training: llm.c's loader order, torch's AdamW.
    train = tiny_model().train()
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
    print("wrote", out, "loss", loss.item(), "train", losses[0], "->", losses[-1])


if __name__ == "__main__":
    main()
