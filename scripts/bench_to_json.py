#!/usr/bin/env python3
"""Merges benchmark runs (the JSON Lines files that train_bench, quantize_bench and torch_train_bench.py
write with --json FILE) into docs/benchmarks/latest.json, the machine-readable copy of the current figures.

  scripts/bench_to_json.py [--latest FILE] [--commit C] [--machine M] RUN.jsonl...
  scripts/bench_to_json.py --check [--latest FILE]

Each RUN file is one run of one bench. Its rows replace those of latest.json with the same key
((config, recipe) for train_bench, (kernel, dtype, mib) for quantize_bench, config for torch), every other
row is kept, so a run of one subject does not erase another. Ratios are computed here, against a baseline
of the same run: step and memory against the run's bf16 row of the same config, bandwidth against the
run's device copy of the same dtype and size, torch's ratio from the bf16 rows. Each merged row carries its
own date, commit, command and machine. Anything malformed is refused naming the file, line and field, and
latest.json is left unchanged; the new file is written to a temporary file and renamed over the old one.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

COPY_KERNEL = "copy (cudaMemcpy D2D)"
SECTIONS = {
    "train_bench": ("train_bench", ("config", "recipe")),
    "quantize_bench": ("quantizers", ("kernel", "dtype", "mib")),
    "torch_train_bench": ("torch", ("config",)),
}
REQUIRED_ROW_FIELDS = {
    "train_bench": ("config", "recipe", "ms_step", "step_vs_bf16", "memory_gib", "memory_vs_bf16"),
    "quantizers": ("kernel", "dtype", "mib", "ratio_to_copy"),
    "torch": ("config", "fp4train_tokens_s", "torch_tokens_s", "ratio"),
}
IDENTITY = ("bench", "date", "device", "command")


class BadInput(Exception):
    pass


def number(row, field, where, positive=True):
    v = row.get(field)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (positive and v <= 0):
        raise BadInput(f"{where}: field '{field}' is {json.dumps(v)}; a finite{' positive' if positive else ''} "
                       "number is needed")
    return float(v)


def text(row, field, where):
    v = row.get(field)
    if not isinstance(v, str) or not v:
        raise BadInput(f"{where}: field '{field}' is {json.dumps(v)}; a non-empty string is needed")
    return v


def read_run(path):
    """The rows of one run file and its identity; refuses mixed runs and malformed lines."""
    rows, ident = [], None
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        raise BadInput(f"{path}: cannot read ({e.strerror})")
    for n, line in enumerate(lines, 1):
        where = f"{path}:{n}"
        if not line.strip():
            continue
        def refuse_constant(c):  # NaN, Infinity: a bench that measured nothing
            raise BadInput(f"{where}: {c} is not a measured number")
        try:
            row = json.loads(line, parse_constant=refuse_constant)
        except json.JSONDecodeError as e:
            raise BadInput(f"{where}: not JSON ({e.msg})")
        if not isinstance(row, dict):
            raise BadInput(f"{where}: a JSON object is needed")
        this = tuple(text(row, f, where) for f in IDENTITY)
        if this[0] not in SECTIONS:
            raise BadInput(f"{where}: bench '{this[0]}' is unknown (known: {', '.join(SECTIONS)})")
        if ident is not None and this != ident:
            raise BadInput(f"{where}: a line of another run (bench, date, device or command differ from line 1); "
                           "one file holds one run")
        ident = this
        rows.append((where, row))
    if not rows:
        raise BadInput(f"{path}: no rows")
    return ident, rows


def train_rows(rows):
    base = {}
    for where, r in rows:
        if text(r, "recipe", where) == "bf16":
            base[text(r, "config", where)] = (number(r, "ms_step", where), number(r, "memory_gib", where))
    out = []
    for where, r in rows:
        cfg = text(r, "config", where)
        if cfg not in base:
            raise BadInput(f"{where}: the run has no bf16 row for config {cfg}: its ratios need one (add bf16 to "
                           "--recipes)")
        ms, mem = number(r, "ms_step", where), number(r, "memory_gib", where)
        out.append({"config": cfg, "recipe": r["recipe"], "ms_step": round(ms, 3),
                    "step_vs_bf16": round(ms / base[cfg][0], 4), "memory_gib": round(mem, 3),
                    "memory_vs_bf16": round(mem / base[cfg][1], 4)})
    return out


def quantizer_rows(rows):
    copy = {}
    for where, r in rows:
        if text(r, "kernel", where) == COPY_KERNEL:
            copy[(text(r, "dtype", where), number(r, "mib", where))] = number(r, "bytes", where) / number(
                r, "median_us", where)
    out = []
    for where, r in rows:
        if r["kernel"] == COPY_KERNEL:
            continue
        key = (text(r, "dtype", where), number(r, "mib", where))
        if key not in copy:
            raise BadInput(f"{where}: the run has no copy row for {key[0]} {key[1]:g} MiB: ratio_to_copy needs one")
        bw = number(r, "bytes", where) / number(r, "median_us", where)
        mib = r["mib"]
        out.append({"kernel": r["kernel"], "dtype": key[0], "mib": int(mib) if float(mib).is_integer() else mib,
                    "ratio_to_copy": round(bw / copy[key], 3)})
    return out


def torch_rows(rows):
    out = []
    for where, r in rows:
        if text(r, "recipe", where) != "bf16":
            continue  # the comparison is BF16 against BF16; FP4 rows are train_bench's subject
        f, t = number(r, "fp4train_tokens_s", where), number(r, "torch_tokens_s", where)
        out.append({"config": text(r, "config", where), "fp4train_tokens_s": round(f), "torch_tokens_s": round(t),
                    "ratio": round(f / t, 3), "torch_mode": r.get("torch_mode")})
    if not out:
        raise BadInput(f"{rows[0][0].rsplit(':', 1)[0]}: no bf16 row to compare with PyTorch")
    return out


def check_latest(doc, where):
    if not isinstance(doc, dict):
        raise BadInput(f"{where}: a JSON object is needed")
    for f in ("machine", "date", "commit", "command"):
        text(doc, f, where)
    for section, fields in REQUIRED_ROW_FIELDS.items():
        rows = doc.get(section)
        if not isinstance(rows, list):
            raise BadInput(f"{where}: '{section}' must be a list")
        for i, row in enumerate(rows):
            w = f"{where}: {section}[{i}]"
            if not isinstance(row, dict):
                raise BadInput(f"{w}: a JSON object is needed")
            for f in fields:
                (number if f not in ("config", "recipe", "kernel", "dtype") else text)(row, f, w)


def load_latest(path):
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise BadInput(f"{path}: cannot read ({e.strerror})")
    except json.JSONDecodeError as e:
        raise BadInput(f"{path}: not JSON ({e.msg} at line {e.lineno})")
    check_latest(doc, path)
    return doc


def git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True, cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def merge(doc, runs, commit, machine):
    summary = []
    for ident, rows in runs:
        bench, date, device, command = ident
        section, key_fields = SECTIONS[bench]
        new = {"train_bench": train_rows, "quantize_bench": quantizer_rows, "torch_train_bench": torch_rows}[bench](rows)
        mach = machine or device
        for r in new:
            r.update({"date": date, "commit": commit, "command": command, "machine": mach})
        keys = {tuple(r[k] for k in key_fields) for r in new}
        doc[section] = [r for r in doc[section] if tuple(r.get(k) for k in key_fields) not in keys] + new
        summary.append(f"{bench} {date} ({len(new)} rows)")
    doc["date"] = max(ident[1] for ident, _ in runs)
    doc["commit"] = commit
    doc["machine"] = machine or runs[0][0][2]
    doc["command"] = ("last merged by scripts/bench_to_json.py: " + "; ".join(summary) +
                      "; every row merged since then names its own date, commit, command and machine")
    return doc


def write_atomically(path, doc):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".latest-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", help="JSON Lines files of bench --json runs")
    ap.add_argument("--latest", default=os.path.join(root, "docs", "benchmarks", "latest.json"))
    ap.add_argument("--commit", default=os.environ.get("FP4_COMMIT", ""),
                    help="the commit whose code ran (default $FP4_COMMIT, else git's HEAD)")
    ap.add_argument("--machine", default="", help="the machine, in words (default: the device name of the run)")
    ap.add_argument("--check", action="store_true", help="only check that --latest parses and has every field")
    args = ap.parse_args(argv)
    try:
        doc = load_latest(args.latest)
        if args.check:
            print(f"{args.latest}: ok ({', '.join(f'{len(doc[s])} {s} rows' for s in REQUIRED_ROW_FIELDS)})")
            return 0
        if not args.runs:
            raise BadInput("no run files given (or --check)")
        commit = args.commit or git_commit()
        if not commit:
            raise BadInput("the commit is unknown: pass --commit or set FP4_COMMIT (the tree has no git)")
        merged = merge(doc, [read_run(p) for p in args.runs], commit, args.machine)
        check_latest(merged, "merged result")
        write_atomically(args.latest, merged)
        print(f"{args.latest}: merged {', '.join(args.runs)}")
        return 0
    except BadInput as e:
        print(f"bench_to_json: {e}; {args.latest} is unchanged", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
