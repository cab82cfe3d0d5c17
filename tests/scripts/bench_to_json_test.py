#!/usr/bin/env python3
"""Tests of scripts/bench_to_json.py on generated bench runs (random figures drawn here, not measurements):
the merge replaces rows by key and keeps the rest, ratios come from the same run's baseline, a run without
its baseline or with bad lines is refused and leaves latest.json unchanged, and the committed latest.json
passes --check."""
import json
import os
import random
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "bench_to_json.py")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def write_lines(path, rows, ident):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps({**r, **ident}) + "\n")


def main():
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    print("seed", seed)
    with tempfile.TemporaryDirectory() as d:
        latest = os.path.join(d, "latest.json")
        keep = {"config": "olmo2-1b", "recipe": "bf16", "ms_step": 500.0, "step_vs_bf16": 1.0, "memory_gib": 70.0,
                "memory_vs_bf16": 1.0}
        stale = {"config": "olmo2-70m", "recipe": "nvidia-nvfp4", "ms_step": 1.0, "step_vs_bf16": 9.0,
                 "memory_gib": 1.0, "memory_vs_bf16": 9.0}
        doc = {"machine": "m", "date": "d", "commit": "c", "command": "x", "train_bench": [keep, stale],
               "quantizers": [{"kernel": "k0", "dtype": "bf16", "mib": 64, "ratio_to_copy": 0.5}],
               "torch": [{"config": "olmo2-30m", "fp4train_tokens_s": 1, "torch_tokens_s": 1, "ratio": 1.0}]}
        with open(latest, "w") as f:
            json.dump(doc, f)

        ident = {"bench": "train_bench", "date": "2026-12-02T10:00:00Z", "device": "NVIDIA H200",
                 "command": "train_bench --config olmo2-70m"}
        bf_ms, bf_mem = rng.uniform(20, 40), rng.uniform(5, 10)
        fp_ms, fp_mem = bf_ms * rng.uniform(1.1, 2.0), bf_mem * rng.uniform(0.8, 1.0)
        tb = os.path.join(d, "tb.jsonl")
        write_lines(tb, [{"config": "olmo2-70m", "recipe": "bf16", "ms_step": bf_ms, "memory_gib": bf_mem},
                         {"config": "olmo2-70m", "recipe": "nvidia-nvfp4", "ms_step": fp_ms, "memory_gib": fp_mem}],
                    ident)
        p = run("--latest", latest, "--commit", "abc1234", tb)
        check(p.returncode == 0, f"train_bench merge exits 0 ({p.stderr.strip()})")
        got = json.load(open(latest))
        rows = {(r["config"], r["recipe"]): r for r in got["train_bench"]}
        check(("olmo2-1b", "bf16") in rows, "rows of another config are kept")
        nv = rows.get(("olmo2-70m", "nvidia-nvfp4"), {})
        check(abs(nv.get("step_vs_bf16", 0) - fp_ms / bf_ms) < 1e-3, "step_vs_bf16 against the run's bf16 row")
        check(abs(nv.get("memory_vs_bf16", 0) - fp_mem / bf_mem) < 1e-3, "memory_vs_bf16 against the run's bf16 row")
        check(sum(1 for r in got["train_bench"] if r["recipe"] == "nvidia-nvfp4") == 1, "the stale row is replaced")
        check(nv.get("commit") == "abc1234" and nv.get("date") == ident["date"] and nv.get("command") == ident["command"],
              "a merged row names its commit, date and command")
        check(got["quantizers"] == doc["quantizers"] and got["torch"] == doc["torch"], "other sections are kept")

        # Quantizers: the ratio to the same run's copy of the same dtype and size.
        qi = {"bench": "quantize_bench", "date": "2026-12-02T11:00:00Z", "device": "NVIDIA H200",
              "command": "quantize_bench"}
        copy_bw, kern_bw = rng.uniform(3, 4), rng.uniform(1, 3)
        qb = os.path.join(d, "qb.jsonl")
        write_lines(qb, [{"kernel": "copy (cudaMemcpy D2D)", "dtype": "bf16", "mib": 64, "bytes": 2e8,
                          "median_us": 2e8 / copy_bw},
                         {"kernel": "k0", "dtype": "bf16", "mib": 64, "bytes": 1e8, "median_us": 1e8 / kern_bw}], qi)
        p = run("--latest", latest, "--commit", "abc1234", qb)
        check(p.returncode == 0, f"quantize_bench merge exits 0 ({p.stderr.strip()})")
        q = json.load(open(latest))["quantizers"]
        check(len(q) == 1 and abs(q[0]["ratio_to_copy"] - kern_bw / copy_bw) < 1e-3, "ratio_to_copy against the copy")

        # Refusals leave the file byte for byte as it was.
        before = open(latest, "rb").read()
        bad_cases = {
            "no bf16 row": [{"config": "olmo2-370m", "recipe": "nvidia-nvfp4", "ms_step": 1.0, "memory_gib": 1.0}],
            "NaN figure": [{"config": "olmo2-70m", "recipe": "bf16", "ms_step": float("nan"), "memory_gib": 1.0}],
            "negative figure": [{"config": "olmo2-70m", "recipe": "bf16", "ms_step": -1.0, "memory_gib": 1.0}],
            "missing field": [{"config": "olmo2-70m", "recipe": "bf16", "memory_gib": 1.0}],
        }
        for name, rows_ in bad_cases.items():
            path = os.path.join(d, "bad.jsonl")
            write_lines(path, rows_, ident)
            p = run("--latest", latest, "--commit", "abc1234", path)
            check(p.returncode == 2 and "unchanged" in p.stderr, f"{name}: refused ({p.returncode}, {p.stderr.strip()})")
            check(open(latest, "rb").read() == before, f"{name}: latest.json unchanged")
        mixed = os.path.join(d, "mixed.jsonl")
        write_lines(mixed, [{"config": "olmo2-70m", "recipe": "bf16", "ms_step": 1.0, "memory_gib": 1.0}], ident)
        with open(mixed, "a") as f:
            f.write(json.dumps({"config": "olmo2-70m", "recipe": "x", "ms_step": 1.0, "memory_gib": 1.0,
                                **{**ident, "date": "2026-12-03T00:00:00Z"}}) + "\n")
            f.write("{not json\n")
        p = run("--latest", latest, "--commit", "abc1234", mixed)
        check(p.returncode == 2 and "another run" in p.stderr, f"two runs in one file refused ({p.stderr.strip()})")
        check(open(latest, "rb").read() == before, "mixed run: latest.json unchanged")
        check(not [n for n in os.listdir(d) if n.startswith(".latest-")], "no temporary file left")

    # The committed file.
    p = run("--check")
    check(p.returncode == 0, f"docs/benchmarks/latest.json passes --check ({p.stderr.strip()})")
    print("ok" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
