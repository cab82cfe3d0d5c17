#!/usr/bin/env python3
"""Groups the per-kernel times of an Nsight Compute CSV (ncu --metrics gpu__time_duration.sum --csv) into
kernel families and prints each family's share of the profiled time as a Markdown table.

usage: bench/kernel_profile.py PROFILE.csv [--skip-launches N] [--label NAME]
Launches are summed in order; --skip-launches drops the first N (e.g. the warm-up step). Kernel times under
ncu are measured one kernel at a time (serialized, clocks locked), so shares are the useful figure."""
import argparse
import csv
import re
import sys

# (family, regular expression on the kernel name), first match wins.
FAMILIES = [
    ("GEMM (cuBLASLt)", r"gemm|sm90_xmma|cutlass|nvjet|Kernel2|splitkreduce"),
    ("attention forward", r"attention_fwd|attn_fwd|flash_fwd"),
    ("attention backward", r"attention_bwd|attn_bwd|flash_bwd|dq_|attention_dq"),
    # the general dual kernel's amax-only form (kAmaxOnly = true): the column amax pre-pass of tensor scales
    ("NVFP4 amax pre-pass (general dual kernel)", r"quantize_dual_kernel<.*(true|\(bool\)1)\s*>"),
    ("NVFP4 quantize (dual, fused X/X^T)", r"quantize_dual"),
    ("NVFP4 dequantize", r"dequant"),  # before the row quantizers: "dequantize_nvfp4" holds "quantize_nvfp4"
    ("NVFP4 quantize (rows)", r"quantize_nvfp4|quantize_rows|quantize_tiles"),
    ("NVFP4 amax pre-pass", r"amax"),
    ("cross-entropy / LM head loss", r"cross_entropy|softmax|logits|loss"),
    ("QK-norm + RoPE", r"rope"),
    ("reductions (norm weight grads, grad norm)", r"reduce_partials|chunk_sumsq|norm_clip|loss_sums"),
    ("RMSNorm (+ residual)", r"rmsnorm|norm"),
    ("SwiGLU", r"swiglu|silu"),
    ("AdamW", r"adamw"),
    ("embedding", r"embed"),
    ("casts / copies / fills", r"bf16|f32_to|copy|fill|memset|convert|cast"),
]


def family(name):
    low = name.lower()
    for fam, pattern in FAMILIES:
        if re.search(pattern, low):
            return fam
    return "other: " + name.split("(")[0][-60:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--skip-launches", type=int, default=0)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    rows = []
    with open(args.csv, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    for rec in csv.DictReader(lines):
        if rec.get("Metric Name") != "gpu__time_duration.sum":
            continue
        rows.append((rec["Kernel Name"], float(rec["Metric Value"].replace(",", ""))))
    rows = rows[args.skip_launches:]
    if not rows:
        sys.exit(f"kernel_profile: no gpu__time_duration.sum rows in {args.csv}")
    total = sum(t for _, t in rows)
    fams = {}
    for name, t in rows:
        n, s = fams.get(family(name), (0, 0.0))
        fams[family(name)] = (n + 1, s + t)
    print(f"{args.label} {len(rows)} kernel launches, {total / 1e6:.2f} ms of kernel time")
    print("| kernel family | launches | ms | share |")
    print("|---|---|---|---|")
    for fam, (n, t) in sorted(fams.items(), key=lambda kv: -kv[1][1]):
        print(f"| {fam} | {n} | {t / 1e6:.3f} | {100 * t / total:.1f}% |")


if __name__ == "__main__":
    main()
