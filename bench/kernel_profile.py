#!/usr/bin/env python3
"""Groups the per-kernel times of an Nsight Compute CSV (ncu --metrics gpu__time_duration.sum --csv) into
kernel families and prints each family's share of the profiled time as a Markdown table.

usage: bench/kernel_profile.py PROFILE.csv [--skip-launches N] [--label NAME] [--phases]
Launches are summed in order; --skip-launches drops the first N (e.g. the warm-up step). Kernel times under
ncu are measured one kernel at a time (serialized, clocks locked), so shares are the useful figure.
--phases adds a table per phase of the training step (forward, loss, backward, optimizer), cut at the
engine's marker kernels: the embedding's forward opens a step, the cross-entropy kernel is the loss, the
embedding's backward ends the backward. Kernels of one name serve several phases (the NVFP4 quantizers quantize
activations and Q-Root's Newton-Schulz operands alike, cuBLASLt multiplies both), which only the phase tells
apart."""
import argparse
import csv
import re
import sys

# (family, regular expression on the kernel name), first match wins.
FAMILIES = [
    ("GEMM (cuBLASLt)", r"gemm|sm90_xmma|cutlass|nvjet|Kernel2|splitkreduce"),
    # Q-Attn (fused, q_attention_cuda.h): the backward with dS quantized in registers, its operand quantizers
    ("Q-Attn backward (NVFP4 dS)", r"q_attn_bwd|q_attn_dq"),
    ("Q-Attn operand quantizers", r"slice_amax|requantize_along_sequence|scale_log2"),
    # ROOT / Q-Root (root_cuda.h, newton_schulz_cuda.h): everything but the quantizers and GEMMs it calls
    ("ROOT: |U| sort (cub radix)", r"radixsort|onesweep"),
    ("ROOT: momentum, clip, check, commit", r"momentum_kernel|select_kernel|clamp_kernel|check_kernel|commit_kernel"),
    ("Newton-Schulz elementwise (iterate, Gram, poly, sums)",
     r"cuda::<unnamed>::(write_iterate_kernel|gram_kernel|poly_kernel|sumsq_partials_kernel|sum_partials_kernel|"
     r"store_kernel|scale_kernel\(float|transpose_kernel|axpby_kernel|symmetrize_kernel|load_kernel)"),
    ("Q-AdamW", r"qadam|q_adamw"),
    ("LoRA-SVD split (residual gradient)", r"add_residual_gradient"),
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


# Marker kernels of a training step (--phases), on the lower-case name.
STEP_START, LOSS, BACKWARD_END = r"embedding_forward", r"cross_entropy", r"embedding_backward"


def phases(names):
    """The phase of each launch, in order: 'forward', 'loss', 'backward' or 'optimizer' ('before the first
    step' until the first embedding forward)."""
    out, phase = [], "before the first step"
    for name in names:
        low = name.lower()
        if re.search(STEP_START, low):
            phase = "forward"
        elif re.search(LOSS, low) and phase == "forward":
            phase = "loss"
        elif phase == "loss":
            phase = "backward"
        out.append(phase)
        if re.search(BACKWARD_END, low) and phase == "backward":
            phase = "optimizer"
    return out


def table(rows, title):
    total = sum(t for _, t in rows)
    fams = {}
    for name, t in rows:
        n, s = fams.get(family(name), (0, 0.0))
        fams[family(name)] = (n + 1, s + t)
    print(f"{title} {len(rows)} kernel launches, {total / 1e6:.2f} ms of kernel time")
    print("| kernel family | launches | ms | share |")
    print("|---|---|---|---|")
    for fam, (n, t) in sorted(fams.items(), key=lambda kv: -kv[1][1]):
        print(f"| {fam} | {n} | {t / 1e6:.3f} | {100 * t / total:.1f}% |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--skip-launches", type=int, default=0)
    ap.add_argument("--label", default="")
    ap.add_argument("--phases", action="store_true", help="also a table per phase of the step")
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
    table(rows, args.label)
    if not args.phases:
        return
    of = phases([name for name, _ in rows])
    total = sum(t for _, t in rows)
    print("\n| phase | launches | ms | share |")
    print("|---|---|---|---|")
    order = ["before the first step", "forward", "loss", "backward", "optimizer"]
    for ph in order:
        sel = [t for (_, t), p in zip(rows, of) if p == ph]
        if sel:
            print(f"| {ph} | {len(sel)} | {sum(sel) / 1e6:.3f} | {100 * sum(sel) / total:.1f}% |")
    for ph in order[1:]:
        sel = [r for r, p in zip(rows, of) if p == ph]
        if sel:
            print()
            table(sel, f"{args.label} {ph}:")


if __name__ == "__main__":
    main()
