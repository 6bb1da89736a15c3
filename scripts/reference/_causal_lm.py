"""The run that the decoder-only families' generators share (qwen2_hf, qwen3_hf, mistral_hf,
gemma2_hf): the same files as llama_hf.py writes, from a tiny random transformers model.

write_fixture(name, make_model, ...) writes tests/data/NAME/:
  fp32/      make_model(tied=False) (or, for a family that always ties, make_model(tied=True))
             saved by save_pretrained: config.json, generation_config.json, model.safetensors
  tied/      make_model(tied=True), when the family has both (no lm_head.weight in its file)
  train.bin  a token shard (llm.c format: a 256-int32 header [20240520, 1, count], then count
             uint16 tokens) of random tokens, STEPS * B * T + 1 of them
  reference.safetensors
      input_ids, target_ids (B, T) I32: the first B*T + 1 tokens of train.bin, shifted by one
      logits (B, T, V) F32: the fp32/ model's output on input_ids
      loss () F32: its mean cross-entropy on target_ids
      grad.NAME (shape of NAME) F32: d loss / d parameter NAME, transformers' names (a tied
          model has no lm_head.weight: grad.model.embed_tokens.weight holds both uses)
      train_losses (STEPS,) F32: the losses of STEPS steps of torch.optim.AdamW from the fp32/
          weights, one micro-batch of train.bin per step in order (step s reads tokens
          [s*B*T, s*B*T + B*T + 1), llm.c's loader), constant lr, weight decay on the 2-D tensors
          only (biases and norm weights none), no clipping; train_losses[s] is the loss before
          step s's update
  tied_reference.safetensors (with tied/ only)
      logits, loss, grad.NAME: the same for the tied/ model (a file of its own: each stays small)
  train.json   the optimizer's settings and the batch shape of that run
  versions.json

Before writing the references it reloads every saved folder with AutoModelForCausalLM.
from_pretrained (float32, eager attention) and asserts that the reloaded tensors and logits are
bit-identical to the in-memory model's, so that the checkpoints are what the references came
from.
"""
import json
import os

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

from _common import fixture_dir, write_versions

B, T = 2, 16
STEPS = 20
LR, BETAS, EPS, WEIGHT_DECAY = 1e-2, (0.9, 0.95), 1e-8, 0.1


def randomize(model, seed, norm_weight):
    """Every parameter random: norm weights norm_weight(p), the rest (biases too) 0.1 randn."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(norm_weight(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    return model.eval()


def write_shard(path, tokens):
    header = np.zeros(256, np.int32)
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, np.uint16).tobytes())


def batch(tokens, step):
    w = torch.from_numpy(tokens[step * B * T: step * B * T + B * T + 1].astype(np.int64))
    return w[:-1].view(B, T), w[1:].view(B, T)


def mean_loss(model, x, y):
    logits = model(x).logits
    V = logits.shape[-1]
    return logits, torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1))


def forward_backward(model, inputs, targets, reference):
    model.zero_grad()
    logits, loss = mean_loss(model, inputs, targets)
    loss.backward()
    reference["logits"] = logits.detach().contiguous()
    reference["loss"] = loss.detach().reshape(())
    for name, p in model.named_parameters():
        reference["grad." + name] = p.grad.detach().clone()
    return loss.item()


def check_reload(model, folder, inputs, tied):
    """from_pretrained(folder) holds model's tensors and gives its logits, bit for bit."""
    with safe_open(os.path.join(folder, "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert ("lm_head.weight" in names) != tied, sorted(names)
    assert model.config._attn_implementation == "eager", model.config._attn_implementation
    loaded = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                  attn_implementation="eager").eval()
    assert type(loaded) is type(model), type(loaded)
    mine, theirs = model.state_dict(), loaded.state_dict()
    assert sorted(mine) == sorted(theirs), (sorted(mine), sorted(theirs))
    for k in mine:
        assert mine[k].dtype == torch.float32 and torch.equal(mine[k], theirs[k]), k
    with torch.no_grad():
        want, got = model(inputs).logits, loaded(inputs).logits
    assert torch.equal(want, got), (want - got).abs().max().item()
    print(f"  reloaded {folder}: {len(names)} tensors in the file, logits bit-identical")


def adamw_losses(model, tokens):
    """STEPS steps of torch's AdamW from model's weights, llm.c's loader order."""
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=LR, betas=BETAS, eps=EPS, foreach=False, fused=False)
    losses = []
    for step in range(STEPS):
        x, y = batch(tokens, step)
        optimizer.zero_grad()
        _, step_loss = mean_loss(model, x, y)
        step_loss.backward()
        optimizer.step()
        losses.append(step_loss.item())
    return losses


def print_config(folder):
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    print(f"  {folder}/config.json:")
    for k in sorted(config):
        print(f"    {k}: {json.dumps(config[k])}")


def write_fixture(name, make_model, token_seed, untied=True, tied=True, checks=None):
    """Writes tests/data/NAME/ from make_model(tied) (a fresh, randomized, eval-mode model;
    the same weights on every call). untied and tied pick the variants: fp32/ is the untied one
    when there is one, else the tied one; tied/ is written only when both are. checks(model,
    inputs), when given, runs on the fp32/ model before anything is written."""
    assert untied or tied
    out = fixture_dir(name)
    model = make_model(tied=not untied)
    V = model.config.vocab_size
    rng = np.random.default_rng(token_seed)
    tokens = rng.integers(0, V, size=STEPS * B * T + 1)
    inputs, targets = batch(tokens, 0)
    if checks is not None:
        checks(model, inputs)

    fp32_dir = os.path.join(out, "fp32")
    model.save_pretrained(fp32_dir)
    check_reload(model, fp32_dir, inputs, tied=not untied)
    print_config(fp32_dir)
    write_shard(os.path.join(out, "train.bin"), tokens)
    reference = {"input_ids": inputs.to(torch.int32), "target_ids": targets.to(torch.int32)}
    loss = forward_backward(model, inputs, targets, reference)

    tied_loss = None
    if untied and tied:
        tied_model = make_model(tied=True)
        tied_dir = os.path.join(out, "tied")
        tied_model.save_pretrained(tied_dir)
        check_reload(tied_model, tied_dir, inputs, tied=True)
        tied_reference = {}
        tied_loss = forward_backward(tied_model, inputs, targets, tied_reference)
        save_file(tied_reference, os.path.join(out, "tied_reference.safetensors"))

    losses = adamw_losses(make_model(tied=not untied), tokens)
    assert abs(losses[0] - loss) <= 1e-6 * abs(loss), (losses[0], loss)
    reference["train_losses"] = torch.tensor(losses, dtype=torch.float32)
    save_file(reference, os.path.join(out, "reference.safetensors"))
    with open(os.path.join(out, "train.json"), "w") as f:
        json.dump({"B": B, "T": T, "steps": STEPS, "lr": LR, "betas": list(BETAS), "eps": EPS,
                   "weight_decay": WEIGHT_DECAY}, f, indent=2)
        f.write("\n")
    write_versions(out, ["torch", "transformers", "safetensors", "numpy"])
    print("wrote", out, "loss", loss, "tied", tied_loss, "train", losses[0], "->", losses[-1])
    return model, inputs
