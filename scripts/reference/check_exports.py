#!/usr/bin/env python3
"""Manual check: what `hoist export` writes loads in transformers and PEFT and gives hoist's loss.

    OMP_NUM_THREADS=1 .venv-ref/bin/python scripts/reference/check_exports.py --hoist build/hoist

Needs torch, transformers and peft (scripts/reference/requirements.txt). For each family
(llama, qwen2, qwen3, mistral, gemma2 by default; fixtures in tests/data/FAMILY_hf/: fp32/ a
Hugging Face checkpoint, train.bin an llm.c token shard, train.json B, T and the AdamW settings),
in a temporary directory:

  full   `hoist train` 4 steps from model.init_from=FAMILY_hf/fp32 (fp32, one rank, the fixture's
         AdamW, no clipping), a checkpoint at step 3. Step 4's loss in the JSONL log is the loss of
         the step-3 weights on the 4th micro-batch of train.bin (llm.c's order: tokens
         [3*B*T, 4*B*T + 1)). `hoist export --format hf` of step 3 is loaded with
         AutoModelForCausalLM (float32, eager attention) and its mean cross-entropy on that batch
         compared with hoist's (1e-5 relative). The export's config.json must load with
         AutoConfig, name the family's model_type and class, and equal the fixture's config.json;
         its safetensors must hold the fixture's tensor names and shapes, and from_pretrained must
         report no missing, unexpected or mismatched weights.
  lora   the same run with a `lora` section (r 4, lora_alpha 8, target_modules all-linear).
         `hoist export --format peft` of step 3 is loaded onto the fp32/ base with
         PeftModel.from_pretrained: its adapter keys and shapes must be those PEFT itself makes for
         that LoraConfig, the loaded adapter tensors must equal the file's, and the loss must be
         hoist's; saved again by PeftModel.save_pretrained, adapter_model.safetensors must be the
         same bytes. `hoist export --format hf` of the same checkpoint (the adapters merged) is
         loaded plain: the same loss, and every tensor no adapter touches bit-identical to the base.
  init   (a sanity check of the batch order) step 1's loss against the fp32/ fixture's loss on
         the first micro-batch.
  bf16   for --bf16-families (default llama): the full run with bf16.enabled=true, exported with
         --dtype bf16 (config.json dtype bfloat16, BF16 tensors, loaded with dtype="auto" as
         bfloat16) and with the default dtype (fp32 master weights), each compared with hoist's
         bf16 step-4 loss at 1e-2 relative.

Prints one table row per check (family / mode / hoist loss / transformers loss / relative
difference / result) and the problems found under it; exits 1 when any check fails or
disagrees, 0 otherwise. --keep keeps the run directories (their path is printed).
"""
import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import traceback

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

FAMILIES = ["llama", "qwen2", "qwen3", "mistral", "gemma2"]
CLASSES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
           "qwen3": "Qwen3ForCausalLM", "mistral": "MistralForCausalLM",
           "gemma2": "Gemma2ForCausalLM"}
LORA = {"r": 4, "lora_alpha": 8, "target_modules": "all-linear"}
STEPS, CHECKPOINT_STEP = 4, 3
FP32_TOL, BF16_TOL = 1e-5, 1e-2
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class CheckFailed(Exception):
    pass


# --- files -------------------------------------------------------------------------------------

def read_tokens(path):
    """An llm.c token shard: a 256-int32 header [magic, version, count], then the tokens."""
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), np.int32)
        magic, count = int(header[0]), int(header[2])
        dtype = {20240520: np.uint16, 20240801: np.uint32}.get(magic)
        if dtype is None:
            raise CheckFailed(f"{path}: unknown token shard magic {magic}")
        tokens = np.frombuffer(f.read(), dtype)
    if len(tokens) != count:
        raise CheckFailed(f"{path}: header says {count} tokens, file holds {len(tokens)}")
    return tokens.astype(np.int64)


