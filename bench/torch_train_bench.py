#!/usr/bin/env python3
"""Training throughput of the same OLMo-2 model in PyTorch and in fp4train, in one run.

For each config: runs `<build>/train_bench --config C --batch B --seq T --steps N --warmup W --recipes R`
(fp4train's CUDA engine, one "train_bench: ..." line per recipe), then trains the model below in PyTorch
(BF16 autocast, torch.compile, fused AdamW, grad clip) on random tokens and times N steps after W warm-up
steps (which include compilation). Prints tokens/s, step time and peak memory of both and a Markdown table;
ratio = fp4train tokens/s / torch tokens/s (above 1: fp4train is faster). fp4train's memory is the drop in
free device memory while its engine runs (cudaMemGetInfo); torch's is max_memory_allocated over the timed
steps (the table), with max_memory_reserved printed alongside. --json FILE also writes one JSON object a
table row (the raw figures, as the C++ benches' --json does), which scripts/bench_to_json.py merges into
docs/benchmarks/latest.json.
Usage: torch_train_bench.py [--build-dir build-gpu] [--configs olmo2-30m,...] [--batch 16] [--seq 2048]
                            [--steps 20] [--warmup 5] [--recipes bf16[,nvidia-nvfp4,...]] [--json FILE]
                            [--cpu-smoke]
"""
import argparse
import datetime
import json
import math
import os
import re
import shlex
import subprocess
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 50304       # GPT-2's 50257 padded to a multiple of 128
VOCAB_REAL = 50257
NORM_EPS = 1e-6
ROPE_THETA = 500000.0
Z_LOSS = 1e-5
INIT_STD = 0.02

# RECIPES.md section 9: layers, d_model, heads, SwiGLU inner
CONFIGS = {
    "olmo2-30m": (6, 384, 6, 1024),
    "olmo2-70m": (8, 512, 8, 1024),
    "olmo2-150m": (12, 768, 12, 1536),
    "olmo2-370m": (16, 1024, 16, 4096),
}


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):  # statistics in FP32 whatever autocast hands in
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + NORM_EPS)
        return (y * self.weight).to(x.dtype)


def causal_attention(q, k, v):
    """[B, H, T, hd] -> [B, H, T, hd]. SDPA everywhere it exists (torch >= 2.0, required on the GPU); the
    explicit form only serves the CPU smoke test under the build machine's torch 1.13."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t = q.shape[-2]
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    return torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v


class Block(nn.Module):
    """OLMo-2 block: h = x + RMSNorm(attn(x)); out = h + RMSNorm(mlp(h)); QK-norm over the full q and k."""

    def __init__(self, d, heads, ff):
        super().__init__()
        self.d, self.heads, self.ff = d, heads, ff
        self.wqkv = nn.Linear(d, 3 * d, bias=False)
        self.q_norm = RMSNorm(d)
        self.k_norm = RMSNorm(d)
        self.wo = nn.Linear(d, d, bias=False)
        self.attn_norm = RMSNorm(d)
        self.w_gate_up = nn.Linear(d, 2 * ff, bias=False)
        self.w_down = nn.Linear(ff, d, bias=False)
        self.mlp_norm = RMSNorm(d)

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        hd = d // self.heads
        q, k, v = self.wqkv(x).split(d, dim=-1)
        q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = (z.view(b, t, self.heads, hd).transpose(1, 2) for z in (q, k, v))
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        y = causal_attention(q, k, v).transpose(1, 2).reshape(b, t, d)
        h = x + self.attn_norm(self.wo(y))
        gate, up = self.w_gate_up(h).split(self.ff, dim=-1)
        return h + self.mlp_norm(self.w_down(F.silu(gate) * up))


def rope(x, cos, sin):
    """Rotate-half RoPE; cos/sin [T, hd] in FP32, result in x's dtype."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x.float() * cos + rot.float() * sin).to(x.dtype)


class Olmo2(nn.Module):
    def __init__(self, layers, d, heads, ff, seq, vocab=VOCAB, vocab_real=VOCAB_REAL):
        super().__init__()
        self.vocab_real = vocab_real
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads, ff) for _ in range(layers))
        self.final_norm = RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        hd = d // heads
        inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        ang = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq)
        emb = torch.cat([ang, ang], dim=-1)
        self.register_buffer("cos", emb.cos().float(), persistent=False)
        self.register_buffer("sin", emb.sin().float(), persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:  # normal std 0.02 truncated at 3 sigma; norm weights stay 1
                nn.init.trunc_normal_(p, std=INIT_STD, a=-3 * INIT_STD, b=3 * INIT_STD)

    def forward(self, tokens, targets):
        """Mean over tokens of cross-entropy + z-loss * logsumexp^2; padded ids are not in the softmax."""
        t = tokens.shape[1]
        cos, sin = self.cos[:t], self.sin[:t]
        x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x, cos, sin)
        logits = self.lm_head(self.final_norm(x))[..., : self.vocab_real].float()
        logits = logits.reshape(-1, self.vocab_real)
        lse = torch.logsumexp(logits, dim=-1)
        ce = lse - logits.gather(1, targets.reshape(-1, 1)).squeeze(1)
        return (ce + Z_LOSS * lse.pow(2)).mean()


