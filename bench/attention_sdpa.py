#!/usr/bin/env python3
"""PyTorch peer of bench/attention_bench.cu: causal scaled_dot_product_attention in BF16 on the GPU, forward,
backward and forward+backward times (torch.cuda.Event, 3 warm-ups, median of 20) and TFLOP/s with the same
causal count (forward 2*2*B*H*T*T*D/2, backward 2.5x that), for the same shapes. Runs the default SDPA
dispatch and, where available, the flash and cuDNN backends explicitly.

Usage: python3 bench/attention_sdpa.py [--reps N]
"""
import argparse
import statistics

import torch
import torch.nn.functional as F

SHAPES = [(16, 8, 2048, 64), (16, 8, 2048, 128), (8, 16, 2048, 64)]  # B, H, T, D


def median_ms(fn, reps, setup=None):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(3 + reps):
        state = setup() if setup else None
        start.record()
        fn(state)
        stop.record()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(stop))
    return statistics.median(times)


def bench(B, H, T, D, reps):
    gen = torch.Generator(device="cuda").manual_seed(0)
    mk = lambda: (torch.rand(B, H, T, D, device="cuda", generator=gen) * 4 - 2).to(torch.bfloat16)
    q, k, v, dout = mk().requires_grad_(), mk().requires_grad_(), mk().requires_grad_(), mk()

    def forward(_):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def clear():
        q.grad = k.grad = v.grad = None

    def fwd_for_bwd():
        clear()
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def backward(out):
        out.backward(dout)

    def total(_):
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(dout)

    fwd = median_ms(forward, reps)
    bwd = median_ms(backward, reps, setup=fwd_for_bwd)
    tot = median_ms(total, reps, setup=clear)
    return fwd, bwd, tot


def report(label, B, H, T, D, fwd, bwd, tot):
    ff = 2.0 * B * H * T * T * D
    bf = 2.5 * ff
    print(f"{label:<36} B{B:<3} H{H:<3} T{T:<5} D{D:<4} fwd {fwd:7.3f} ms {ff / fwd * 1e-9:6.1f} TF/s | "
          f"bwd {bwd:7.3f} ms {bf / bwd * 1e-9:6.1f} TF/s | total {tot:7.3f} ms {(ff + bf) / tot * 1e-9:6.1f} TF/s",
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}; median of {args.reps} runs after 3 warm-ups")
    backends = [("sdpa default dispatch", None)]
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backends += [("sdpa flash", SDPBackend.FLASH_ATTENTION), ("sdpa cudnn", SDPBackend.CUDNN_ATTENTION)]
    except ImportError:
        sdpa_kernel = None
    for B, H, T, D in SHAPES:
        for label, backend in backends:
            try:
                if backend is None:
                    times = bench(B, H, T, D, args.reps)
                else:
                    with sdpa_kernel(backend):
                        times = bench(B, H, T, D, args.reps)
            except RuntimeError as e:  # a backend unavailable for this shape or build
                print(f"{label:<36} B{B:<3} H{H:<3} T{T:<5} D{D:<4} unavailable: {str(e).splitlines()[0]}")
                continue
            report(label, B, H, T, D, *times)


if __name__ == "__main__":
    main()
