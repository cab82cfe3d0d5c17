#!/usr/bin/python3
"""How far two Newton-Schulz runs drift apart when only their GEMMs' FP32 summation order differs.

The tolerances of the CUDA-against-CPU Newton-Schulz tests (tests/cuda/newton_schulz_cuda_test.cu,
tests/cuda/root_cuda_test.cu: root_bf16) come from this model: the same iteration as
src/optim/newton_schulz.cpp (Frobenius normalization, wide orientation, exact symmetrization of A,
P = b A + c A^2, next = a X + P X with X FP32 in the a X term), once with FP32 sgemm products and once
with the products formed in FP64 and rounded to FP32 ("another summation order"), each with FP32 or
BF16 (round to nearest even) operands. It prints, per shape, the worst relative Frobenius distance
between the two orders after five steps, the distance between BF16 and FP32 operands, and for two
steps the median element distance between orders as a fraction of the BF16-to-FP32 median distance.

usage: /usr/bin/python3 scripts/experiments/ns_summation_order.py [SEED] [SAMPLES]   (needs numpy)
"""
import sys

import numpy as np

MUON = (3.4445, -4.7750, 2.0315)


def bf16(x):
    """x rounded to BF16, nearest even, as float32 (finite inputs)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)


def matmul(a, b, fp64):
    if fp64:
        return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    return a @ b


def newton_schulz(b, coef, steps, bf16_operands, fp64):
    tall = b.shape[0] > b.shape[1]
    inv = np.float32(1.0 / (np.sqrt((b.astype(np.float64) ** 2).sum()) + 1e-7))
    x = ((b.T if tall else b) * inv).astype(np.float32)
    rnd = bf16 if bf16_operands else (lambda v: v)
    a_, b_, c_ = (np.float32(v) for v in coef)
    for _ in range(steps):
        xr = rnd(x)
        a = matmul(xr, xr.T, fp64)
        a = np.triu(a) + np.triu(a, 1).T
        ar = rnd(a)
        p = (b_ * a + c_ * matmul(ar, ar, fp64)).astype(np.float32)
        x = (a_ * x + matmul(rnd(p), xr, fp64)).astype(np.float32)
    return x.T if tall else x


def rel(x, y):
    return np.linalg.norm(x - y) / np.linalg.norm(y)


def main():
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    samples = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    rng = np.random.default_rng(seed)
    shapes = [(96, 40), (24, 200), (64, 64), (37, 53), (53, 37), (48, 32), (1, 17), (23, 5)]
    for r, c in shapes:
        order = {False: 0.0, True: 0.0}
        apart = []
        ratio = 0.0
        for _ in range(samples):
            g = rng.standard_normal((r, c)).astype(np.float32)
            eps = np.quantile(np.abs(g), 0.99)  # ROOT's clipping
            g = np.clip(g, -eps, eps)
            for h in (False, True):
                order[h] = max(order[h], rel(newton_schulz(g, MUON, 5, h, False), newton_schulz(g, MUON, 5, h, True)))
            apart.append(rel(newton_schulz(g, MUON, 5, True, True), newton_schulz(g, MUON, 5, False, True)))
            h2 = newton_schulz(g, MUON, 2, True, True)
            f2 = newton_schulz(g, MUON, 2, False, True)
            o2 = newton_schulz(g, MUON, 2, True, False)
            ratio = max(ratio, np.median(np.abs(o2 - h2)) / np.median(np.abs(h2 - f2)))
        print(f"{r}x{c}: five steps, order: fp32 {order[False]:.3g} bf16 {order[True]:.3g}; "
              f"bf16 vs fp32 {min(apart):.3g}-{max(apart):.3g}; two steps, median order / median apart "
              f"{ratio:.3g}")
    worst = {False: 0.0, True: 0.0}
    for _ in range(samples):
        u = rng.standard_normal(27).astype(np.float32)
        v = rng.standard_normal(45).astype(np.float32)
        g = (u[:, None] * v[None, :]).astype(np.float32)
        for h in (False, True):
            worst[h] = max(worst[h], rel(newton_schulz(g, MUON, 5, h, False), newton_schulz(g, MUON, 5, h, True)))
    print(f"rank 1, 27x45: five steps, order: fp32 {worst[False]:.3g} bf16 {worst[True]:.3g}")


if __name__ == "__main__":
    main()
