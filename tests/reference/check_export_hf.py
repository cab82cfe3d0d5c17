#!/usr/bin/env python3
"""Checks `fp4train export --format hf` against the CPU engine, end to end.

Trains a small model with the fp4train CLI (prepare + train, byte tokenizer), exports it (F32 and BF16),
and runs the export through an Olmo2ForCausalLM forward written here in PyTorch from Hugging Face's
conventions (post-sublayer RMSNorm, QK-norm over the whole projections before rotate-half RoPE, SwiGLU as
down(silu(gate) * up), untied head; names and shapes from config.json and model.safetensors, the file
parsed by hand). Asserts:
  - its logits at every position equal the engine's (tests/reference/checkpoint_logits) for the real ids
    within FP32 noise, and the engine gives -inf at the padded ids;
  - where transformers is installed, Olmo2ForCausalLM.from_pretrained(export) gives the same logits;
  - the BF16 export holds exactly the round-to-nearest-even BF16 of the F32 export;
  - the comparison is sensitive: swapping q/k, gate/up or the two sublayer norms, or moving the norms
    before the sublayers, changes the logits by far more than the tolerance.
Usage: check_export_hf.py --build-dir BUILD [--keep DIR]
"""
import argparse
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

TOL = 1e-4        # max |difference| over max |logit|, real ids
SENSITIVITY = 10  # a mutated model must be at least this many times the tolerance away


def read_safetensors(path):
    """name -> numpy array (BF16 widened to float32 exactly), and the metadata."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out, meta = {}, header.pop("__metadata__", {})
    for name, h in header.items():
        a, b = h["data_offsets"]
        raw = data[a:b]
        if h["dtype"] == "BF16":
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype={"F32": "<f4", "I32": "<i4"}[h["dtype"]])
        out[name] = arr.reshape(h["shape"]).copy()
    return out, meta


def bf16_rne(a):
    """float32 array -> float32 values rounded to BF16, nearest even (finite inputs)."""
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)


def olmo2_logits(cfg, w, tokens, swap=None, pre_norm=False):
    """Olmo2ForCausalLM's forward in float32 (eager attention). `swap` exchanges two weight names per
    layer and pre_norm moves the sublayer norms to the inputs: mutations for the sensitivity check."""
    d, h, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    hd = d // h
    eps = cfg["rms_norm_eps"]
    W = {k: torch.from_numpy(v) for k, v in w.items()}

    def rms(x, weight):
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def get(l, name):
        if swap and name in swap:
            name = swap[name]
        return W[f"model.layers.{l}.{name}"]

    b, t = tokens.shape
    # RoPE as HF computes it: inv_freq in float32, angles position * inv_freq, cos/sin of [f, f].
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    freqs = torch.arange(t, dtype=torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos(), emb.sin()

    def rope(x):  # [b, h, t, hd]
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    mask = torch.full((t, t), float("-inf")).triu(1)
    x = W["model.embed_tokens.weight"][torch.from_numpy(tokens).long()]
    for l in range(L):
        a_in = rms(x, get(l, "post_attention_layernorm.weight")) if pre_norm else x
        q = rms(a_in @ get(l, "self_attn.q_proj.weight").T, get(l, "self_attn.q_norm.weight"))
        k = rms(a_in @ get(l, "self_attn.k_proj.weight").T, get(l, "self_attn.k_norm.weight"))
        v = a_in @ get(l, "self_attn.v_proj.weight").T
        q, k, v = (z.view(b, t, h, hd).transpose(1, 2) for z in (q, k, v))
        q, k = rope(q), rope(k)
        s = q @ k.transpose(2, 3) * hd ** -0.5 + mask
        att = (F.softmax(s, dim=-1, dtype=torch.float32) @ v).transpose(1, 2).reshape(b, t, d)
        a = att @ get(l, "self_attn.o_proj.weight").T
        x = x + (a if pre_norm else rms(a, get(l, "post_attention_layernorm.weight")))
        m_in = rms(x, get(l, "post_feedforward_layernorm.weight")) if pre_norm else x
        m = (F.silu(m_in @ get(l, "mlp.gate_proj.weight").T) * (m_in @ get(l, "mlp.up_proj.weight").T)) @ \
            get(l, "mlp.down_proj.weight").T
        x = x + (m if pre_norm else rms(m, get(l, "post_feedforward_layernorm.weight")))
    x = rms(x, W["model.norm.weight"])
    return (x @ W["lm_head.weight"].T).numpy()


def transformers_error(hf_dir, tokens, ref, real, scale):
    """Where transformers (with Olmo2) is installed, its own model loaded from the export: the relative
    error of its logits against the engine's; None where it is not installed."""
    try:
        from transformers import Olmo2ForCausalLM
    except ImportError:
        return None
    model = Olmo2ForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.from_numpy(tokens).long()).logits.float().numpy()
    return float(np.abs(logits[..., :real] - ref[..., :real]).max()) / scale


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def write_corpus(root):
    rng = random.Random()
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 7)))
             for _ in range(50)]
    for split, docs in (("train", 4), ("val", 1)):
        os.makedirs(os.path.join(root, split))
        for i in range(docs):
            with open(os.path.join(root, split, f"doc{i}.txt"), "w") as f:
                f.write(" ".join(rng.choice(words) + ("." if j % 9 == 8 else "") for j in range(2500)))


