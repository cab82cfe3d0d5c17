#!/usr/bin/env python3
"""Checks an `fp4train export --format hf` directory with Hugging Face transformers itself.

For each run (given with --run, or two trained here: a small byte-level model with bf16 and with
tetrajet-v2-base on a synthetic corpus), it exports the latest checkpoint (F32) and asserts:
  - AutoTokenizer.from_pretrained(export) loads, and its ids on text samples (the held-out corpus in
    data/corpus/val when present, synthetic text, whitespace runs, non-ASCII) equal fp4train's tokenizer's
    (tests/reference/tokenize_dump), and decode(ids) gives the text back;
  - AutoModelForCausalLM.from_pretrained(export) with greedy `generate` continues prompts of several
    lengths with exactly the ids `fp4train sample --temperature 0 --device cpu` gives (FP32 on both
    sides). For a run whose recipe quantizes the forward (NVFP4), the export holds the master weights and
    computes without quantization: the script prints where the continuations part and by what logit
    margin, and does not fail on it.
With --gpt2 DIR (default data/tokenizers/gpt2 when present) the GPT-2 tokenizer files written by
tests/reference/hf_tokenizer_files (the same writer as the export) are checked the same way without a run.
Prints one verdict line; exits 0 on agreement, 1 on a mismatch, 77 when torch or transformers is missing.
Usage: check_export_transformers.py --build-dir BUILD [--run RUN_DIR ...] [--gpt2 DIR] [--keep DIR]
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPT_CHARS = (1, 4, 16, 23, 40, 64)  # prompt lengths (characters of corpus text)


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, **kw)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return r


def write_corpus(root):
    rng = random.Random(5)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 7)))
             for _ in range(40)]
    for split, docs in (("train", 4), ("val", 1)):
        os.makedirs(os.path.join(root, split))
        for i in range(docs):
            with open(os.path.join(root, split, f"doc{i}.txt"), "w") as f:
                f.write(" ".join(rng.choice(words) + ("." if j % 9 == 8 else "") for j in range(3000)))


def train_runs(fp4train, work):
    text, shards = os.path.join(work, "text"), os.path.join(work, "shards")
    write_corpus(text)
    run([fp4train, "prepare", "--input", os.path.join(text, "train"), "--val", os.path.join(text, "val"),
         "--tokenizer", "bytes", "--out", shards, "--threads", "2"])
    runs = []
    for recipe in ("bf16", "tetrajet-v2-base"):
        out = os.path.join(work, "run-" + recipe)
        sets = ["model.n_layers=2", "model.d_model=128", "model.n_heads=2", "model.d_ff=256",
                "model.max_seq_len=128", f"data.train_dir={shards}", "data.train_text=", "data.val_text=",
                "data.batch=8", "data.seq=128", "train.steps=150", "optim.lr=3e-3", "optim.warmup=10",
                "train.eval_every=0", "train.eval_batches=2", "train.log_every=50", "train.device=cpu"]
        cmd = [fp4train, "train", "--recipe", recipe, "--out", out]
        for s in sets:
            cmd += ["--set", s]
        print(f"training {recipe} (150 steps, CPU) ...", flush=True)
        run(cmd)
        runs.append(out)
    return runs, text


def text_samples(corpus_dirs):
    """Valid UTF-8 pieces of the held-out text, plus edge cases."""
    samples = ["The history of the", "  two  spaces\n\n\ttab", "naïve café — 中文 😀", "it's 42, isn't it?",
               " leading space", "trailing space ", "a" * 300, "\n"]
    for d in corpus_dirs:
        if not os.path.isdir(d):
            continue
        files = sorted(os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs if f.endswith(".txt"))
        for path in files[:12]:
            with open(path, "rb") as f:
                data = f.read(200000)
            for off in (0, len(data) // 3, 2 * len(data) // 3):
                samples.append(data[off:off + 4000].decode("utf-8", errors="ignore"))
    return [s for s in samples if s]


def run_tokenizer(run_dir):
    """The run's tokenizer spec: data.tokenizer of its latest checkpoint's config, else its data manifest's."""
    ckpts = os.path.join(run_dir, "checkpoints")
    latest = sorted(d for d in os.listdir(ckpts) if os.path.isfile(os.path.join(ckpts, d, "trainer.json")))[-1]
    with open(os.path.join(ckpts, latest, "trainer.json")) as f:
        data = json.load(f)["config"]["data"]
    if data.get("tokenizer"):
        return data["tokenizer"]
    with open(os.path.join(data["train_dir"], "manifest.json")) as f:
        return json.load(f)["tokenizer"]


def fp4_ids(build, spec, text, work):
    path = os.path.join(work, "sample.txt")
    with open(path, "wb") as f:
        f.write(text.encode("utf-8"))
    out = run([os.path.join(build, "tokenize_dump"), spec, path]).stdout.split()
    return [int(x) for x in out]


