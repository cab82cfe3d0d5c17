#!/usr/bin/env python3
"""Fuzz test of the fp4train binary: a fixed, seeded corpus of mutated inputs per family (run configs,
--set overrides, recipes, manifests and shards, checkpoints, tokenizer files, metrics.jsonl lines for
`report`, CLI arguments).

Every run must end by itself within the timeout, never by a signal, and leave no temporary file behind.
A refused input exits non-zero with an `error:` line (or a command-line parser message) that names the
problem; raw library texts (std::bad_alloc, basic_string, json.exception) count as unclear. Inputs that
are certainly invalid (a flipped byte in a checksummed file) must be refused; the unmutated base inputs
must succeed. Usage: fuzz_cli.py --binary build/fp4train [--per-family N] [--seed S] [--jobs J]
"""
import argparse, concurrent.futures as cf, json, os, random, shutil, subprocess, sys, tempfile

UNCLEAR = ("bad_alloc", "basic_string", "json.exception", "vector::", "stoi", "stol", "terminate called",
           "std::", "out_of_range", "bad shape")
TIMEOUT_S = 30
SMALL = ["--set", "model.n_layers=2", "--set", "model.d_model=32", "--set", "model.n_heads=2",
         "--set", "model.d_ff=64", "--set", "model.max_seq_len=64", "--set", "data.batch=2",
         "--set", "data.seq=16", "--set", "train.eval_every=0", "--set", "train.eval_batches=1",
         "--set", "optim.warmup=0", "--set", "train.log_every=1", "--set", "data.train_text=",
         "--set", "data.val_text="]


def run(binary, args, cwd):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    try:
        p = subprocess.run([binary] + args, cwd=cwd, env=env, capture_output=True, timeout=TIMEOUT_S,
                           stdin=subprocess.DEVNULL)
        return p.returncode, p.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        return "timeout", ""


def leftovers(root):
    found = []
    for d, _, files in os.walk(root):
        for f in files + [os.path.basename(d)]:
            if f.startswith(".tmp-") or f.endswith(".tmp"):
                found.append(os.path.join(d, f))
    return found


def mutate_text(rng, text, tokens):
    """One edit of a text: a value replaced by an extreme token, a line dropped or duplicated, bytes flipped."""
    lines = text.split("\n")
    k = rng.randrange(5)
    i = rng.randrange(len(lines))
    if k == 0 and "=" in lines[i]:
        key = lines[i].split("=")[0]
        lines[i] = key + "= " + rng.choice(tokens)
    elif k == 1:
        del lines[i]
    elif k == 2:
        lines.insert(i, lines[i])
    elif k == 3:
        s = list(lines[i]) or [" "]
        s[rng.randrange(len(s))] = chr(rng.randrange(32, 127))
        lines[i] = "".join(s)
    else:
        lines.insert(i, rng.choice(["[x]", "x = 1", "[optim]", "= 3", "[[a]]", "k = [1 0]", "\x00"]))
    return "\n".join(lines)


VALUES = ["0", "-1", "1", "2", "7", "99", "-99", "1.5", "257.9", "1e300", "-1e300", "inf", "nan", "true",
          "\"x\"", "\"\"", "[]", "[1 0]", "[2, 3]", "4294967296", "4294967312", "2147483647", "-2147483648",
          "9223372036854775807", "18446744073709551616", "1099511627776", "3.4e38", "1e-45", "{}"]