def train_and_export(build, tmp):
    fp4train = os.path.join(build, "fp4train")
    text, shards, run_dir = (os.path.join(tmp, n) for n in ("text", "shards", "run"))
    write_corpus(text)
    run([fp4train, "prepare", "--input", os.path.join(text, "train"), "--val", os.path.join(text, "val"),
         "--tokenizer", "bytes", "--out", shards, "--threads", "1"])
    sets = ["model.n_layers=2", "model.d_model=64", "model.n_heads=4", "model.d_ff=96",
            "model.max_seq_len=64", f"data.train_dir={shards}", "data.train_text=", "data.val_text=",
            "data.batch=8", "data.seq=32", "train.steps=60", "optim.lr=1e-2", "optim.warmup=2",
            "train.eval_every=0", "train.eval_batches=2", "train.log_every=10"]
    cmd = [fp4train, "train", "--out", run_dir]
    for s in sets:
        cmd += ["--set", s]
    run(cmd)
    for dtype in ("f32", "bf16"):
        r = run([fp4train, "export", "--checkpoint", run_dir, "--out", os.path.join(tmp, "hf-" + dtype),
                 "--dtype", dtype])
        print(r.stdout.strip())
    return run_dir


def check_config(cfg, engine_vocab):
    expect = {"model_type": "olmo2", "architectures": ["Olmo2ForCausalLM"], "hidden_size": 64,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
              "intermediate_size": 96, "vocab_size": engine_vocab, "hidden_act": "silu",
              "tie_word_embeddings": False, "attention_bias": False, "max_position_embeddings": 64,
              "rms_norm_eps": 1e-6, "rope_theta": 500000.0, "eos_token_id": 256, "torch_dtype": "float32"}
    for k, v in expect.items():
        if cfg.get(k) != v:
            sys.exit(f"FAIL: config.json {k} = {cfg.get(k)!r}, expected {v!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--keep", help="keep the run, the exports and the logits in this directory")
    args = ap.parse_args()
    build = os.path.abspath(args.build_dir)
    for exe in ("fp4train", "checkpoint_logits"):
        if not os.access(os.path.join(build, exe), os.X_OK):
            sys.exit(f"FAIL: {exe} not built in {build}")
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        if args.keep:
            tmp = os.path.abspath(args.keep)
            os.makedirs(tmp, exist_ok=True)
        run_dir = train_and_export(build, tmp)
        logits_file = os.path.join(tmp, "engine_logits.safetensors")
        run([os.path.join(build, "checkpoint_logits"), "--checkpoint", run_dir, "--out", logits_file,
             "--rows", "3", "--seq", "24", "--seed", str(random.randrange(1 << 30))])
        eng, _ = read_safetensors(logits_file)
        tokens, ref = eng["tokens"], eng["logits"]

        hf = os.path.join(tmp, "hf-f32")
        with open(os.path.join(hf, "config.json")) as f:
            cfg = json.load(f)
        check_config(cfg, ref.shape[-1])
        w, meta = read_safetensors(os.path.join(hf, "model.safetensors"))
        if meta.get("format") != "pt":
            sys.exit(f"FAIL: model.safetensors metadata {meta}, transformers needs format=pt")
        real = 257  # the byte tokenizer's ids; the rest are padding rows
        if not np.all(np.isneginf(ref[..., real:])):
            sys.exit("FAIL: the engine's logits at padded ids are not -inf")

        ours = olmo2_logits(cfg, w, tokens)
        scale = float(np.abs(ref[..., :real]).max())
        err = float(np.abs(ours[..., :real] - ref[..., :real]).max()) / scale
        print(f"logits {tokens.shape[0]} x {tokens.shape[1]} x {real}: max |HF forward - engine| / max |logit| "
              f"= {err:.2e} (max |logit| {scale:.2f}, tolerance {TOL:.0e})")
        ok = err <= TOL
        terr = transformers_error(hf, tokens, ref, real, scale)
        if terr is None:
            print("transformers is not installed: its from_pretrained check is skipped")
        else:
            print(f"transformers Olmo2ForCausalLM.from_pretrained: max |difference| / max |logit| = {terr:.2e}")
            ok = ok and terr <= TOL

        w16, meta16 = read_safetensors(os.path.join(tmp, "hf-bf16", "model.safetensors"))
        with open(os.path.join(tmp, "hf-bf16", "config.json")) as f:
            if json.load(f).get("torch_dtype") != "bfloat16":
                sys.exit("FAIL: the BF16 export's config.json does not say torch_dtype bfloat16")
        if sorted(w16) != sorted(w) or meta16.get("format") != "pt":
            sys.exit("FAIL: the BF16 export holds other tensors than the F32 one")
        for name, a in w.items():
            if not np.array_equal(w16[name].view(np.uint32), bf16_rne(a).view(np.uint32)):
                sys.exit(f"FAIL: BF16 {name} is not the round-to-nearest-even of the F32 tensor")
        err16 = float(np.abs(olmo2_logits(cfg, w16, tokens)[..., :real] - ref[..., :real]).max()) / scale
        print(f"BF16 export: bit-exact RNE of the F32 tensors; its logits differ by {err16:.2e} (relative)")

        mutations = {
            "q_proj <-> k_proj": dict(swap={"self_attn.q_proj.weight": "self_attn.k_proj.weight",
                                            "self_attn.k_proj.weight": "self_attn.q_proj.weight"}),
            "q_norm <-> k_norm": dict(swap={"self_attn.q_norm.weight": "self_attn.k_norm.weight",
                                            "self_attn.k_norm.weight": "self_attn.q_norm.weight"}),
            "gate_proj <-> up_proj": dict(swap={"mlp.gate_proj.weight": "mlp.up_proj.weight",
                                                "mlp.up_proj.weight": "mlp.gate_proj.weight"}),
            "post-attention <-> post-feedforward norm": dict(
                swap={"post_attention_layernorm.weight": "post_feedforward_layernorm.weight",
                      "post_feedforward_layernorm.weight": "post_attention_layernorm.weight"}),
            "norms before the sublayers": dict(pre_norm=True),
        }
        for what, kw in mutations.items():
            e = float(np.abs(olmo2_logits(cfg, w, tokens, **kw)[..., :real] - ref[..., :real]).max()) / scale
            print(f"  mutation {what}: {e:.2e}")
            if e < SENSITIVITY * TOL:
                print(f"FAIL: the check cannot tell '{what}' apart ({e:.2e} < {SENSITIVITY * TOL:.0e})")
                ok = False
        if not ok:
            sys.exit("FAIL: the exported model's logits differ from the engine's")
        print("OK: the Hugging Face Olmo2 export computes the engine's logits")


if __name__ == "__main__":
    main()
