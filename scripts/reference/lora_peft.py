"""Reference fixtures for LoRA from Hugging Face PEFT: tests/data/lora_peft/.

Regenerate with `scripts/make-reference-fixtures lora_peft` (commit what it writes). It does not
make base models: it loads the committed tiny ones, tests/data/gpt2_hf/fp32,
tests/data/llama_hf/fp32, tests/data/qwen2_hf/fp32 and tests/data/gemma2_hf/fp32 (transformers'
from_pretrained, float32, eager attention), so run gpt2_hf, llama_hf, qwen2_hf and gemma2_hf first
when those change (a plain `scripts/make-reference-fixtures` runs qwen2_hf after this one).

One folder per family, tests/data/lora_peft/FAMILY/ (FAMILY gpt2, llama, qwen2 or gemma2;
settings in FAMILIES below): a LoraConfig with init_lora_weights=False (lora_A and lora_B both
random, nn.Linear's default init drawn after torch.manual_seed(SEED), so that the adapter is not a
no-op and a wrong orientation or scaling shows), lora_dropout 0, bias "none", task_type
CAUSAL_LM.
  gpt2:  r 4, lora_alpha 8 (scaling 2), target_modules c_attn, c_proj, c_fc (c_proj matches
         attn.c_proj and mlp.c_proj), fan_in_fan_out true (GPT-2's Conv1D keeps (in, out))
  llama: r 2, lora_alpha 6 (scaling 3), target_modules q_proj, v_proj, o_proj, gate_proj,
         down_proj (a subset on purpose: no k_proj, no up_proj)
  qwen2: r 2, lora_alpha 5 (scaling 2.5), target_modules q_proj, k_proj, v_proj, o_proj,
         gate_proj, up_proj, down_proj (every Linear but the head; q/k/v keep their base bias,
         the adapter has none)
  gemma2: r 4, lora_alpha 6 (scaling 1.5), the same seven target_modules; the base ties its
         head to the embedding, which no adapter touches

  adapter/   the untrained adapter as PeftModel.save_pretrained writes it:
      adapter_config.json
      adapter_model.safetensors  F32, metadata {"format": "pt"}, for every targeted module M
          (M its transformers name, e.g. transformer.h.0.attn.c_attn or
          model.layers.0.self_attn.q_proj) two tensors:
            base_model.model.M.lora_A.weight  (r, in_features)
            base_model.model.M.lora_B.weight  (out_features, r)
          in_features and out_features are the layer's, whatever the layout of its base weight:
          for GPT-2's Conv1D, stored (in, out), they are that weight's shape[0] and shape[1].
          The layer computes y = base(x) + scaling * (x @ lora_A^T) @ lora_B^T, scaling =
          lora_alpha / r; merged, the weight gains scaling * lora_B @ lora_A, transposed to
          (in, out) for Conv1D.
      (PEFT's model card, README.md, is not kept. PEFT writes target_modules from a set, in str
      hash order: the script runs itself with PYTHONHASHSEED=0 so that the order stays put.)
  reference.safetensors
      input_ids, target_ids (B, T) I32: the first B*T + 1 tokens of the base folder's train.bin
          (llm.c's token shard: a 256-int32 header [20240520, 1, count], then count uint16
          tokens), shifted by one
      logits (B, T, V) F32: the base model with the adapter, on input_ids
      loss () F32: its mean cross-entropy on target_ids
      grad.NAME (shape of NAME) F32: d loss / d NAME for every tensor NAME of
          adapter_model.safetensors, under that exact key (grad.base_model.model.M.lora_A.weight);
          the base weights are frozen and have none
      train_losses (STEPS,) F32: the losses of STEPS steps of torch.optim.AdamW over the adapter
          tensors only, from the untrained adapter, one micro-batch of train.bin per step in order
          (step s reads tokens [s*B*T, s*B*T + B*T + 1), as the base fixtures' runs do), constant
          lr, weight decay WEIGHT_DECAY on every adapter tensor (all are 2-D), no clipping;
          train_losses[s] is the loss before step s's update
      final.NAME (shape of NAME) F32: each adapter tensor after those STEPS updates
      merged.HFNAME F32: for every base weight with an adapter, that weight after PEFT's
          merge_and_unload() of the untrained adapter, under the name and in the shape
          transformers saves it (transformer.h.0.attn.c_attn.weight (in, out) for GPT-2's
          Conv1D; model.layers.0.self_attn.q_proj.weight (out, in) for Llama)
  train.json   base (the base model's folder), r, lora_alpha, scaling, target_modules,
               fan_in_fan_out, the optimizer's settings (lr, betas, eps, weight_decay), B, T,
               steps
tests/data/lora_peft/versions.json records the library versions.
"""
import json
import os
import sys

