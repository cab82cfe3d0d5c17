"""Made-up run directories for the experiment scripts' tests: recipe.toml's name, config.json's seed and a
metrics.jsonl with one train and one eval record per evaluation step."""
import json
import os


def make_run(run_dir, recipe, seed, evals):
    """evals: {step: val_loss}."""
    os.makedirs(run_dir)
    with open(os.path.join(run_dir, "recipe.toml"), "w", encoding="utf-8") as f:
        f.write(f'name = "{recipe}"\ndescription = "test"\n')
    with open(os.path.join(run_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump({"train": {"seed": seed}}, f)
    with open(os.path.join(run_dir, "metrics.jsonl"), "w", encoding="utf-8") as f:
        for step, loss in evals.items():
            f.write(json.dumps({"type": "train", "step": step, "loss": loss + 1.0}) + "\n")
            f.write(json.dumps({"type": "eval", "step": step, "val_loss": loss}) + "\n")
    return run_dir
