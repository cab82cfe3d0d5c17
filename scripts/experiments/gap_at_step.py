#!/usr/bin/env python3
"""Paired validation-loss gaps at one step, for runs that did not reach the end of their schedule.

`fp4train report` compares the final losses of finished runs; this reads the evaluation at --step of each
run directory (metrics.jsonl, recipe.toml's name, config.json's train.seed), pairs every recipe's seeds
with the --baseline recipe's, and prints the mean gap with its 95% t interval (n - 1 degrees of freedom).
Used for the stable-phase read-out of runs stopped by a deadline (docs/RESULTS.md).

usage: gap_at_step.py --step 650 [--baseline bf16] RUN_DIR...
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_dirs import evaluations, recipe_name, seed_of  # noqa: E402

# Two-sided 95% quantiles of Student's t for 1..10 degrees of freedom.
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228]


def val_loss_at(run_dir, step):
    return next((loss for s, loss in evaluations(run_dir) if s == step), None)


def interval(values):
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    if n - 1 > len(T975):
        raise SystemExit(f"gap_at_step: {n} seeds; the t table stops at {len(T975) + 1}")
    half = T975[n - 2] * sd / math.sqrt(n)
    return mean, (mean - half, mean + half)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step", type=int, required=True, help="the evaluation step to compare")
    ap.add_argument("--baseline", default="bf16", help="recipe the gaps are measured against")
    ap.add_argument("runs", nargs="+", help="run directories")
    a = ap.parse_args()
    losses = {}  # recipe -> seed -> val loss at the step
    for d in a.runs:
        v = val_loss_at(d, a.step)
        if v is None:
            print(f"gap_at_step: {d} has no evaluation at step {a.step}: left out", file=sys.stderr)
            continue
        losses.setdefault(recipe_name(d), {})[seed_of(d)] = v
    base = losses.get(a.baseline)
    if not base:
        raise SystemExit(f"gap_at_step: no {a.baseline} run has an evaluation at step {a.step}")
    print(f"Validation loss at step {a.step}, gap to the {a.baseline} run of the same seed "
          f"(mean [95% t interval]):\n")
    print(f"| recipe | seeds | mean val loss | mean gap to {a.baseline} [95% CI] | per-seed gaps |")
    print("|---|---|---|---|---|")
    for name in sorted(losses):
        seeds = sorted(s for s in losses[name] if s in base)
        if name == a.baseline or not seeds:
            continue
        gaps = [losses[name][s] - base[s] for s in seeds]
        mean, ci = interval(gaps)
        ci_text = f" [{ci[0]:+.4f}, {ci[1]:+.4f}]" if ci else ""
        per_seed = ", ".join(f"{g:+.4f} (seed {s})" for g, s in zip(gaps, seeds))
        mean_loss = sum(losses[name][s] for s in seeds) / len(seeds)
        print(f"| {name} | {len(seeds)} | {mean_loss:.4f} | {mean:+.4f}{ci_text} | {per_seed} |")


if __name__ == "__main__":
    main()