def micro_batch(tokens, step, B, T):
    """llm.c's loader: step `step` (0-based) reads tokens [step*B*T, step*B*T + B*T + 1)."""
    w = torch.from_numpy(tokens[step * B * T: step * B * T + B * T + 1].copy())
    if w.numel() != B * T + 1:
        raise CheckFailed(f"train.bin holds too few tokens for micro-batch {step + 1}")
    return w[:-1].view(B, T), w[1:].view(B, T)


def safetensors_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return header.pop("__metadata__", None), header


def load_tensors(path):
    from safetensors.torch import load_file
    return load_file(path)


def read_json(path):
    with open(path) as f:
        return json.load(f)


# --- hoist ---------------------------------------------------------------------------------------

def run(cmd, cwd, what, timeout=600):
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        tail = (p.stdout + p.stderr).strip().splitlines()[-15:]
        raise CheckFailed(f"{what} exited {p.returncode}: {' '.join(cmd)}\n      "
                          + "\n      ".join(tail))
    return p


def train(args, family, rundir, lora=False, bf16=False):
    """Runs STEPS steps with a checkpoint at CHECKPOINT_STEP; returns (losses by step, step dir)."""
    data = os.path.join(args.data, f"{family}_hf")
    spec = read_json(os.path.join(data, "train.json"))
    job = {
        "model": {"init_from": os.path.join(data, "fp32"), "seq_len": spec["T"]},
        "train_micro_batch_size_per_gpu": spec["B"],
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW",
                      "params": {"lr": spec["lr"], "betas": spec["betas"], "eps": spec["eps"],
                                 "weight_decay": spec["weight_decay"]}},
        "gradient_clipping": 0.0,
        "steps_per_print": 0,
        "train": {"steps": STEPS, "seed": 1, "eval_interval": 0},
        "data": {"train": os.path.join(data, "train.bin")},
        "monitor": {"jsonl": {"path": "train.jsonl"}},
        "checkpoint": {"dir": "checkpoints", "interval_steps": CHECKPOINT_STEP},
    }
    if lora:
        job["lora"] = dict(LORA)
    if bf16:
        job["bf16"] = {"enabled": True}
    os.makedirs(rundir)
    with open(os.path.join(rundir, "job.json"), "w") as f:
        json.dump(job, f, indent=2)
    run([args.hoist, "train", "-c", "job.json", "--device", args.device], rundir, "hoist train")
    losses = {}
    with open(os.path.join(rundir, "train.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            if "step" in record and "loss" in record and record.get("rank", 0) == 0:
                losses[int(record["step"])] = float(record["loss"])
    for s in (1, STEPS):
        if s not in losses:
            raise CheckFailed(f"{rundir}/train.jsonl has no loss for step {s}: {sorted(losses)}")
    step_dir = os.path.join(rundir, "checkpoints", f"step_{CHECKPOINT_STEP:08d}")
    if not os.path.isdir(step_dir):
        raise CheckFailed(f"no checkpoint {step_dir}: {os.listdir(os.path.dirname(step_dir))}")
    return losses, step_dir


def export(args, step_dir, fmt, out, dtype=None):
    cmd = [args.hoist, "export", "--checkpoint", step_dir, "--format", fmt, "-o", out]
    if dtype:
        cmd += ["--dtype", dtype]
    run(cmd, os.path.dirname(out), f"hoist export --format {fmt}")
    return out


# --- transformers / peft -------------------------------------------------------------------------

def mean_loss(model, x, y):
    with torch.no_grad():
        logits = model(input_ids=x).logits.float()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             y.reshape(-1)).item()


def load_causal_lm(folder, dtype, problems, what):
    from transformers import AutoModelForCausalLM
    model, info = AutoModelForCausalLM.from_pretrained(
        folder, dtype=dtype, attn_implementation="eager", output_loading_info=True)
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(kind):
            problems.append(f"{what}: from_pretrained {kind}: {sorted(map(str, info[kind]))}")
    return model.eval()


def check_hf_dir(family, folder, fixture, want_dtype, problems, what):
    """config.json (AutoConfig, model_type, architectures, equal to the fixture's) and the
    safetensors (the fixture's names and shapes, the asked dtype)."""
    from transformers import AutoConfig
    config = AutoConfig.from_pretrained(folder)
    if config.model_type != family:
        problems.append(f"{what}: config.json model_type {config.model_type!r}, want {family!r}")
    if list(config.architectures or []) != [CLASSES[family]]:
        problems.append(f"{what}: config.json architectures {config.architectures}, "
                        f"want [{CLASSES[family]!r}]")
    mine, theirs = read_json(os.path.join(folder, "config.json")), \
        read_json(os.path.join(fixture, "config.json"))
    want_config_dtype = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[want_dtype]
    if mine.get("dtype") != want_config_dtype:
        problems.append(f"{what}: config.json dtype {mine.get('dtype')!r}, "
                        f"want {want_config_dtype!r}")
    for key in sorted(set(mine) | set(theirs)):
        if key == "dtype":
            continue
        if mine.get(key, "<absent>") != theirs.get(key, "<absent>"):
            problems.append(f"{what}: config.json {key} = {json.dumps(mine.get(key, '<absent>'))},"
                            f" the base's {json.dumps(theirs.get(key, '<absent>'))}")
    files = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
    if files != ["model.safetensors"]:
        problems.append(f"{what}: safetensors files {files}, want ['model.safetensors']")
        return
    meta, header = safetensors_header(os.path.join(folder, "model.safetensors"))
    _, base = safetensors_header(os.path.join(fixture, "model.safetensors"))
    if meta != {"format": "pt"}:
        problems.append(f"{what}: model.safetensors metadata {meta}, want {{'format': 'pt'}}")
    if sorted(header) != sorted(base):
        problems.append(f"{what}: model.safetensors tensors missing "
                        f"{sorted(set(base) - set(header))}, extra {sorted(set(header) - set(base))}")
    for name in sorted(set(header) & set(base)):
        if header[name]["shape"] != base[name]["shape"]:
            problems.append(f"{what}: {name} shape {header[name]['shape']}, "
                            f"the base's {base[name]['shape']}")
        if header[name]["dtype"] != want_dtype:
            problems.append(f"{what}: {name} dtype {header[name]['dtype']}, want {want_dtype}")


def check_model_class(family, model, dtype, problems, what):
    if type(model).__name__ != CLASSES[family]:
        problems.append(f"{what}: loaded as {type(model).__name__}, want {CLASSES[family]}")
    dtypes = sorted({str(p.dtype) for p in model.parameters()})
    if dtypes != [str(dtype)]:
        problems.append(f"{what}: parameters load as {dtypes}, want {dtype}")


def check_peft_dir(family, folder, fixture, problems, what):
    """adapter_config.json and adapter_model.safetensors against what PEFT itself makes for the
    same LoraConfig on the same base."""
    from peft import LoraConfig, PeftConfig, get_peft_model, get_peft_model_state_dict
    config = PeftConfig.from_pretrained(folder)
    want = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": LORA["r"],
            "lora_alpha": LORA["lora_alpha"], "bias": "none", "use_rslora": False,
            "lora_dropout": 0.0}
    for key, value in want.items():
        got = getattr(config, key)
        got = getattr(got, "value", got)
        if got != value:
            problems.append(f"{what}: adapter_config.json {key} {got!r}, want {value!r}")
    meta, header = safetensors_header(os.path.join(folder, "adapter_model.safetensors"))
    if meta != {"format": "pt"}:
        problems.append(f"{what}: adapter_model.safetensors metadata {meta}")
    base = load_causal_lm(fixture, torch.float32, problems, what + " base")
    reference = get_peft_model(base, LoraConfig(task_type="CAUSAL_LM", **LORA))
    ref = get_peft_model_state_dict(reference)
    if sorted(ref) != sorted(header):
        problems.append(f"{what}: adapter tensors missing {sorted(set(ref) - set(header))}, "
                        f"extra {sorted(set(header) - set(ref))} (PEFT's own keys for "
                        f"target_modules all-linear)")
    for name in sorted(set(ref) & set(header)):
        if list(ref[name].shape) != header[name]["shape"]:
            problems.append(f"{what}: {name} shape {header[name]['shape']}, "
                            f"PEFT's {list(ref[name].shape)}")
    want_modules = sorted(set(reference.peft_config["default"].target_modules))
    got_modules = config.target_modules
    got_modules = sorted([got_modules] if isinstance(got_modules, str) else set(got_modules))
    if got_modules != want_modules and got_modules != ["all-linear"]:
        problems.append(f"{what}: adapter_config.json target_modules {got_modules}, "
                        f"PEFT resolves all-linear to {want_modules}")