def check_tokenizer(build, spec, export_dir, samples, work, label):
    from transformers import AutoTokenizer
    try:
        tok = AutoTokenizer.from_pretrained(export_dir)
    except Exception as e:  # the failure this check exists for
        return [f"{label}: AutoTokenizer.from_pretrained failed: {type(e).__name__}: {e}"]
    bad = []
    for s in samples:
        ours = fp4_ids(build, spec, s, work)
        theirs = tok(s, add_special_tokens=False)["input_ids"]
        if ours != theirs:
            i = next((k for k, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
            bad.append(f"{label}: ids differ at {i} for text {s[:60]!r}: ours {ours[i:i + 5]} transformers "
                       f"{theirs[i:i + 5]}")
        elif tok.decode(theirs) != s:
            bad.append(f"{label}: decode(encode(text)) != text for {s[:60]!r}")
    print(f"{label}: {len(samples)} texts, {sum(len(s) for s in samples)} characters tokenized: "
          f"{'identical ids' if not bad else str(len(bad)) + ' mismatches'}")
    return bad


def check_generation(fp4train, run_dir, export_dir, prompt_source, tokens, quantized, work, label):
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(export_dir, dtype=torch.float32)
    model.eval()
    with open(os.path.join(export_dir, "generation_config.json")) as f:
        eos = json.load(f)["eos_token_id"]
    bad, notes = [], []
    for n in PROMPT_CHARS:
        prompt = prompt_source[:n]
        ids_file = os.path.join(work, "ids.json")
        run([fp4train, "sample", "--checkpoint", run_dir, "--prompt", prompt, "--temperature", "0",
             "--tokens", str(tokens), "--device", "cpu", "--ids-out", ids_file])
        with open(ids_file) as f:
            ours = json.load(f)
        with torch.no_grad():
            inp = torch.tensor([ours["prompt"]])
            out = model.generate(inp, attention_mask=torch.ones_like(inp), max_new_tokens=tokens, do_sample=False,
                                 eos_token_id=eos, pad_token_id=eos)
        theirs = out[0, inp.shape[1]:].tolist()
        if theirs == ours["generated"]:
            continue
        i = next((k for k, (a, b) in enumerate(zip(ours["generated"], theirs)) if a != b),
                 min(len(ours["generated"]), len(theirs)))
        with torch.no_grad():  # how close the exported model was to choosing fp4train's token there
            ctx = torch.tensor([ours["prompt"] + theirs[:i]])
            logits = model(ctx).logits[0, -1]
        top = torch.topk(logits, 2)
        msg = (f"{label}: prompt of {len(ours['prompt'])} tokens: continuations part at new token {i}: "
               f"fp4train {ours['generated'][i:i + 4]} transformers {theirs[i:i + 4]} "
               f"(transformers' top-2 logit margin there {float(top.values[0] - top.values[1]):.3g})")
        (notes if quantized else bad).append(msg)
    verdict = "identical" if not bad and not notes else f"{len(bad) + len(notes)} of {len(PROMPT_CHARS)} differ"
    print(f"{label}: greedy continuations of {len(PROMPT_CHARS)} prompts ({tokens} new tokens): {verdict}"
          + (" (expected: the export computes the master weights without the recipe's NVFP4 quantization)"
             if quantized and notes else ""))
    for m in notes:
        print("  " + m)
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--run", action="append", default=[], help="run directory (repeatable); default: train two")
    ap.add_argument("--gpt2", default=os.path.join(ROOT, "data", "tokenizers", "gpt2"),
                    help="GPT-2 tokenizer directory to check without a run ('' to skip)")
    ap.add_argument("--tokens", type=int, default=32, help="new tokens per greedy continuation")
    ap.add_argument("--keep", help="keep the runs and exports in this directory")
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
        import transformers
    except ImportError as e:
        print(f"SKIP: {e} (this check needs torch and transformers)")
        return SKIP
    print(f"transformers {transformers.__version__}")
    build = os.path.abspath(args.build_dir)
    fp4train = os.path.join(build, "fp4train")
    work = args.keep or tempfile.mkdtemp(prefix="fp4-export-tf-")
    os.makedirs(work, exist_ok=True)
    bad = []
    try:
        runs, synthetic = (args.run, None) if args.run else train_runs(fp4train, work)
        corpus = [os.path.join(ROOT, "data", "corpus", "val")] + ([synthetic] if synthetic else [])
        samples = text_samples(corpus)
        prompt_source = next(s for s in samples[8:] + samples if len(s) >= max(PROMPT_CHARS))
        for k, run_dir in enumerate(runs):
            label = os.path.basename(os.path.normpath(run_dir))
            export_dir = os.path.join(work, f"hf-{k}-{label}")
            r = run([fp4train, "export", "--checkpoint", run_dir, "--out", export_dir, "--force"])
            quantized = "quantizes the forward" in r.stderr
            spec = run_tokenizer(run_dir)
            bad += check_tokenizer(build, spec, export_dir, samples, work, label)
            bad += check_generation(fp4train, run_dir, export_dir, prompt_source, args.tokens, quantized, work,
                                    label)
        if args.gpt2 and os.path.isdir(args.gpt2):
            gdir = os.path.join(work, "gpt2-tokenizer")
            run([os.path.join(build, "hf_tokenizer_files"), args.gpt2, gdir])
            bad += check_tokenizer(build, args.gpt2, gdir, samples, work, "gpt2")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    for m in bad:
        print("MISMATCH: " + m)
    print("PASS: transformers reads the exports as fp4train does" if not bad else f"FAIL: {len(bad)} mismatches")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
