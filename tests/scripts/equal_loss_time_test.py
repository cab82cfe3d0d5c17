#!/usr/bin/env python3
"""scripts/experiments/equal_loss_time.py on a made-up scan with random losses: the baseline steps to a
recipe's loss (log-linear between budgets) and the time saved against a direct computation, step-time ratios
from a latest.json (a timing-only override row used, another recipe's override row not), a loss below the
scanned range reported as such, a baseline with one budget refused."""
import json
import math
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_runs  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "experiments", "equal_loss_time.py")


def make_run(root, budget, recipe, seed, loss):
    fake_runs.make_run(os.path.join(root, f"b{budget}", f"{recipe}-s{seed}"), recipe, seed,
                       {1: loss + 5.0, budget: loss})


def main():
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    with tempfile.TemporaryDirectory() as root:
        budgets = [100, 200, 400]
        top = [rng.uniform(1.0, 1.5) for _ in range(2)]  # bf16's loss at 400 per seed
        steps_loss = {s: [top[s - 1] + 0.2, top[s - 1] + 0.1, top[s - 1]] for s in (1, 2)}
        for s in (1, 2):
            for b, l in zip(budgets, steps_loss[s]):
                make_run(root, b, "bf16", s, l)
        x = rng.uniform(0.1, 0.9)  # fp4 ends between bf16's 200- and 400-step losses
        for s in (1, 2):
            make_run(root, 400, "fp4", s, steps_loss[s][1] - x * 0.1)
            make_run(root, 400, "better", s, steps_loss[s][2] - 0.05)
        ratio = rng.uniform(1.1, 2.0)
        latest = os.path.join(root, "latest.json")
        with open(latest, "w", encoding="utf-8") as f:
            json.dump({"train_bench": [
                {"config": "m", "recipe": "fp4:out_control.calib_start=1", "step_vs_bf16": ratio, "commit": "abc"},
                {"config": "m", "recipe": "better:optimizer=root", "step_vs_bf16": 9.0, "commit": "abc"},
                {"config": "other", "recipe": "better", "step_vs_bf16": 7.0, "commit": "abc"}]}, f)
        r = subprocess.run([sys.executable, SCRIPT, "--runs", root, "--latest", latest, "--config", "m"],
                           capture_output=True, text=True)
        assert r.returncode == 0, (seed, r.stderr)
        rows = {l.split("|")[1].strip(): l for l in r.stdout.splitlines() if l.startswith("| ")}
        want_steps = math.exp(math.log(200) + x * (math.log(400) - math.log(200)))
        eff = want_steps / 400
        assert f"| {want_steps:.0f} | {eff:.1%} | {ratio:.3f} (abc) | {ratio / eff:.2f}x | {1 - ratio / eff:+.0%} |" in rows["fp4"], (seed, rows["fp4"])
        assert "below the scanned range" in rows["better"] and "| - | - | - |" in rows["better"], (seed, rows["better"])
        only_one = os.path.join(root, "one")
        make_run(only_one, 400, "bf16", 1, 1.0)
        r = subprocess.run([sys.executable, SCRIPT, "--runs", only_one, "--latest", ""], capture_output=True, text=True)
        assert r.returncode != 0 and "need 2+" in r.stderr, (seed, r.stderr)
    print(f"equal_loss_time: ok (seed {seed})")


if __name__ == "__main__":
    main()