def peft_loss(folder, fixture, dtype, x, y, problems, what, resave_dir=None):
    from peft import PeftModel, get_peft_model_state_dict
    base = load_causal_lm(fixture, dtype, problems, what + " base")
    model = PeftModel.from_pretrained(base, folder).eval()
    loaded = get_peft_model_state_dict(model)
    stored = load_tensors(os.path.join(folder, "adapter_model.safetensors"))
    for name in sorted(set(loaded) | set(stored)):
        if name not in loaded or name not in stored:
            problems.append(f"{what}: adapter tensor {name} only in "
                            f"{'the file' if name in stored else 'the PeftModel'}")
        elif not torch.equal(loaded[name].to(stored[name].dtype).cpu(), stored[name]):
            problems.append(f"{what}: the PeftModel's {name} is not the file's")
    if resave_dir is not None:
        # The README: "the same bytes as PEFT's file for the same adapters".
        model.save_pretrained(resave_dir)
        with open(os.path.join(folder, "adapter_model.safetensors"), "rb") as a, \
                open(os.path.join(resave_dir, "adapter_model.safetensors"), "rb") as b:
            if a.read() != b.read():
                problems.append(f"{what}: adapter_model.safetensors is not the bytes PEFT's "
                                f"save_pretrained writes for the same adapters ({resave_dir})")
    return mean_loss(model, x, y)


