#!/usr/bin/env python3
"""Kill trials of fp4train train: SIGKILL at random moments (some during a checkpoint save), then resume.

A tiny byte-level model with quantization (tetrajet-v2-base) and OsciReset from a fractional start trains
uninterrupted for --steps steps with a checkpoint every --ckpt-every steps: the reference. Then each trial
starts the same command in a fresh directory, kills it with SIGKILL at a moment drawn from a seeded
generator (a random time, or as soon as a chosen save's temporary directory appears), and runs the same
command again until it exits 0. Every trial must resume with exit 0, leave no temporary file
(`.tmp-*`, `latest.tmp.*`), and end with the reference's metrics (every train line, timing fields aside)
and the reference's final checkpoint files (model and optimizer state), byte for byte.
Usage: kill_trials.py --binary build/fp4train [--trials K (env FP4_KILL_TRIALS, default 6)] [--seed S]
"""
import argparse, json, os, random, shutil, signal, subprocess, sys, tempfile, time

TIMEOUT_S = 120
TIMING_FIELDS = ("elapsed", "tokens_per_s")  # differ between runs by nature


def train_args(steps, ckpt_every):
    sets = ["model.n_layers=2", "model.d_model=128", "model.n_heads=2", "model.d_ff=128", "model.max_seq_len=64",
            "data.batch=4", "data.seq=32", "data.train_dir=shards", "data.train_text=", "data.val_text=",
            "optim.warmup=2", f"optim.total_steps={steps}", f"train.steps={steps}", f"train.ckpt_every={ckpt_every}",
            "train.keep_checkpoints=2", "train.eval_every=0", "train.log_every=1", "osci_reset.enabled=true",
            "osci_reset.start=0.5", "osci_reset.window=2", "osci_reset.period=4"]
    args = ["train", "--recipe", "tetrajet-v2-base"]
    for s in sets:
        args += ["--set", s]
    return args + ["--out", "run"]


def env():
    return dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")


def temp_files(run_dir):
    root = os.path.join(run_dir, "checkpoints")
    if not os.path.isdir(root):
        return []
    return [n for n in os.listdir(root) if n.startswith(".tmp-") or n.startswith("latest.tmp.")]


def step_records(run_dir):
    """The per-step records (train, osci_reset, ...) in order, and the evaluations by step. A run that is
    run again after it finished evaluates again (docs/CLI.md), so an evaluation may appear twice."""
    lines, evals = [], {}
    for line in open(os.path.join(run_dir, "metrics.jsonl")):
        rec = json.loads(line)
        for f in TIMING_FIELDS:
            rec.pop(f, None)
        if rec.get("type") == "eval":
            evals.setdefault(rec["step"], []).append(rec)
        elif rec.get("type") != "error":
            lines.append(rec)
    return lines, {step: recs[:1] if all(r == recs[0] for r in recs) else recs for step, recs in evals.items()}


def final_files(run_dir):
    root = os.path.join(run_dir, "checkpoints")
    name = open(os.path.join(root, "latest")).read().strip()
    return name, {f: open(os.path.join(root, name, f), "rb").read()
                  for f in ("model.safetensors", "state.safetensors")}


def prepare(binary, work, seed):
    rng = random.Random(seed)
    for split, docs in (("train", 3), ("val", 1)):
        os.makedirs(os.path.join(work, "text", split))
        for d in range(docs):
            words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randrange(2, 8))) for _ in range(600)]
            with open(os.path.join(work, "text", split, f"d{d}.txt"), "w") as f:
                f.write(" ".join(words) + ".\n")
    subprocess.run([binary, "prepare", "--input", "text/train", "--val", "text/val", "--tokenizer", "bytes",
                    "--out", "shards", "--threads", "1"], cwd=work, env=env(), check=True, capture_output=True)


def save_stage(run_dir):
    """What a killed save had written: the files in its temporary directory, or `latest.tmp` ("" if none)."""
    root = os.path.join(run_dir, "checkpoints")
    stages = []
    for n in temp_files(run_dir):
        path = os.path.join(root, n)
        stages.append("+".join(sorted(os.listdir(path))) or "empty dir" if os.path.isdir(path) else "latest.tmp")
    return ", ".join(stages)


