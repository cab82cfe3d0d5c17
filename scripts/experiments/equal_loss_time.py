#!/usr/bin/env python3
"""Time to the same loss: how long each recipe takes to reach the loss it ends at, against the baseline.

Reads a scan of decays (RUNS/b<steps>/<recipe>-s<seed>/metrics.jsonl, as scripts/experiments/
tetrajet_ablation.sh writes them) and the step-time ratios of docs/benchmarks/latest.json. For each recipe
at the largest budget T: its mean final validation loss L over seeds; the baseline's step count S at which
the baseline would reach L (log-linear interpolation of the baseline's mean final losses over its budgets,
so S is a WSD run of S steps); token efficiency S / T; and, with the recipe's step time r (in baseline steps),
the time to reach L relative to the baseline's, r T / S, and the time saved, 1 - r T / S. A loss outside the
baseline's range of budgets is reported as such, not extrapolated.

usage: equal_loss_time.py --runs RUNS [--baseline bf16] [--latest docs/benchmarks/latest.json]
                          [--config olmo2-70m] [--ratio RECIPE=R ...]
"""
import argparse
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_dirs import evaluations, recipe_name, seed_of  # noqa: E402


def final_val_loss(run_dir):
    ev = evaluations(run_dir)
    return ev[-1][1] if ev else None


def read_scan(root):
    """budget steps -> recipe -> seed -> final val loss"""
    scan = {}
    for b in sorted(os.listdir(root)):
        m = re.fullmatch(r"b(\d+)", b)
        if not m:
            continue
        for run in sorted(os.listdir(os.path.join(root, b))):
            d = os.path.join(root, b, run)
            if not os.path.isdir(d):
                continue
            loss = final_val_loss(d)
            if loss is not None:
                scan.setdefault(int(m.group(1)), {}).setdefault(recipe_name(d), {})[seed_of(d)] = loss
    return scan


# Overrides that only move a feature's start into train_bench's few steps: the timing is the recipe's.
TIMING_ONLY = ("out_control.calib_start=", "out_control.calib_steps=", "osci_reset.start=")


def step_ratios(latest, config, overrides):
    """recipe -> (step time over bf16's, where the figure comes from)"""
    ratios = {}
    if latest:
        with open(latest, encoding="utf-8") as f:
            for row in json.load(f).get("train_bench", []):
                if row.get("config") != config or "step_vs_bf16" not in row:
                    continue
                name, *sets = row["recipe"].split(":")
                if all(x.startswith(TIMING_ONLY) for x in sets) and (name not in ratios or not sets):
                    ratios[name] = (row["step_vs_bf16"], row.get("commit", "?"))
    for o in overrides:
        name, _, value = o.partition("=")
        try:
            ratios[name] = (float(value), "--ratio")
        except ValueError:
            raise SystemExit(f"equal_loss_time: --ratio {o}: expected RECIPE=NUMBER")
    return ratios


def baseline_steps_for(loss, budgets, base_means):
    """The baseline's steps at which its final loss would be `loss` (None outside its budgets)."""
    for (s0, l0), (s1, l1) in zip(zip(budgets, base_means), zip(budgets[1:], base_means[1:])):
        if l0 >= loss >= l1 and l0 > l1:
            t = (l0 - loss) / (l0 - l1)
            return math.exp(math.log(s0) + t * (math.log(s1) - math.log(s0)))
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", required=True, help="folder of b<steps>/ decay folders")
    ap.add_argument("--baseline", default="bf16")
    ap.add_argument("--latest", default="docs/benchmarks/latest.json", help="step-time ratios ('' for none)")
    ap.add_argument("--config", default="olmo2-70m", help="the latest.json config whose ratios are used")
    ap.add_argument("--ratio", action="append", default=[], help="RECIPE=R: a step-time ratio to use instead")
    a = ap.parse_args()
    scan = read_scan(a.runs)
    budgets = sorted(b for b in scan if a.baseline in scan[b])
    if len(budgets) < 2:
        raise SystemExit(f"equal_loss_time: {a.baseline} has finished runs at {len(budgets)} budget(s); need 2+")
    base = {b: scan[b][a.baseline] for b in budgets}
    all_seeds = set.intersection(*(set(base[b]) for b in budgets))
    base_means = [sum(base[b][s] for s in all_seeds) / len(all_seeds) for b in budgets]
    top = max(scan)
    ratios = step_ratios(a.latest, a.config, a.ratio)
    print(f"Time to reach each recipe's final loss at {top} steps, against {a.baseline} (its mean final losses "
          + ", ".join(f"{l:.4f} at {b}" for b, l in zip(budgets, base_means))
          + f"; step-time ratios: {a.config} in {a.latest or 'none'}"
          + (", overridden: " + ", ".join(a.ratio) if a.ratio else "") + "):\n")
    print("(Each recipe against the baseline's runs of its own seeds; ratio sources are commits of latest.json rows.)\n")
    print(f"| recipe | seeds | mean final loss | {a.baseline} steps to that loss | token efficiency | step time vs {a.baseline} | time to that loss vs {a.baseline} | time saved |")
    print("|---|---|---|---|---|---|---|---|")
    for name in sorted(scan[top]):
        if name == a.baseline:
            continue
        seeds = sorted(set(scan[top][name]) & all_seeds)
        if not seeds:
            continue
        loss = sum(scan[top][name][s] for s in seeds) / len(seeds)
        paired = [sum(base[b][s] for s in seeds) / len(seeds) for b in budgets]
        steps = baseline_steps_for(loss, budgets, paired)
        r, source = ratios.get(name, (None, None))
        r_text = f"{r:.3f} ({source})" if r else "-"
        if steps is None:
            where = "below" if loss < paired[-1] else "above"
            print(f"| {name} | {len(seeds)} | {loss:.4f} | {where} the scanned range | - | {r_text} | - | - |")
            continue
        eff = steps / top
        time_text = saved = "-"
        if r:
            rel = r / eff
            time_text, saved = f"{rel:.2f}x", f"{1 - rel:+.0%}"
        print(f"| {name} | {len(seeds)} | {loss:.4f} | {steps:.0f} | {eff:.1%} | {r_text} | {time_text} | {saved} |")


if __name__ == "__main__":
    sys.exit(main())