def check_untouched(merged_dir, fixture, problems, what):
    """The merged export: every tensor without an adapter (norms, embeddings, head, biases) is
    the base's, bit for bit; each adapted weight moved."""
    merged = load_tensors(os.path.join(merged_dir, "model.safetensors"))
    base = load_tensors(os.path.join(fixture, "model.safetensors"))
    adapted = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
               "gate_proj.weight", "up_proj.weight", "down_proj.weight")
    for name in sorted(set(merged) & set(base)):
        same = torch.equal(merged[name], base[name])
        if name.endswith(adapted) and same:
            problems.append(f"{what}: {name} equals the base's (no adapter merged into it)")
        if not name.endswith(adapted) and not same:
            problems.append(f"{what}: {name} differs from the base's, though no adapter "
                            f"targets it (max |diff| "
                            f"{(merged[name] - base[name]).abs().max().item():.3g})")


# --- the checks ----------------------------------------------------------------------------------

class Table:
    def __init__(self):
        self.rows, self.problems, self.failed = [], [], False

    def add(self, family, mode, hoist, theirs, tol, problems):
        rel = abs(hoist - theirs) / abs(theirs) if hoist is not None and theirs is not None \
            else None
        ok = rel is not None and math.isfinite(rel) and rel <= tol and not problems
        if rel is None:
            result = "ERROR"
        elif not math.isfinite(rel) or rel > tol:
            result = "MISMATCH"
        else:
            result = "ok" if not problems else "PROBLEMS"
        self.failed |= not ok
        self.rows.append((family, mode, hoist, theirs, rel, tol, result))
        self.problems += [f"{family} / {mode}: {p}" for p in problems]
        row = self.rows[-1]
        print(self.format(row), flush=True)

    @staticmethod
    def header():
        return (f"{'family':<8} {'mode':<22} {'hoist loss':>12} {'transformers':>12} "
                f"{'rel diff':>9} {'tol':>6}  result")

    @staticmethod
    def format(row):
        family, mode, hoist, theirs, rel, tol, result = row

        def num(v, fmt):
            return format(v, fmt) if v is not None else format("-", ">" + fmt.split(".")[0])
        return (f"{family:<8} {mode:<22} {num(hoist, '12.7f')} {num(theirs, '12.7f')} "
                f"{num(rel, '9.2e')} {tol:6.0e}  {result}")


