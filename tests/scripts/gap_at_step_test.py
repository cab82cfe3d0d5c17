#!/usr/bin/env python3
"""scripts/experiments/gap_at_step.py on made-up run directories with random losses: the paired mean gap and
its 95% t interval against a direct computation, a run without the step left out (and said so), a missing
baseline refused."""
import math
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_runs  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "experiments", "gap_at_step.py")


def make_run(root, recipe, seed, evals):
    return fake_runs.make_run(os.path.join(root, f"{recipe}-s{seed}"), recipe, seed, evals)


def run(args):
    return subprocess.run([sys.executable, SCRIPT] + args, capture_output=True, text=True)


def main():
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    with tempfile.TemporaryDirectory() as root:
        base = {s: rng.uniform(1.0, 2.0) for s in (1, 2, 3)}
        gap = {s: rng.uniform(-0.1, 0.1) for s in (1, 2, 3)}
        dirs = [make_run(root, "bf16", s, {100: base[s], 200: base[s] - 0.1}) for s in (1, 2, 3)]
        dirs += [make_run(root, "fp4", s, {100: base[s] + gap[s]}) for s in (1, 2, 3)]
        dirs.append(make_run(root, "late", 1, {200: 1.0}))  # no evaluation at step 100
        r = run(["--step", "100"] + dirs)
        assert r.returncode == 0, (seed, r.stderr)
        assert "late-s1 has no evaluation at step 100" in r.stderr, (seed, r.stderr)
        row = [l for l in r.stdout.splitlines() if l.startswith("| fp4 |")]
        assert len(row) == 1, (seed, r.stdout)
        g = [gap[s] for s in (1, 2, 3)]
        mean = sum(g) / 3
        sd = math.sqrt(sum((x - mean) ** 2 for x in g) / 2)
        half = 4.303 * sd / math.sqrt(3)
        want = f"{mean:+.4f} [{mean - half:+.4f}, {mean + half:+.4f}]"
        assert want in row[0], (seed, want, row[0])
        assert "late" not in r.stdout and "| bf16 |" not in r.stdout, (seed, r.stdout)
        r = run(["--step", "100", "--baseline", "nothing"] + dirs)
        assert r.returncode != 0 and "no nothing run" in r.stderr, (seed, r.stderr)
    print(f"gap_at_step: ok (seed {seed})")


if __name__ == "__main__":
    main()
