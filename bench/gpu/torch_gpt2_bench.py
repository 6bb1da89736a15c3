"""The PyTorch side of gpt2_gpu_bench: GPT-2 (pre-LN, tanh GELU, tied head, padded vocabulary,
the same shapes as hoist's model) trained with fused AdamW, in eager mode and under
torch.compile, at the batch and precision the C++ bench chose. Prints one line per mode:
"RESULT <mode> <tokens per second>" (or "SKIP <mode> <reason>")."""
import argparse
import math
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as error:  # the bench still prints hoist's figures
    print(f"SKIP all torch is not importable: {error}")
    sys.exit(0)


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(c)
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)
        self.ln2 = nn.LayerNorm(c)
        self.fc = nn.Linear(c, 4 * c)
        self.fc_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        shape = (b, t, self.heads, c // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt2(nn.Module):
    def __init__(self, layers, c, heads, vocab_padded, seq):
        super().__init__()
        self.wte = nn.Embedding(vocab_padded, c)
        self.wpe = nn.Embedding(seq, c)
        self.blocks = nn.ModuleList(Block(c, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(c)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.lnf(x), self.wte.weight)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def measure(mode, args):
    torch.manual_seed(0)
    model = Gpt2(args.layers, 768, 12, 50304, args.seq).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    step_model = torch.compile(model) if mode == "compile" else model
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    idx = torch.randint(0, 50257, (args.batch, args.seq), device="cuda")
    targets = torch.randint(0, 50257, (args.batch, args.seq), device="cuda")

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
            loss = step_model(idx, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    for _ in range(3 if mode == "eager" else 5):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    print(f"RESULT {mode} {args.steps * args.batch * args.seq / seconds:.1f}", flush=True)
    del model, optimizer, step_model
    torch.cuda.empty_cache()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--dtype", default="bf16")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32, as in hoist
    for mode in ("eager", "compile"):
        try:
            measure(mode, args)
        except Exception as error:  # out of memory, no compiler: report and go on
            print(f"SKIP {mode} {type(error).__name__}: {str(error).splitlines()[0][:200]}")
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
