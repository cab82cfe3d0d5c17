#!/usr/bin/env python3
"""Checks the CPU reference engine against an independent OLMo-2 written in plain PyTorch.

engine_dump (tests/reference/engine_dump.cpp) writes the initial weights, the batches, the loss and every
gradient at the initial weights, and the weights after 10 AdamW steps. This script rebuilds the model
with torch.nn.functional and autograd in float64, loads the same weights and batches, and asserts:
  - the loss and the gradient of every parameter match (norm-wise relative error <= 1e-4);
  - 10 steps of torch.optim.AdamW (same parameter groups, cosine schedule, global-norm clipping,
    gradient accumulation over two micro-batches) give the same per-step losses and gradient norms
    and the same weight updates; each step is also taken from exactly the engine's saved state
    (weights, AdamW moments, step) and must land on its next state.
Usage: check_torch_cpu.py --build-dir BUILD [--keep DIR]
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

TOL_GRAD = 1e-4   # loss, gradients, one AdamW step: norm-wise relative
TRAJ_FACTOR = 5.0  # free-running trajectory: engine error <= 5 x torch FP32's own error ...
TRAJ_FLOOR = 1e-3  # ... or 1e-3 (see check_trajectory)


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    dtypes = {"F32": np.float32, "I32": np.int32, "I64": np.int64}
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        arr = np.frombuffer(data[a:b], dtype=dtypes[h["dtype"]]).reshape(h["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


class Olmo2:
    """OLMo-2 as in Hugging Face's Olmo2 modeling: post-sublayer RMSNorm, QK-norm over the full
    projections, rotate-half RoPE, SwiGLU, untied head. Weights in a dict keyed by fp4train's names."""

    def __init__(self, cfg, params):
        self.cfg = cfg
        self.p = params

    def rms(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg["norm_eps"]) * w

    def rope(self, x):  # x [B, H, T, hd]
        hd, t = x.shape[-1], x.shape[-2]
        inv_freq = 1.0 / (self.cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        ang = torch.outer(torch.arange(t, dtype=torch.float64), inv_freq)
        emb = torch.cat([ang, ang], dim=-1)
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    def forward(self, tokens):
        c, p = self.cfg, self.p
        b, t = tokens.shape
        d, h = c["d_model"], c["n_heads"]
        hd = d // h
        x = F.embedding(tokens.long(), p["embed"])
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        for l in range(c["n_layers"]):
            pre = f"blocks.{l}."
            q, k, v = F.linear(x, p[pre + "attn.wqkv"]).split(d, dim=-1)
            q = self.rms(q, p[pre + "attn.q_norm"])
            k = self.rms(k, p[pre + "attn.k_norm"])
            q, k, v = (z.view(b, t, h, hd).transpose(1, 2) for z in (q, k, v))
            q, k = self.rope(q), self.rope(k)
            s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
            att = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v
            y = F.linear(att.transpose(1, 2).reshape(b, t, d), p[pre + "attn.wo"])
            x = x + self.rms(y, p[pre + "attn_norm"])
            gate, up = F.linear(x, p[pre + "mlp.w_gate_up"]).split(c["d_ff"], dim=-1)
            y = F.linear(F.silu(gate) * up, p[pre + "mlp.w_down"])
            x = x + self.rms(y, p[pre + "mlp_norm"])
        x = self.rms(x, p["final_norm"])
        return F.linear(x, p["lm_head"])

    def loss_sums(self, tokens, targets):
        """Sums over counted tokens of (ce + z * lse^2) and of ce; padded ids are not in the softmax."""
        logits = self.forward(tokens)[..., : self.cfg["vocab_real"]].reshape(-1, self.cfg["vocab_real"])
        targets = targets.reshape(-1).long()
        keep = targets >= 0
        lse = torch.logsumexp(logits[keep], dim=-1)
        ce = F.cross_entropy(logits, targets, ignore_index=-1, reduction="sum")
        return ce + self.cfg["z_loss"] * (lse ** 2).sum(), ce


def cosine_lr(s, step):
    peak, warm, total, ratio = s["peak_lr"], s["warmup_steps"], s["total_steps"], s["final_ratio"]
    if step < warm:
        return peak * (step + 1) / warm
    if step >= total:
        return ratio * peak
    progress = (step - warm) / (total - warm)
    return ratio * peak + (peak - ratio * peak) * 0.5 * (1 + math.cos(math.pi * progress))


def fresh_params(names, tensors):
    return {n: tensors["init." + n].double().clone().requires_grad_(True) for n in names}


def check_gradients(meta, tensors, names, failures):
    params = fresh_params(names, tensors)
    model = Olmo2(meta["config"], params)
    batches = [(tensors["tokens.0." + str(m)], tensors["targets.0." + str(m)]) for m in range(2)]
    total = sum(int((tg >= 0).sum()) for _, tg in batches)
    loss = ce = 0
    for tok, tg in batches:
        l, c = model.loss_sums(tok, tg)
        loss, ce = loss + l, ce + c
    (loss / total).backward()
    want = meta["initial"]
    for what, mine, ref in (("loss", want["loss"], loss.item() / total), ("ce_loss", want["ce_loss"], ce.item() / total)):
        e = abs(mine - ref) / abs(ref)
        print(f"  {what:32s} engine {mine:.8f} torch {ref:.8f} rel {e:.2e}")
        if e > TOL_GRAD:
            failures.append(f"{what}: relative error {e:.2e}")
    worst = 0.0
    for n in names:
        e = rel(tensors["grad." + n], params[n].grad)
        worst = max(worst, e)
        if e > TOL_GRAD:
            failures.append(f"gradient of {n}: relative error {e:.2e}")
    print(f"  gradients of {len(names)} parameters: worst relative error {worst:.2e}")
    return worst


def make_adamw(meta, params, names):
    """torch.optim.AdamW with OLMo's groups: decay on every matrix except the embedding, never on norms."""
    h = meta["hyper"]
    wd = {p["name"]: p["weight_decay"] for p in meta["parameters"]}
    return torch.optim.AdamW(
        [{"params": [params[n] for n in names if wd[n]], "weight_decay": h["weight_decay"]},
         {"params": [params[n] for n in names if not wd[n]], "weight_decay": 0.0}],
        lr=0.0, betas=(h["beta1"], h["beta2"]), eps=h["eps"])


def torch_step(meta, tensors, model, params, opt, step):
    """One optimizer step on the step's two micro-batches; returns (mean loss, gradient norm, lr)."""
    lr = cosine_lr(meta["schedule"], step)
    for g in opt.param_groups:
        g["lr"] = lr
    opt.zero_grad()
    batches = [(tensors[f"tokens.{step}.{m}"], tensors[f"targets.{step}.{m}"]) for m in range(2)]
    total = sum(int((tg >= 0).sum()) for _, tg in batches)
    loss = 0.0
    for tok, tg in batches:  # gradient accumulation, averaged by token count
        l, _ = model.loss_sums(tok, tg)
        (l / total).backward()
        loss += l.item()
    norm = torch.nn.utils.clip_grad_norm_(list(params.values()), meta["hyper"]["grad_clip"]).item()
    opt.step()
    return loss / total, norm, lr


def check_flags(meta, names, failures):
    wd = {p["name"]: p["weight_decay"] for p in meta["parameters"]}
    for n in names:
        expect = len(next(p["shape"] for p in meta["parameters"] if p["name"] == n)) == 2 and n != "embed"
        if wd[n] != expect:
            failures.append(f"parameter {n}: weight_decay flag {wd[n]}, expected {expect}")


def check_steps(meta, tensors, names, failures):
    """Each step is taken by torch.optim.AdamW from exactly the engine's state (weights, moments, step
    count); the engine's next state must agree: loss, gradient norm and both moments to TOL_GRAD.
    The weight update is then checked against the AdamW rule applied to the engine's own new moments
    (decoupled decay by group, bias correction, the step's lr), to FP32 storage precision. Comparing
    it with torch's update directly would be ill-conditioned: where |g| is near eps (1e-8) the update
    lr * m / (sqrt(v) + eps) turns FP32-rounding-sized gradient differences into visible ones."""
    h = meta["hyper"]
    wd = {p["name"]: p["weight_decay"] for p in meta["parameters"]}
    worst = {"loss": 0.0, "grad_norm": 0.0, "m": 0.0, "v": 0.0, "update rule": 0.0, "update vs torch": 0.0}
    for k, want in enumerate(meta["steps"]):
        st, nx = f"state.{k}.", f"state.{k + 1}."
        if int(tensors[st + "adamw.step"].item()) != k or int(tensors[nx + "adamw.step"].item()) != k + 1:
            failures.append(f"step {k}: saved step counters {tensors[st + 'adamw.step'].item()}, "
                            f"{tensors[nx + 'adamw.step'].item()}")
        params = {n: tensors[st + n].double().clone().requires_grad_(True) for n in names}
        model = Olmo2(meta["config"], params)
        opt = make_adamw(meta, params, names)
        for n in names:
            opt.state[params[n]] = {"step": torch.tensor(float(k)),
                                    "exp_avg": tensors[st + "adamw.m." + n].double().clone(),
                                    "exp_avg_sq": tensors[st + "adamw.v." + n].double().clone()}
        loss, norm, lr = torch_step(meta, tensors, model, params, opt, k)
        if abs(lr - want["lr"]) > 1e-7 * lr:
            failures.append(f"step {k}: schedule lr {want['lr']} vs {lr}")
        for what, mine, ref in (("loss", want["loss"], loss), ("grad_norm", want["grad_norm"], norm)):
            e = abs(mine - ref) / abs(ref)
            worst[what] = max(worst[what], e)
            if e > TOL_GRAD:
                failures.append(f"step {k} {what}: engine {mine} torch {ref} (relative {e:.2e})")
        bc1, bc2 = 1 - h["beta1"] ** (k + 1), 1 - h["beta2"] ** (k + 1)
        for n in names:
            w0, w1 = tensors[st + n].double(), tensors[nx + n].double()
            m1, v1 = tensors[nx + "adamw.m." + n].double(), tensors[nx + "adamw.v." + n].double()
            decay = 1 - want["lr"] * (h["weight_decay"] if wd[n] else 0.0)
            rule = (w0 * decay - want["lr"] / bc1 * m1 / (v1.sqrt() / math.sqrt(bc2) + h["eps"])).float().double()
            errs = {"m": rel(m1, opt.state[params[n]]["exp_avg"]),
                    "v": rel(v1, opt.state[params[n]]["exp_avg_sq"]),
                    "update rule": rel(w1 - w0, rule - w0)}
            for what, e in errs.items():
                worst[what] = max(worst[what], e)
                if e > TOL_GRAD:
                    failures.append(f"step {k} {what} of {n}: relative error {e:.2e}")
            worst["update vs torch"] = max(worst["update vs torch"], rel(w1 - w0, params[n].detach() - w0))
    clipped = sum(s["grad_norm"] > h["grad_clip"] for s in meta["steps"])
    print(f"  {len(meta['steps'])} AdamW steps from the engine's state ({clipped} clipped), worst relative errors:\n    "
          + ", ".join(f"{k} {v:.2e}" for k, v in worst.items()))


def run_free(meta, tensors, names, dtype):
    params = {n: tensors["init." + n].to(dtype).clone().requires_grad_(True) for n in names}
    model = Olmo2(meta["config"], params)
    opt = make_adamw(meta, params, names)
    stats = [torch_step(meta, tensors, model, params, opt, k)[:2] for k in range(len(meta["steps"]))]
    return stats, {n: params[n].detach().double() for n in names}


def check_trajectory(meta, tensors, names, failures):
    """10 free-running steps from the same initial weights. AdamW divides by sqrt(v), so rounding-sized
    gradient differences grow along a trajectory, differently for any two FP32 implementations. The
    engine (FP32) must stay about as close to the FP64 reference as PyTorch's own FP32 run: its worst
    error over all parameter updates and per-step losses / gradient norms is at most TRAJ_FACTOR times
    torch FP32's worst, or TRAJ_FLOOR. This catches a wrong schedule, decay group or accumulation
    (errors of order 1), not rounding; checks 1 and 2 are the precise ones."""
    s64, p64 = run_free(meta, tensors, names, torch.float64)
    s32, p32 = run_free(meta, tensors, names, torch.float32)
    worst_engine, worst_f32, where = 0.0, 0.0, ""
    for n in names:
        w0 = tensors["init." + n].double()
        e_engine = rel(tensors["final." + n].double() - w0, p64[n] - w0)
        worst_f32 = max(worst_f32, rel(p32[n] - w0, p64[n] - w0))
        if e_engine > worst_engine:
            worst_engine, where = e_engine, f"update of {n}"
    for k, want in enumerate(meta["steps"]):
        for i, what in enumerate(("loss", "grad_norm")):
            e_engine = abs(want[what] - s64[k][i]) / abs(s64[k][i])
            worst_f32 = max(worst_f32, abs(s32[k][i] - s64[k][i]) / abs(s64[k][i]))
            if e_engine > worst_engine:
                worst_engine, where = e_engine, f"step {k} {what}"
    bound = max(TRAJ_FACTOR * worst_f32, TRAJ_FLOOR)
    print(f"  {len(meta['steps'])} free-running steps: engine vs FP64 worst relative error {worst_engine:.2e} "
          f"({where}); torch FP32 vs FP64 {worst_f32:.2e}; bound {bound:.2e}")
    if worst_engine > bound:
        failures.append(f"free-running trajectory: {where} relative error {worst_engine:.2e} > {bound:.2e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--keep", help="write the dump here and keep it")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    exe = os.path.join(args.build_dir, "engine_dump")
    if not os.path.exists(exe):
        print(f"check_torch_cpu: {exe} not found (build the engine_dump target)", file=sys.stderr)
        return 1
    torch.set_num_threads(1)  # the model is tiny: more threads only contend on a shared machine
    with tempfile.TemporaryDirectory() as tmp:
        out = args.keep or tmp
        r = subprocess.run([exe, "--out", out, "--seed", str(args.seed), "--steps", "10"], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"check_torch_cpu: engine_dump failed:\n{r.stdout}{r.stderr}", file=sys.stderr)
            return 1
        with open(os.path.join(out, "dump.json")) as f:
            meta = json.load(f)
        tensors = read_safetensors(os.path.join(out, "dump.safetensors"))
    names = [p["name"] for p in meta["parameters"]]
    failures = []
    print(f"check_torch_cpu: torch {torch.__version__}, model tiny ({len(names)} tensors), seed {args.seed}")
    check_flags(meta, names, failures)
    check_gradients(meta, tensors, names, failures)
    check_steps(meta, tensors, names, failures)
    check_trajectory(meta, tensors, names, failures)
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("check_torch_cpu: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