def kill_once(binary, args, case, rng, ref_seconds, n_saves, ckpt_every):
    """Starts the run and SIGKILLs it; returns (how it was aimed, the save stage it hit or "", killed)."""
    run_dir = os.path.join(case, "run")
    p = subprocess.Popen([binary] + args, cwd=case, env=env(), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    aim = "save" if rng.random() < 0.5 else "time"
    start = time.monotonic()
    if aim == "time":
        deadline = start + rng.uniform(0.02, 0.9) * ref_seconds
        while time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.001)
    else:
        # Kill while the chosen save writes: its temporary directory (.tmp-step_NNNNNN-PID) has appeared,
        # after a random delay of up to 3 ms so that different stages of the save are hit.
        prefix = f".tmp-step_{rng.randrange(1, n_saves + 1) * ckpt_every:06d}-"
        extra = rng.uniform(0, 0.003)
        root = os.path.join(run_dir, "checkpoints")
        while p.poll() is None and time.monotonic() - start < TIMEOUT_S:
            if os.path.isdir(root) and any(n.startswith(prefix) for n in os.listdir(root)):
                time.sleep(extra)
                break
    if p.poll() is None:
        p.send_signal(signal.SIGKILL)
        p.wait()
        return aim, save_stage(run_dir), True
    return aim, "", False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--trials", type=int, default=int(os.environ.get("FP4_KILL_TRIALS", "6")))
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--ckpt-every", type=int, default=2)
    ap.add_argument("--seed", type=int, default=20261202)
    a = ap.parse_args()
    binary = os.path.abspath(a.binary)
    args = train_args(a.steps, a.ckpt_every)
    work = tempfile.mkdtemp(prefix="fp4_kill_")
    failures, figures = [], {"trials": a.trials, "killed": 0, "killed_during_save": 0, "resumes_compared": 0}
    try:
        prepare(binary, work, a.seed)
        ref = os.path.join(work, "ref")
        os.makedirs(ref)
        os.symlink(os.path.join(work, "shards"), os.path.join(ref, "shards"))
        t0 = time.monotonic()
        p = subprocess.run([binary] + args, cwd=ref, env=env(), capture_output=True, text=True, timeout=TIMEOUT_S)
        ref_seconds = time.monotonic() - t0
        if p.returncode != 0:
            print("reference run failed:", p.stderr[-2000:])
            return 1
        ref_lines, ref_evals = step_records(os.path.join(ref, "run"))
        ref_name, ref_files = final_files(os.path.join(ref, "run"))
        if not any(r.get("type") == "osci_reset" for r in ref_lines):
            failures.append("the reference run logged no osci_reset window: the trial would not cover its state")
        n_saves = a.steps // a.ckpt_every
        rng = random.Random(a.seed)
        for t in range(a.trials):
            case = os.path.join(work, f"trial{t}")
            os.makedirs(case)
            os.symlink(os.path.join(work, "shards"), os.path.join(case, "shards"))
            aim, in_save, killed = kill_once(binary, args, case, rng, ref_seconds, n_saves, a.ckpt_every)
            figures["killed"] += killed
            figures["killed_during_save"] += bool(in_save)
            if in_save:
                stages = figures.setdefault("save_stages", {})
                stages[in_save] = stages.get(in_save, 0) + 1
            what = f"trial {t} (aimed at a {aim}, {'killed' if killed else 'finished first'}" + \
                   (f", during a save: {in_save})" if in_save else ")")
            r = subprocess.run([binary] + args, cwd=case, env=env(), capture_output=True, text=True,
                               timeout=TIMEOUT_S) if killed else None
            if killed and r.returncode != 0:  # the first resume must finish the run
                failures.append(f"{what}: resume failed, rc {r.returncode}: {r.stderr[-800:]}")
                continue
            run_dir = os.path.join(case, "run")
            left = temp_files(run_dir)
            if left:
                failures.append(f"{what}: temporary files left after the resumed run: {left}")
            lines, evals = step_records(run_dir)
            if evals != ref_evals:
                failures.append(f"{what}: evaluations differ from the uninterrupted run: {evals} vs {ref_evals}")
            if lines != ref_lines:
                diff = [i for i, (x, y) in enumerate(zip(lines, ref_lines)) if x != y]
                failures.append(f"{what}: metrics differ from the uninterrupted run ({len(lines)} vs "
                                f"{len(ref_lines)} lines, first differing line {diff[:1]})")
            name, files = final_files(run_dir)
            if name != ref_name or files != ref_files:
                failures.append(f"{what}: final checkpoint {name} differs from the uninterrupted run's {ref_name} "
                                f"({[f for f in files if files[f] != ref_files.get(f)]})")
            figures["resumes_compared"] += killed
            print(what + ": resumed, compared", flush=True)
            shutil.rmtree(case)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(figures))
    for f in failures:
        print("FAIL", f)
    print(f"{len(failures)} failures")
    return 1 if failures or figures["killed"] == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