def guarded(table, family, mode, tol, fn):
    """Runs fn(problems) -> (hoist loss, transformers loss); a failure becomes an ERROR row."""
    problems = []
    hoist = theirs = None
    try:
        hoist, theirs = fn(problems)
    except CheckFailed as e:
        problems.append(str(e))
    except Exception as e:  # a load that transformers or peft refuses, with its traceback
        problems.append(f"{type(e).__name__}: {e}\n      "
                        + "\n      ".join(traceback.format_exc().strip().splitlines()[-6:]))
    table.add(family, mode, hoist, theirs, tol, problems)


def check_family(args, table, family, root):
    fixture = os.path.join(args.data, f"{family}_hf", "fp32")
    spec = read_json(os.path.join(args.data, f"{family}_hf", "train.json"))
    B, T = spec["B"], spec["T"]
    tokens = read_tokens(os.path.join(args.data, f"{family}_hf", "train.bin"))
    x0, y0 = micro_batch(tokens, 0, B, T)
    x, y = micro_batch(tokens, CHECKPOINT_STEP, B, T)  # the batch of step CHECKPOINT_STEP + 1
    state = {}

    def full(problems):
        rundir = os.path.join(root, family, "full")
        losses, step_dir = train(args, family, rundir)
        state["full_step1"] = losses[1]
        out = export(args, step_dir, "hf", os.path.join(rundir, "export_hf"))
        check_hf_dir(family, out, fixture, "F32", problems, "hf export")
        model = load_causal_lm(out, torch.float32, problems, "hf export")
        check_model_class(family, model, torch.float32, problems, "hf export")
        return losses[STEPS], mean_loss(model, x, y)

    def init(problems):
        if "full_step1" not in state:
            raise CheckFailed("the full run did not finish")
        model = load_causal_lm(fixture, torch.float32, problems, "fp32 fixture")
        return state["full_step1"], mean_loss(model, x0, y0)

    def lora_peft(problems):
        rundir = os.path.join(root, family, "lora")
        losses, step_dir = train(args, family, rundir, lora=True)
        state["lora"] = (losses, step_dir)
        out = export(args, step_dir, "peft", os.path.join(rundir, "export_peft"))
        check_peft_dir(family, out, fixture, problems, "peft export")
        return losses[STEPS], peft_loss(out, fixture, torch.float32, x, y, problems,
                                        "peft export", os.path.join(rundir, "peft_resaved"))

    def lora_merged(problems):
        if "lora" not in state:
            raise CheckFailed("the LoRA run did not finish")
        losses, step_dir = state["lora"]
        out = export(args, step_dir, "hf", os.path.join(root, family, "lora", "export_hf"))
        check_hf_dir(family, out, fixture, "F32", problems, "merged hf export")
        check_untouched(out, fixture, problems, "merged hf export")
        model = load_causal_lm(out, torch.float32, problems, "merged hf export")
        check_model_class(family, model, torch.float32, problems, "merged hf export")
        return losses[STEPS], mean_loss(model, x, y)

    def bf16(problems):
        rundir = os.path.join(root, family, "bf16")
        losses, step_dir = train(args, family, rundir, bf16=True)
        state["bf16"] = (losses, step_dir)
        out = export(args, step_dir, "hf", os.path.join(rundir, "export_hf_bf16"), dtype="bf16")
        check_hf_dir(family, out, fixture, "BF16", problems, "bf16 hf export")
        model = load_causal_lm(out, "auto", problems, "bf16 hf export")
        check_model_class(family, model, torch.bfloat16, problems, "bf16 hf export (dtype auto)")
        return losses[STEPS], mean_loss(model, x, y)

    def bf16_fp32(problems):
        if "bf16" not in state:
            raise CheckFailed("the bf16 run did not finish")
        losses, step_dir = state["bf16"]
        out = export(args, step_dir, "hf", os.path.join(root, family, "bf16", "export_hf_fp32"))
        check_hf_dir(family, out, fixture, "F32", problems, "bf16 run, fp32 hf export")
        model = load_causal_lm(out, torch.float32, problems, "bf16 run, fp32 hf export")
        return losses[STEPS], mean_loss(model, x, y)

    def bf16_lora(problems):
        rundir = os.path.join(root, family, "bf16_lora")
        losses, step_dir = train(args, family, rundir, lora=True, bf16=True)
        out = export(args, step_dir, "peft", os.path.join(rundir, "export_peft"), dtype="bf16")
        meta, header = safetensors_header(os.path.join(out, "adapter_model.safetensors"))
        dtypes = sorted({t["dtype"] for t in header.values()})
        if dtypes != ["BF16"]:
            problems.append(f"bf16 peft export: adapter dtypes {dtypes}, want ['BF16']")
        return losses[STEPS], peft_loss(out, fixture, torch.bfloat16, x, y, problems,
                                        "bf16 peft export")

    guarded(table, family, "full  hf fp32", FP32_TOL, full)
    guarded(table, family, "init  (step 1, base)", FP32_TOL, init)
    guarded(table, family, "lora  peft fp32", FP32_TOL, lora_peft)
    guarded(table, family, "lora  hf merged fp32", FP32_TOL, lora_merged)
    if family in args.bf16_families:
        guarded(table, family, "bf16  hf --dtype bf16", BF16_TOL, bf16)
        guarded(table, family, "bf16  hf fp32", BF16_TOL, bf16_fp32)
        guarded(table, family, "bf16  lora peft bf16", BF16_TOL, bf16_lora)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hoist", required=True, help="the hoist binary")
    parser.add_argument("--data", default=os.path.join(REPO, "tests", "data"),
                        help="the fixtures' directory (tests/data)")
    parser.add_argument("--families", nargs="+", default=FAMILIES, choices=FAMILIES)
    parser.add_argument("--bf16-families", nargs="*", default=["llama"], choices=FAMILIES)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"],
                        help="hoist train --device (default cpu)")
    parser.add_argument("--workdir", help="run here (default: a new temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the run directories")
    args = parser.parse_args()
    args.hoist = os.path.abspath(args.hoist)
    args.data = os.path.abspath(args.data)
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    import warnings
    import transformers
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)

    if args.workdir:
        os.makedirs(args.workdir, exist_ok=True)
        root = tempfile.mkdtemp(prefix="check_exports.", dir=args.workdir)
    else:
        root = tempfile.mkdtemp(prefix="check_exports.")
    table = Table()
    print(f"runs in {root}", flush=True)
    print(Table.header(), flush=True)
    try:
        for family in args.families:
            check_family(args, table, family, root)
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)

    print()
    print(Table.header())
    for row in table.rows:
        print(Table.format(row))
    if table.problems:
        print("\nproblems:")
        for p in table.problems:
            print("  " + p)
    print("\n" + ("FAILED" if table.failed else "all exports load and match hoist's losses"))
    return 1 if table.failed else 0


if __name__ == "__main__":
    sys.exit(main())