class Fuzz:
    def __init__(self, binary, work, seed, per_family):
        self.binary, self.work, self.seed, self.n = os.path.abspath(binary), work, seed, per_family
        self.stats = {}
        self.failures = []

    def check(self, family, args, cwd, must_fail=False, must_pass=False, names=None):
        rc, err = run(self.binary, args, cwd)
        st = self.stats.setdefault(family, {"inputs": 0, "refused": 0, "accepted": 0, "signals": 0,
                                            "hangs": 0, "unclear": 0, "leftovers": 0})
        st["inputs"] += 1
        what = f"{family}: fp4train {' '.join(args)[:300]}"
        if rc == "timeout":
            st["hangs"] += 1
            self.failures.append(f"{what}: no exit within {TIMEOUT_S} s")
        elif rc < 0 or rc >= 128:
            st["signals"] += 1
            self.failures.append(f"{what}: ended by signal / rc {rc}: {err[-400:]}")
        elif rc == 0:
            st["accepted"] += 1
            if must_fail:
                self.failures.append(f"{what}: accepted an invalid input")
        else:
            st["refused"] += 1
            msg = err.strip()
            # A parser's text after "not valid JSON" / "invalid TOML" is detail, the message already names the file.
            raw = any(u in msg for u in UNCLEAR) and "not valid JSON" not in msg and "invalid TOML" not in msg
            unclear = not msg or raw or (names and not any(n in msg for n in names))
            if unclear:
                st["unclear"] += 1
                self.failures.append(f"{what}: unclear message: {msg[-400:]!r}")
            if must_pass:
                self.failures.append(f"{what}: refused a valid input: {msg[-400:]}")
        left = leftovers(cwd)
        if left:
            st["leftovers"] += 1
            self.failures.append(f"{what}: left temporary files {left[:3]}")
            for f in left:
                shutil.rmtree(f, ignore_errors=True) if os.path.isdir(f) else os.remove(f)

    # --- base inputs -------------------------------------------------------------------------------
    def setup(self):
        text = os.path.join(self.work, "text")
        rng = random.Random(self.seed)
        for split, docs in (("train", 4), ("val", 1)):
            os.makedirs(os.path.join(text, split))
            for d in range(docs):
                words = [''.join(rng.choice("abcdefgh") for _ in range(rng.randrange(2, 7))) for _ in range(400)]
                with open(os.path.join(text, split, f"d{d}.txt"), "w") as f:
                    f.write(" ".join(words) + ".\n")
        self.check("base", ["prepare", "--input", "text/train", "--val", "text/val", "--tokenizer", "bytes",
                            "--out", "shards", "--threads", "1"], self.work, must_pass=True)
        self.base_train = ["train"] + SMALL + ["--set", "data.train_dir=shards", "--set", "train.steps=2",
                                               "--set", "train.ckpt_every=1"]
        self.check("base", self.base_train + ["--out", "base"], self.work, must_pass=True)
        self.check("base", ["eval", "--checkpoint", "base", "--batches", "1"], self.work, must_pass=True)
        self.write_tokenizer(os.path.join(self.work, "tok"))
        self.check("base", ["prepare", "--input", "text/train", "--tokenizer", "tok", "--out", "tokshards",
                            "--threads", "1"], self.work, must_pass=True)

    def write_tokenizer(self, d):
        # GPT-2's printable stand-ins for bytes, then a few merges of frequent letter pairs.
        printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
        mapping, extra = {}, 0
        for b in range(256):
            if b in printable:
                mapping[b] = chr(b)
            else:
                mapping[b] = chr(256 + extra)
                extra += 1
        enc = {mapping[b]: i for i, b in enumerate(range(256))}
        merges = [("a", "b"), ("c", "d"), ("ab", "cd"), ("e", "f"), ("g", "h")]
        for a, b in merges:
            enc[a + b] = len(enc)
        enc["<|endoftext|>"] = len(enc)
        os.makedirs(d)
        with open(os.path.join(d, "encoder.json"), "w") as f:
            json.dump(enc, f)
        with open(os.path.join(d, "vocab.bpe"), "w") as f:
            f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))

    def case_dir(self, family, i):
        d = os.path.join(self.work, f"{family}-{i}")
        os.makedirs(d)
        os.symlink(os.path.join(self.work, "shards"), os.path.join(d, "shards"))
        return d

    # --- families ----------------------------------------------------------------------------------
    def configs(self, rng, i):
        base = ("[model]\nn_layers = 2\nd_model = 32\nn_heads = 2\nd_ff = 64\nmax_seq_len = 64\n"
                "[data]\ntrain_dir = \"shards\"\ntrain_text = \"\"\nval_text = \"\"\nbatch = 2\nseq = 16\n"
                "grad_accum = 1\n[optim]\nlr = 0.002\neps = 1e-8\nwarmup = 0\ntotal_steps = 4\n"
                "[train]\nsteps = 1\neval_every = 0\neval_batches = 1\nckpt_every = 0\nout_dir = \"run\"\n"
                "[recipe]\nname = \"bf16\"\n")
        text = base
        for _ in range(1 + rng.randrange(3)):
            text = mutate_text(rng, text, VALUES)
        d = self.case_dir("config", i)
        with open(os.path.join(d, "run.toml"), "w") as f:
            f.write(text)
        return ["train", "--config", "run.toml"], d, {}

    def overrides(self, rng, i):
        keys = ["model.n_layers", "model.d_model", "model.d_ff", "model.vocab_size", "model.rope_theta",
                "data.batch", "data.seq", "data.grad_accum", "optim.lr", "optim.eps", "optim.beta2",
                "optim.total_tokens", "optim.total_steps", "optim.warmup", "train.steps", "train.seed",
                "train.keep_checkpoints", "bf16_layers", "linear.q1.rht", "osci_reset.start", "osci_reset.window",
                "optimizer", "linear.q2.block", "model.preset", "nosuch.key"]
        args = self.base_train[:]
        for _ in range(1 + rng.randrange(2)):
            args += ["--set", f"{rng.choice(keys)}={rng.choice(VALUES).strip(chr(34))}"]
        return args + ["--set", "train.steps=1", "--out", "run"], self.case_dir("set", i), {}

    def recipes(self, rng, i):
        base = ("name = \"fz\"\noptimizer = \"adamw\"\nbf16_layers = [0, -1]\n[linear.q1]\nformat = \"nvfp4\"\n"
                "block = \"1x16\"\nrounding = \"rtn\"\nrht = 0\n[linear.q2]\nformat = \"nvfp4\"\nblock = \"16x16\"\n"
                "[osci_reset]\nenabled = false\nwindow = 3\nperiod = 4\nstart = 0.5\nthreshold = 2\n")
        text = base
        for _ in range(1 + rng.randrange(3)):
            text = mutate_text(rng, text, VALUES)
        d = self.case_dir("recipe", i)
        with open(os.path.join(d, "r.toml"), "w") as f:
            f.write(text)
        return self.base_train + ["--set", "train.steps=1", "--recipe", "r.toml", "--out", "run"], d, {}

    def data(self, rng, i):
        d = self.case_dir("data", i)
        os.remove(os.path.join(d, "shards"))
        shutil.copytree(os.path.join(self.work, "shards"), os.path.join(d, "shards"))
        must_fail = False
        if rng.random() < 0.5:
            path = os.path.join(d, "shards", "manifest.json")
            m = json.load(open(path))
            field = rng.choice(["eot_id", "vocab_size", "format_version", "train.tokens", "val.tokens",
                                "train.documents", "tokenizer"])
            text = rng.choice(VALUES)
            try:
                value = json.loads(text)
            except ValueError:  # not JSON ([1 0], nan): the text itself, as a string
                value = text
            if "." in field:
                a, b = field.split(".")
                m[a][b] = value
            else:
                m[field] = value
            json.dump(m, open(path, "w"))
        else:
            shards = sorted(f for f in os.listdir(os.path.join(d, "shards")) if f.endswith(".bin"))
            path = os.path.join(d, "shards", rng.choice(shards))
            blob = bytearray(open(path, "rb").read())
            at = rng.randrange(len(blob))
            blob[at] ^= 1 << rng.randrange(8)
            open(path, "wb").write(bytes(blob))
            must_fail = True  # every shard byte is under a checksum or must be zero
        return self.base_train + ["--set", "train.steps=1", "--out", "run"], d, {"must_fail": must_fail}

    def checkpoints(self, rng, i):
        d = self.case_dir("ckpt", i)
        shutil.copytree(os.path.join(self.work, "base"), os.path.join(d, "base"))
        root = os.path.join(d, "base", "checkpoints")
        step = sorted(f for f in os.listdir(root) if f.startswith("step_"))[-1]
        files = ["model.safetensors", "state.safetensors", "trainer.json", "manifest.json", "latest"]
        f = rng.choice(files)
        path = os.path.join(root, "latest") if f == "latest" else os.path.join(root, step, f)
        blob = bytearray(open(path, "rb").read())
        must_fail = f in ("model.safetensors", "state.safetensors", "trainer.json")
        if rng.random() < 0.7 or not blob:
            at = rng.randrange(len(blob))
            blob[at] ^= 1 << rng.randrange(8)
        else:
            blob = blob[: rng.randrange(len(blob))]
        open(path, "wb").write(bytes(blob))
        cmd = rng.choice([["eval", "--checkpoint", "base", "--batches", "1"],
                          self.base_train + ["--set", "train.steps=3", "--out", "base"]])
        return cmd, d, {"must_fail": must_fail}

    def tokenizers(self, rng, i):
        d = self.case_dir("tok", i)
        shutil.copytree(os.path.join(self.work, "tok"), os.path.join(d, "tok"))
        f = os.path.join(d, "tok", rng.choice(["encoder.json", "vocab.bpe"]))
        text = open(f, encoding="utf-8").read()
        if f.endswith(".json") and rng.random() < 0.6:
            enc = json.loads(text)
            k = rng.choice(list(enc))
            enc[k] = json.loads(rng.choice(["-1", "999999", "1.5", "\"x\"", "4294967296", "0", "true"]))
            text = json.dumps(enc)
        else:
            text = mutate_text(rng, text, ["a b", "x", "ab cd ef", "", "\u0120 \u0120"])
        open(f, "w", encoding="utf-8").write(text)
        return ["prepare", "--input", os.path.join(self.work, "text/train"), "--tokenizer", "tok", "--out", "out",
                "--threads", "1"], d, {}

    def reports(self, rng, i):
        # The base run's metrics.jsonl with one line damaged: a record without a field the report reads
        # or a line that is no object must be refused naming the file; other edits may stay valid.
        d = self.case_dir("report", i)
        os.makedirs(os.path.join(d, "run"))
        lines = open(os.path.join(self.work, "base", "metrics.jsonl")).read().splitlines()
        train = [k for k, l in enumerate(lines) if json.loads(l).get("type") == "train"]
        k = rng.randrange(len(lines))
        kind = rng.randrange(4)
        must_fail = kind < 2
        if kind == 0:
            lines[k] = rng.choice(["{}", "5", "[1, 2]", "null", "\"train\"", "{\"type\": \"train\"}",
                                   "{\"type\": 3}", "{\"type\": \"eval\"}", "{\"type\": \"osci_reset\"}"])
        elif kind == 1:
            k = rng.choice(train)
            rec = json.loads(lines[k])
            del rec[rng.choice(["type", "step", "tokens", "loss"])]
            lines[k] = json.dumps(rec)
        elif kind == 2:
            rec = json.loads(lines[k])
            text = rng.choice(VALUES)
            try:
                rec[rng.choice(list(rec))] = json.loads(text)
            except ValueError:
                rec[rng.choice(list(rec))] = text
            lines[k] = json.dumps(rec)
        else:
            blob = "\n".join(lines)
            lines = [blob[: rng.randrange(len(blob))]]
        with open(os.path.join(d, "run", "metrics.jsonl"), "w") as f:
            f.write("\n".join(lines) + "\n")
        return ["report", "run", "--svg", "curves.svg"], d, {"must_fail": must_fail, "names": ["metrics.jsonl"]}

    def cli(self, rng, i):
        words = ["train", "prepare", "eval", "sample", "export", "report", "launch", "--config", "--set", "--recipe",
                 "--out", "--resume", "--input", "--tokenizer", "--threads", "--val-fraction", "--val-sample",
                 "--checkpoint", "--prompt", "--tokens", "--seed", "--temperature", "--top-k", "--batches",
                 "--format", "--dtype", "--gpus", "--", "base", "shards", "text/train", "bytes", "''", "-1",
                 "100000", "nan", "inf", "1e300", "18446744073709551616", "0", "x=y", "--help-all"]
        args = [rng.choice(words[:7])] + [rng.choice(words) for _ in range(rng.randrange(1, 7))]
        args = ["" if a == "''" else a for a in args]
        d = self.case_dir("cli", i)
        os.symlink(os.path.join(self.work, "base"), os.path.join(d, "base"))
        os.symlink(os.path.join(self.work, "text"), os.path.join(d, "text"))
        if "launch" in args:  # launch starts other processes: keep it to its argument checks
            args = [a for a in args if a not in ("--", "train")]
        return args, d, {}

    def run_all(self, jobs):
        self.setup()
        families = [("config", self.configs), ("set", self.overrides), ("recipe", self.recipes),
                    ("data", self.data), ("checkpoint", self.checkpoints), ("tokenizer", self.tokenizers),
                    ("report", self.reports), ("cli", self.cli)]
        cases = []
        for name, make in families:
            rng = random.Random(f"{self.seed}-{name}")
            for i in range(self.n):
                args, d, opts = make(rng, i)
                cases.append((name, args, d, opts))
        with cf.ThreadPoolExecutor(jobs) as pool:
            list(pool.map(lambda c: (self.check(c[0], c[1], c[2], **c[3]), shutil.rmtree(c[2])), cases))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--per-family", type=int, default=200)
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="fp4_fuzz_")
    try:
        fz = Fuzz(a.binary, work, a.seed, a.per_family)
        fz.run_all(a.jobs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'family':<11} inputs refused accepted signals hangs unclear leftovers")
    for fam, st in fz.stats.items():
        print(f"{fam:<11} {st['inputs']:>6} {st['refused']:>7} {st['accepted']:>8} {st['signals']:>7} "
              f"{st['hangs']:>5} {st['unclear']:>7} {st['leftovers']:>9}")
    if a.json:
        json.dump(fz.stats, open(a.json, "w"), indent=2)
    for f in fz.failures[:60]:
        print("FAIL", f)
    print(f"{len(fz.failures)} failures")
    return 1 if fz.failures else 0


if __name__ == "__main__":
    sys.exit(main())
