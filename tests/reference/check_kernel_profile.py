"""Checks bench/kernel_profile.py, which groups an Nsight Compute step profile into kernel families for
docs/BENCHMARKS.md: every kernel our engine launches falls into the family it belongs to (a dequantize kernel
once counted as a quantizer because its name contains the quantizer's), and the table adds up.

Usage: check_kernel_profile.py --build-dir BUILD (the build directory is not used; ctest passes it)
"""
import argparse
import csv
import io
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import kernel_profile  # noqa: E402

# Kernel names as ncu prints them (taken from this project's profiles) and the family each must get.
EXPECTED = {
    "void fp4::<unnamed>::dequantize_nvfp4_kernel<1>(fp4::Nvfp4DeviceView, long, void *, bool)": "NVFP4 dequantize",
    "void fp4::dual::quantize_dual_fast_kernel<230u>(fp4::dual::DualArgs)": "NVFP4 quantize (dual, fused X/X^T)",
    "void fp4::<unnamed>::quantize_rows_kernel<1, 0, 1>(fp4::qk::RowArgs)": "NVFP4 quantize (rows)",
    "void fp4::<unnamed>::quantize_tiles_kernel<0, 0, 0>(fp4::qk::TileArgs)": "NVFP4 quantize (rows)",
    "void fp4::<unnamed>::amax_kernel<1>(const void *, long, float *)": "NVFP4 amax pre-pass",
    "void fp4::<unnamed>::quantize_dual_kernel<(fp4::QuantIoType)1, (fp4::<unnamed>::TileKind)1, true>"
    "(fp4::dual::DualArgs)": "NVFP4 amax pre-pass (general dual kernel)",
    "void fp4::<unnamed>::quantize_dual_kernel<(fp4::QuantIoType)1, (fp4::<unnamed>::TileKind)2, false>"
    "(fp4::dual::DualArgs)": "NVFP4 quantize (dual, fused X/X^T)",
    "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, 0, float, float, float, 1, 0, "
    "0, 0>(cublasLt::cublasSplitKParams<T6>, const T4 *)": "GEMM (cuBLASLt)",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_"
    "kernel__5x_cublas": "GEMM (cuBLASLt)",
    "void fp4::cuda::attn::attention_fwd_wgmma_kernel<64, 2, 64, true, 2>(fp4::cuda::attn::FwdParams)":
        "attention forward",
    "void fp4::cuda::attn::attention_bwd_wgmma_pipe_kernel<64>(fp4::cuda::attn::BwdParams)": "attention backward",
    "void fp4::cuda::attn::attention_bwd_prep_kernel<64>(const __nv_bfloat16 *, const __nv_bfloat16 *, long, "
    "float *, float *, int, int, int)": "attention backward",
    "void fp4::cuda::<unnamed>::rmsnorm_forward_kernel(const __nv_bfloat16 *)": "RMSNorm (+ residual)",
    "void fp4::cuda::<unnamed>::qk_norm_rope_backward_kernel(float *)": "QK-norm + RoPE",
    "void fp4::cuda::<unnamed>::swiglu_backward_kernel(const __nv_bfloat16 *)": "SwiGLU",
    "void fp4::cuda::<unnamed>::adamw_kernel(float *)": "AdamW",
    "void fp4::cuda::<unnamed>::cross_entropy_kernel(const __nv_bfloat16 *)": "cross-entropy / LM head loss",
    # Full-Stack FP4's kernels (names from a fullstack-fp4 profile)
    "void fp4::cuda::attn::q_attn_bwd_kernel<64, 8, 64, 1, 0>(fp4::cuda::attn::BwdParams, "
    "fp4::cuda::attn::QAttnBwdExtra)": "Q-Attn backward (NVFP4 dS)",
    "fp4::cuda::<unnamed>::slice_amax_kernel(const __nv_bfloat16 *, long, const float *, int, int, int, "
    "float *)": "Q-Attn operand quantizers",
    "void cub::DeviceRadixSortOnesweepKernel<cub::policy_hub<unsigned int, cub::NullType, unsigned int>"
    "::Policy1000>": "ROOT: |U| sort (cub radix)",
    "fp4::cuda::<unnamed>::momentum_kernel(const float *, const float *, long, float, bool, "
    "const fp4::cuda::StepControl *, float *, float *, unsigned int *)": "ROOT: momentum, clip, check, commit",
    # Newton-Schulz's scale_by, not Q-AdamW's scale kernel of the same short name
    "fp4::cuda::<unnamed>::scale_kernel(float *, long, const float *, const float *)":
        "Newton-Schulz elementwise (iterate, Gram, poly, sums)",
    "fp4::cuda::<unnamed>::scale_kernel(fp4::cuda::QAdamPacked, const float *)": "Q-AdamW",
    "fp4::cuda::<unnamed>::sum_partials_kernel(const double *, int, double *, float *, float)":
        "Newton-Schulz elementwise (iterate, Gram, poly, sums)",
    "fp4::cuda::<unnamed>::write_kernel(float *, const float *, __nv_bfloat16 *, fp4::cuda::QAdamPacked)":
        "Q-AdamW",
    # Newton-Schulz's fused kernels (since Q-Root's operand amaxes come from them)
    "void fp4::cuda::<unnamed>::write_iterate_kernel<fp4::cuda::<unnamed>::NextIterate>("
    "fp4::cuda::<unnamed>::NextIterate, long, long, float *, float *, unsigned int *)":
        "Newton-Schulz elementwise (iterate, Gram, poly, sums)",
    "fp4::cuda::<unnamed>::gram_kernel(const float *, long, const float *, float *, unsigned int *)":
        "Newton-Schulz elementwise (iterate, Gram, poly, sums)",
    "fp4::cuda::<unnamed>::add_residual_gradient_kernel(const float *, const float *, float *, long)":
        "LoRA-SVD split (residual gradient)",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default="")
    ap.parse_args()
    ok = True
    for name, want in EXPECTED.items():
        got = kernel_profile.family(name)
        if got != want:
            print(f"FAIL: {name[:70]}... -> {got!r}, want {want!r}")
            ok = False
    # The whole path: a CSV as ncu --csv writes it, through the script's command line.
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL)
    w.writerow(["ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value"])
    times = [1000, 3000, 2000, 4000]
    names = list(EXPECTED)[:4]
    for i, (n, t) in enumerate(zip(names, times)):
        w.writerow([i, n, "gpu__time_duration.sum", "ns", f"{t:,}"])
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write("==PROF== a line ncu prints first\n" + buf.getvalue())
        path = f.name
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "kernel_profile.py"), path, "--label", "t"],
                         capture_output=True, text=True, check=True).stdout
    os.unlink(path)
    rows = [l for l in out.splitlines() if l.startswith("| NVFP4")]
    shares = {l.split("|")[1].strip(): float(l.split("|")[4].strip().rstrip("%")) for l in rows}
    want_shares = {"NVFP4 quantize (rows)": 60.0, "NVFP4 quantize (dual, fused X/X^T)": 30.0,
                   "NVFP4 dequantize": 10.0}
    if "4 kernel launches, 0.01 ms" not in out or shares != want_shares:
        print("FAIL: table\n" + out)
        ok = False
    # --phases: a step cut at its marker kernels (embedding forward, cross-entropy, embedding backward).
    step = ["embedding_forward_kernel", "gemm_a", "cross_entropy_kernel<8>", "gemm_b", "embedding_backward_kernel",
            "momentum_kernel", "gemm_c"]
    got = kernel_profile.phases(["warm_up"] + step + step[:2])
    want = ["before the first step", "forward", "forward", "loss", "backward", "backward", "optimizer", "optimizer",
            "forward", "forward"]
    if got != want:
        print(f"FAIL: phases {got}, want {want}")
        ok = False
    print("check_kernel_profile: " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