import numpy as np
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

from _common import fixture_dir, write_versions

STEPS = 20
LR, BETAS, EPS, WEIGHT_DECAY = 1e-2, (0.9, 0.95), 1e-8, 0.1
# B and T are the base fixtures' (gpt2_hf.py, llama_hf.py, _causal_lm.py), so that train.bin
# holds every step.
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
FAMILIES = {
    "gpt2": {"base": "tests/data/gpt2_hf", "B": 2, "T": 8, "seed": 2468, "r": 4,
             "lora_alpha": 8, "target_modules": ["c_attn", "c_proj", "c_fc"],
             "fan_in_fan_out": True},
    "llama": {"base": "tests/data/llama_hf", "B": 2, "T": 16, "seed": 1357, "r": 2,
              "lora_alpha": 6,
              "target_modules": ["q_proj", "v_proj", "o_proj", "gate_proj", "down_proj"],
              "fan_in_fan_out": False},
    "qwen2": {"base": "tests/data/qwen2_hf", "B": 2, "T": 16, "seed": 2020, "r": 2,
              "lora_alpha": 5, "target_modules": ALL_LINEAR, "fan_in_fan_out": False},
    "gemma2": {"base": "tests/data/gemma2_hf", "B": 2, "T": 16, "seed": 3030, "r": 4,
               "lora_alpha": 6, "target_modules": ALL_LINEAR, "fan_in_fan_out": False},
}


def load_base(folder):
    model = AutoModelForCausalLM.from_pretrained(os.path.join(folder, "fp32"), dtype=torch.float32,
                                                 attn_implementation="eager")
    return model.eval()


def read_shard(path):
    """llm.c's token shard: header [magic 20240520, version 1, count], count uint16 tokens."""
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(256 * 4), np.int32)
        assert header[0] == 20240520 and header[1] == 1, header[:3]
        tokens = np.frombuffer(f.read(), np.uint16)
    assert len(tokens) == header[2], (len(tokens), header[2])
    return tokens.astype(np.int64)


def batch(tokens, step, B, T):
    w = torch.from_numpy(tokens[step * B * T: step * B * T + B * T + 1])
    return w[:-1].view(B, T), w[1:].view(B, T)


def mean_loss(model, x, y):
    logits = model(x).logits
    V = logits.shape[-1]
    return logits, torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1))


def adapter_key(param_name):
    """PEFT's parameter name (…lora_A.default.weight) as save_pretrained writes it."""
    for part in ("lora_A", "lora_B"):
        param_name = param_name.replace(f".{part}.default.", f".{part}.")
    return param_name


def adapter_params(model):
    """{saved key: parameter} for the adapter tensors, asserting that nothing else trains."""
    params = {}
    for name, p in model.named_parameters():
        if ".lora_A." in name or ".lora_B." in name:
            assert p.requires_grad and p.dim() == 2, name
            params[adapter_key(name)] = p
        else:
            assert not p.requires_grad, name
    return params


