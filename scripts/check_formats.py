#!/usr/bin/env python3
"""Checks fp4train's E2M1 and E4M3 encoders, run ON THE GPU (bench/format_dump.cu), against independent
implementations: ml_dtypes float4_e2m1fn (round to nearest even) and torch.float8_e4m3fn.

Inputs: millions of float32 values spread uniformly over exponents, every rounding midpoint of both formats
and its neighbours one ulp away, the E4M3 subnormal range, float32 subnormals and signed zeros. E2M1 values
are pre-clamped to [-6, 6] and E4M3 values to [-448, 448] (torch turns overflow into NaN where fp4train
saturates, and float4_e2m1fn has no NaN). Results are compared as decoded values with the sign of zero.
Exits non-zero on any mismatch.

usage: check_formats.py [--build-dir build-cuda] [--count 4000000] [--seed N]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np
import torch

E2M1_GRID = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)


def e4m3_values():
    """The 127 non-negative finite E4M3 magnitudes, by code (0x00..0x7E), from the format definition."""
    out = []
    for code in range(0x7F):
        exp, man = code >> 3, code & 7
        out.append(man * 2.0**-9 if exp == 0 else (1 + man / 8) * 2.0 ** (exp - 7))
    return np.array(out, dtype=np.float64)


def decode_e2m1(codes):
    mag = E2M1_GRID[codes & 7]
    return np.where(codes & 8, -mag, mag).astype(np.float32)


def decode_e4m3(codes):
    table = np.concatenate([e4m3_values(), [np.nan]]).astype(np.float32)
    mag = table[codes & 0x7F]
    return np.where(codes & 0x80, -mag, mag).astype(np.float32)


def neighbours(points):
    """Each point and the float32 values one ulp below and above it."""
    p = np.asarray(points, dtype=np.float32)
    up = np.nextafter(p, np.float32(np.inf))
    down = np.nextafter(p, np.float32(-np.inf))
    return np.concatenate([p, up, down])


def with_signs(v):
    return np.concatenate([v, -v])


def inputs(rng, count):
    """Random values over exponents 2^-40..2^12, plus float32 subnormals and signed zeros."""
    exps = rng.uniform(-40.0, 12.0, size=count)
    mant = rng.uniform(1.0, 2.0, size=count)
    signs = rng.choice([-1.0, 1.0], size=count)
    wide = (signs * mant * np.exp2(exps)).astype(np.float32)
    sub_bits = rng.integers(1, 1 << 23, size=count // 20, dtype=np.uint32) | (
        rng.integers(0, 2, size=count // 20, dtype=np.uint32) << 31)
    subnormals = sub_bits.view(np.float32)
    zeros = np.array([0.0, -0.0], dtype=np.float32)
    return np.concatenate([wide, subnormals, zeros])


def e2m1_inputs(rng, count):
    grid = E2M1_GRID.astype(np.float64)
    mids = (grid[:-1] + grid[1:]) / 2
    special = with_signs(neighbours(np.concatenate([grid, mids])))
    dense = rng.uniform(-6.5, 6.5, size=count).astype(np.float32)
    return np.clip(np.concatenate([inputs(rng, count), special, dense]), -6.0, 6.0).astype(np.float32)


def e4m3_inputs(rng, count):
    vals = e4m3_values()
    mids = (vals[:-1] + vals[1:]) / 2
    edges = np.array([2.0**-10, 2.0**-11, 464.0, 480.0], dtype=np.float64)  # underflow tie, overflow
    special = with_signs(neighbours(np.concatenate([vals, mids, edges])))
    subnormal_range = (rng.uniform(0.0, 2.0**-6, size=count // 4) *
                       rng.choice([-1.0, 1.0], size=count // 4)).astype(np.float32)
    x = np.concatenate([inputs(rng, count), special, subnormal_range]).astype(np.float32)
    return np.clip(x, -448.0, 448.0).astype(np.float32)


def gpu_codes(format_dump, x):
    """(E2M1 codes, E4M3 codes) of x from the GPU encoders."""
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.f32"), os.path.join(d, "out.codes")
        x.astype("<f4").tofile(src)
        subprocess.run([format_dump, src, dst], check=True, stdout=subprocess.DEVNULL)
        out = np.fromfile(dst, dtype=np.uint8)
    if out.size != 2 * x.size:
        sys.exit(f"check_formats: format_dump wrote {out.size} bytes for {x.size} values")
    return out[0::2], out[1::2]


def compare(name, x, ours, theirs):
    """Counts values whose decoded results differ (value or sign of zero; NaN matches NaN)."""
    both_nan = np.isnan(ours) & np.isnan(theirs)
    same = (ours == theirs) & (np.signbit(ours) == np.signbit(theirs))
    bad = np.nonzero(~(same | both_nan))[0]
    print(f"[formats] {name}: {x.size} values, {bad.size} mismatches")
    for i in bad[:20]:
        print(f"[formats]   x = {float(x[i])!r} ({x[i].view(np.uint32):#010x}): ours {ours[i]!r}, reference {theirs[i]!r}")
    return bad.size


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default="build-cuda")
    ap.add_argument("--count", type=int, default=4_000_000)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    format_dump = os.path.join(args.build_dir, "format_dump")
    if not os.access(format_dump, os.X_OK):
        sys.exit(f"check_formats: {format_dump} is not built (target format_dump)")
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"[formats] seed {seed} (replay with --seed {seed})")
    rng = np.random.default_rng(seed)

    x2 = e2m1_inputs(rng, args.count)
    ours2 = decode_e2m1(gpu_codes(format_dump, x2)[0])
    ref2 = x2.astype(ml_dtypes.float4_e2m1fn).astype(np.float32)
    bad = compare("E2M1 RTN vs ml_dtypes.float4_e2m1fn", x2, ours2, ref2)

    x4 = np.concatenate([e4m3_inputs(rng, args.count), np.array([np.nan], dtype=np.float32)])
    ours4 = decode_e4m3(gpu_codes(format_dump, x4)[1])
    ref4 = torch.from_numpy(x4).to(torch.float8_e4m3fn).to(torch.float32).numpy()
    bad += compare("E4M3 vs torch.float8_e4m3fn", x4, ours4, ref4)

    print(f"[formats] {'PASS' if bad == 0 else 'FAIL'}: {bad} mismatches in total")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
