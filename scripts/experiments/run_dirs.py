"""What the experiment scripts read from a run directory: recipe.toml's recipe name, config.json's seed and
metrics.jsonl's evaluations (shared by gap_at_step.py and equal_loss_time.py)."""
import json
import os
import re


def recipe_name(run_dir):
    with open(os.path.join(run_dir, "recipe.toml"), encoding="utf-8") as f:
        for line in f:
            m = re.match(r'\s*name\s*=\s*"([^"]*)"', line)
            if m:
                return m.group(1)
    raise SystemExit(f"{run_dir}/recipe.toml names no recipe")


def seed_of(run_dir):
    with open(os.path.join(run_dir, "config.json"), encoding="utf-8") as f:
        return json.load(f)["train"]["seed"]


def evaluations(run_dir):
    """[(step, val_loss)] in file order."""
    out = []
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if r.get("type") == "eval":
                out.append((r["step"], r["val_loss"]))
    return out