def make_family(out_root, family, s):
    out = os.path.join(out_root, family)
    adapter_dir = os.path.join(out, "adapter")
    B, T = s["B"], s["T"]
    tokens = read_shard(os.path.join(s["base"], "train.bin"))
    assert len(tokens) >= STEPS * B * T + 1, len(tokens)
    config = LoraConfig(r=s["r"], lora_alpha=s["lora_alpha"], target_modules=s["target_modules"],
                        lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                        fan_in_fan_out=s["fan_in_fan_out"], init_lora_weights=False)

    # The untrained adapter, its loss and gradients.
    torch.manual_seed(s["seed"])
    model = get_peft_model(load_base(s["base"]), config)
    model.save_pretrained(adapter_dir)
    card = os.path.join(adapter_dir, "README.md")
    if os.path.exists(card):
        os.remove(card)
    with safe_open(os.path.join(adapter_dir, "adapter_model.safetensors"), "pt") as f:
        saved = {k: f.get_tensor(k) for k in f.keys()}
    params = adapter_params(model)
    assert sorted(params) == sorted(saved), (sorted(params), sorted(saved))
    for k, p in params.items():
        assert torch.equal(p.detach(), saved[k]), k

    x, y = batch(tokens, 0, B, T)
    model.zero_grad()
    logits, loss = mean_loss(model, x, y)
    loss.backward()
    reference = {"input_ids": x.to(torch.int32), "target_ids": y.to(torch.int32),
                 "logits": logits.detach().contiguous(), "loss": loss.detach().reshape(())}
    for k, p in params.items():
        reference["grad." + k] = p.grad.detach().clone()

    # The untrained adapter merged into its base weights, loaded back from adapter/.
    merged_model = PeftModel.from_pretrained(load_base(s["base"]), adapter_dir).merge_and_unload()
    base_sd = load_base(s["base"]).state_dict()
    merged_sd = merged_model.state_dict()
    for k in saved:
        if ".lora_A." not in k:
            continue
        hf_name = k.removeprefix("base_model.model.").replace(".lora_A.weight", ".weight")
        assert merged_sd[hf_name].shape == base_sd[hf_name].shape, hf_name
        delta = s["lora_alpha"] / s["r"] * (saved[k.replace(".lora_A.", ".lora_B.")] @ saved[k])
        expected = base_sd[hf_name] + (delta.T if s["fan_in_fan_out"] else delta)
        assert torch.allclose(merged_sd[hf_name], expected, rtol=1e-5, atol=1e-6), hf_name
        reference["merged." + hf_name] = merged_sd[hf_name].detach().clone().contiguous()
    with torch.no_grad():
        merged_logits = merged_model(x).logits
    assert torch.allclose(merged_logits, logits.detach(), rtol=1e-4, atol=1e-5)

    # Training: the adapter only, llm.c's loader order, torch's AdamW.
    train = PeftModel.from_pretrained(load_base(s["base"]), adapter_dir, is_trainable=True).train()
    train_params = adapter_params(train)
    optimizer = torch.optim.AdamW(list(train_params.values()), lr=LR, betas=BETAS, eps=EPS,
                                  weight_decay=WEIGHT_DECAY, foreach=False, fused=False)
    losses = []
    for step in range(STEPS):
        xs, ys = batch(tokens, step, B, T)
        optimizer.zero_grad()
        _, step_loss = mean_loss(train, xs, ys)
        step_loss.backward()
        optimizer.step()
        losses.append(step_loss.item())
    assert abs(losses[0] - loss.item()) <= 1e-6 * abs(loss.item()), (losses[0], loss.item())
    reference["train_losses"] = torch.tensor(losses, dtype=torch.float32)
    for k, p in train_params.items():
        reference["final." + k] = p.detach().clone()
    save_file(reference, os.path.join(out, "reference.safetensors"))

    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        fan_in_fan_out = json.load(f)["fan_in_fan_out"]
    with open(os.path.join(out, "train.json"), "w") as f:
        json.dump({"base": os.path.join(s["base"], "fp32"), "r": s["r"],
                   "lora_alpha": s["lora_alpha"], "scaling": s["lora_alpha"] / s["r"],
                   "target_modules": s["target_modules"], "fan_in_fan_out": fan_in_fan_out,
                   "B": B, "T": T, "steps": STEPS, "lr": LR, "betas": list(BETAS), "eps": EPS,
                   "weight_decay": WEIGHT_DECAY}, f, indent=2)
        f.write("\n")

    print("wrote", out, "loss", loss.item(), "train", losses[0], "->", losses[-1])
    for k in sorted(saved):
        print(f"  {k} {tuple(saved[k].shape)}")
    print(f"  logits {tuple(logits.shape)}, {len(reference)} tensors in reference.safetensors")


def main():
    # PEFT writes target_modules from a set: its order in adapter_config.json follows str hashes.
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.execve(sys.executable, [sys.executable] + sys.argv,
                  dict(os.environ, PYTHONHASHSEED="0"))
    out = fixture_dir("lora_peft")
    for family, settings in FAMILIES.items():
        make_family(out, family, settings)
    write_versions(out, ["torch", "transformers", "peft", "safetensors", "numpy"])


if __name__ == "__main__":
    main()