def make_optimizer(model, fused):
    """AdamW (0.9, 0.95), eps 1e-8, weight decay 0.1 on the matrices except the embedding."""
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and not n.startswith("embed")]
    rest = [p for n, p in model.named_parameters() if not (p.dim() == 2 and not n.startswith("embed"))]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    kw = {"fused": True} if fused else {}
    return torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, **kw)


def train_step(step_fn, model, opt, tokens, targets, autocast):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        loss = step_fn(tokens, targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


COMPILE_MODES = ["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]


def bench_torch(cfg, batch, seq, steps, warmup, compile_mode="default"):
    """Returns (tokens/s, ms/step, peak allocated GiB, peak reserved GiB, last loss)."""
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = Olmo2(*CONFIGS[cfg], seq=seq).to(dev)
    opt = make_optimizer(model, fused=True)
    compiled = torch.compile(model, mode=compile_mode, dynamic=False)
    tokens = torch.randint(0, VOCAB_REAL, (batch, seq), device=dev)
    targets = torch.randint(0, VOCAB_REAL, (batch, seq), device=dev)
    for _ in range(warmup):
        train_step(compiled, model, opt, tokens, targets, True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        loss = train_step(compiled, model, opt, tokens, targets, True)
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end) / steps
    peak = torch.cuda.max_memory_allocated() / 2**30
    reserved = torch.cuda.max_memory_reserved() / 2**30
    last = loss.item()
    del model, opt, compiled, tokens, targets, loss
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    return batch * seq / (ms / 1e3), ms, peak, reserved, last


LINE = re.compile(r"^train_bench: (?P<head>.*): (?P<tps>[\d.eE+-]+) tokens/s, (?P<ms>[\d.eE+-]+) ms/step, "
                  r"device memory (?P<mem>[\d.eE+-]+) GiB")


def parse_fp4(stdout):
    """Every 'train_bench:' result line as {recipe, tps, ms, mem, line}."""
    rows = []
    for line in stdout.splitlines():
        m = LINE.match(line.strip())
        if not m:
            continue
        r = re.search(r"\brecipe (\S+)", m["head"])
        rows.append({"recipe": r[1] if r else "bf16", "tps": float(m["tps"]), "ms": float(m["ms"]),
                     "mem": float(m["mem"]), "line": line.strip()})
    return rows


def bench_fp4(exe, cfg, batch, seq, steps, warmup, recipes):
    cmd = [exe, "--config", cfg, "--batch", str(batch), "--seq", str(seq), "--steps", str(steps),
           "--warmup", str(warmup), "--recipes", recipes]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    rows = parse_fp4(r.stdout)
    if not rows:
        raise RuntimeError(f"no 'train_bench:' result line in the output of {' '.join(cmd)}:\n{r.stdout}")
    return rows


def fmt(x, digits=1):
    return "-" if x is None else f"{x:,.{digits}f}"


def cpu_smoke():
    """Tiny model on the CPU in FP32, no compile: forward, backward, clip and one AdamW step; checks that
    the loss at init is near ln(vocab), every parameter gets a finite non-zero gradient, the step moves the
    weights, causality holds (changing a later token leaves earlier positions' logits alone) and the parser
    reads a train_bench line."""
    torch.manual_seed(0)
    vocab, vocab_real, seq, batch = 384, 300, 16, 2
    model = Olmo2(2, 64, 4, 128, seq=seq, vocab=vocab, vocab_real=vocab_real)
    opt = make_optimizer(model, fused=False)
    tokens = torch.randint(0, vocab_real, (batch, seq))
    targets = torch.randint(0, vocab_real, (batch, seq))
    loss = model(tokens, targets)
    ok = abs(loss.item() - math.log(vocab_real)) < 0.5
    print(f"cpu-smoke: loss at init {loss.item():.4f} (ln {vocab_real} = {math.log(vocab_real):.4f})")
    loss.backward()
    for n, p in model.named_parameters():
        if p.grad is None or not torch.isfinite(p.grad).all() or p.grad.abs().max() == 0:
            print(f"cpu-smoke: bad gradient for {n}")
            ok = False
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    moved = all(not torch.equal(before[n], p.detach()) for n, p in model.named_parameters())
    ok &= moved
    # causality: position j's hidden state must not depend on tokens after j
    with torch.no_grad():
        def hidden(tok):
            x = model.embed(tok)
            for blk in model.blocks:
                x = blk(x, model.cos, model.sin)
            return x
        t2 = tokens.clone()
        t2[:, seq // 2:] = (t2[:, seq // 2:] + 1) % vocab_real
        h1, h2 = hidden(tokens), hidden(t2)
        causal = torch.allclose(h1[:, : seq // 2], h2[:, : seq // 2], atol=1e-5)
        changed = not torch.allclose(h1[:, seq // 2:], h2[:, seq // 2:], atol=1e-5)
    ok &= causal and changed
    sample = ("train_bench: olmo2-30m recipe bf16 B16 T2048 x1 micro-batches on NVIDIA H200: 1234567 tokens/s, "
              "26.5 ms/step, device memory 7.25 GiB, last loss 10.9, step time vs bf16 1x, memory vs bf16 1x\n")
    rows = parse_fp4("noise\n" + sample)
    parsed = len(rows) == 1 and rows[0]["recipe"] == "bf16" and rows[0]["tps"] == 1234567 and rows[0]["mem"] == 7.25
    ok &= parsed
    print(f"cpu-smoke: gradients finite, step moves weights {moved}, causal {causal and changed}, parser {parsed}")
    print("cpu-smoke: OK" if ok else "cpu-smoke: FAILED")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default="build-gpu")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--recipes", default="bf16", help="passed to train_bench; bf16 is compared with torch")
    ap.add_argument("--compile-mode", default="default",
                    help="torch.compile mode(s) of the PyTorch side, comma-separated (" + ", ".join(COMPILE_MODES)
                    + "); with several, each config is timed in every mode and compared with the fastest")
    ap.add_argument("--json", help="also write one JSON object a table row to this file (truncated)")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny FP32 model on the CPU, no GPU needed")
    args = ap.parse_args()
    configs = [c for c in args.configs.split(",") if c]
    for c in configs:
        if c not in CONFIGS:
            ap.error(f"unknown config {c} (known: {', '.join(CONFIGS)})")
    modes = [m for m in args.compile_mode.split(",") if m]
    for m in modes:
        if m not in COMPILE_MODES:
            ap.error(f"unknown --compile-mode {m} (known: {', '.join(COMPILE_MODES)})")
    if not modes:
        ap.error("--compile-mode names no mode")
    if args.cpu_smoke:
        return cpu_smoke()
    if not torch.cuda.is_available():
        print("torch_train_bench: no CUDA device", file=sys.stderr)
        return 1
    exe = os.path.join(args.build_dir, "train_bench")
    if not os.path.exists(exe):
        print(f"torch_train_bench: {exe} not found (build the train_bench target)", file=sys.stderr)
        return 1
    print(f"torch_train_bench: torch {torch.__version__} on {torch.cuda.get_device_name()}, "
          f"B{args.batch} T{args.seq}, {args.warmup} warm-up + {args.steps} timed steps, "
          f"torch.compile mode(s) {', '.join(modes)}", flush=True)
    # The run's identity on every JSON line (bench/bench_json.h writes the same fields).
    ident = {"bench": "torch_train_bench", "device": torch.cuda.get_device_name(),
             "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
             "command": shlex.join(["python3", sys.argv[0]] + sys.argv[1:])}
    json_out = open(args.json, "w") if args.json else None
    table = []
    for cfg in configs:
        fp4_rows = bench_fp4(exe, cfg, args.batch, args.seq, args.steps, args.warmup, args.recipes)
        for r in fp4_rows:
            print("  " + r["line"], flush=True)
        # PyTorch in every requested mode; the fastest is the baseline (the strongest PyTorch measured).
        best = None
        for mode in modes:
            tps, ms, peak, reserved, last = bench_torch(cfg, args.batch, args.seq, args.steps, args.warmup, mode)
            print(f"  torch ({mode}): {cfg}: {tps:,.0f} tokens/s, {ms:.2f} ms/step, peak allocated {peak:.2f} GiB "
                  f"(reserved {reserved:.2f} GiB), last loss {last:.4f}", flush=True)
            if best is None or tps > best[0]:
                best = (tps, ms, peak, mode)
        tps, ms, peak, mode = best
        base = next((r for r in fp4_rows if r["recipe"] == "bf16"), None)
        ordered = ([base] if base else []) + [r for r in fp4_rows if r is not base]
        for r in ordered:
            label = cfg if r is base else f"{cfg} [{r['recipe']}]"
            table.append((label, mode, tps, r["tps"], r["tps"] / tps, ms, r["ms"], peak, r["mem"]))
            if json_out:
                row = {"config": cfg, "recipe": r["recipe"], "torch_mode": mode, "torch_version": torch.__version__,
                       "batch": args.batch, "seq": args.seq, "steps": args.steps, "warmup": args.warmup,
                       "torch_tokens_s": tps, "torch_ms_step": ms, "torch_peak_gib": peak,
                       "fp4train_tokens_s": r["tps"], "fp4train_ms_step": r["ms"], "fp4train_memory_gib": r["mem"]}
                json_out.write(json.dumps({**row, **ident}) + "\n")
                json_out.flush()
    print("\n| config | torch mode | torch tokens/s | fp4train tokens/s | ratio | torch step ms | fp4train step ms "
          "| torch peak GiB | fp4train GiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, mode, ttps, ftps, ratio, tms, fms, tmem, fmem in table:
        print(f"| {label} | {mode} | {fmt(ttps, 0)} | {fmt(ftps, 0)} | {ratio:.2f} | {fmt(tms, 2)} | {fmt(fms, 2)} "
              f"| {fmt(tmem, 2)} | {fmt(fmem, 2)} |")
    print("\nratio = fp4train tokens/s / torch tokens/s (torch in its fastest requested mode); rows with [recipe] "
          "compare that fp4train recipe with torch BF16.")
    if json_out:
        json_out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
