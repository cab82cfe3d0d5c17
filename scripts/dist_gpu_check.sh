#!/usr/bin/env bash
# Data-parallel checks on a GPU machine (docs/DIST.md), about 2 minutes on 2 H200s after the build:
#   1. test_cuda DistCuda.*: one NCCL rank (overlap on and off) trains bit-identically to the plain CUDA
#      engine; the overlapped reductions wait for their bucket and the optimizer waits for them.
#   2. `fp4train launch --gpus 1 -- fp4train train` (NCCL, ZeRO-1, overlap) vs plain `fp4train train`:
#      the same losses, bit for bit.
#   3. With GPUS >= 2, the same global batch on GPUS ranks:
#      - overlap on vs dist.overlap=false: the same losses, bit for bit (same reductions, same order);
#      - a GPUS-rank run stopped at half time and resumed on one GPU: its first half is the GPUS-rank
#        run's bit for bit, the whole curve within BF16 noise of it;
#      - vs one GPU at SEQ: loss curves within BF16 noise (each rank's GEMMs see fewer rows).
# The bit-for-bit runs use EXACT_SEQ tokens a row (64): the attention backward adds dQ over key tiles of
# 128 keys with float atomics, so a longer row is not bit-reproducible even on one GPU without data
# parallelism, and an exact comparison there would test the attention kernel, not the data parallelism.
# usage: scripts/dist_gpu_check.sh [GPUS] (env: B=build dir, DATA=prepared shards, STEPS, MODEL, SEQ,
# EXACT_SEQ, OUT;
# DEVICE=cpu runs the same flow on the CPU engine over TCP, to check the script without a GPU)
# Without DATA: data/shards-gpt2 when prepared, else a small GPT-2 set is prepared from data/corpus
# (unpacked from .carry/corpus.tar.xz when needed) into data/shards-gpt2-small.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
B=${B:-build-gpu}
GPUS=${1:-1}
STEPS=${STEPS:-40}
MODEL=${MODEL:-olmo2-30m}
SEQ=${SEQ:-512}
EXACT_SEQ=${EXACT_SEQ:-64}
DEVICE=${DEVICE:-cuda}
out=${OUT:-$root/gpu-out}/dist
rm -rf "$out" && mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
status=0

source "$root/scripts/lib/pick_data.sh"
DATA=$(pick_data) || { echo "no data"; exit 1; }

# The schedule is pinned to STEPS so that a run stopped at half time resumes the same schedule.
common=(--config configs/runs/olmo2-70m.toml --set "model.preset=$MODEL" --recipe bf16 --set "train.device=$DEVICE"
  --set "data.train_dir=$DATA" --set data.tokenizer= --set data.batch=16
  --set "train.steps=$STEPS" --set "optim.total_steps=$STEPS" --set optim.warmup=5 --set train.log_every=1
  --set train.eval_every=0 --set train.eval_batches=4 --set "train.ckpt_every=$((STEPS / 2))")

# compare RUN_A RUN_B REL [EXACT_STEPS]: the largest relative loss difference over the steps both
# runs have; fails above REL, or when the first EXACT_STEPS losses are not bit-identical.
compare() {
  /usr/bin/env python3 - "$@" <<'PY'
import json, sys
def losses(run):
    return [json.loads(l) for l in open(run + "/metrics.jsonl") if '"train"' in l]
a, b, rel = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
exact = int(sys.argv[4]) if len(sys.argv) > 4 else 0
assert len(a) == len(b) and a, f"{len(a)} vs {len(b)} train records"
worst = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b))
same = all(x["loss"] == y["loss"] for x, y in zip(a[:exact], b[:exact]))
tps = sorted(r["tokens_per_s"] for r in b[len(b) // 2:])
print(f"{sys.argv[2].split('/')[-1]} vs {sys.argv[1].split('/')[-1]}: {len(a)} steps, max relative loss "
      f"difference {worst:.3g} (limit {rel:g})" + (f", first {exact} steps bit-identical: {same}" if exact else "")
      + f", final loss {a[-1]['loss']:.5f} vs {b[-1]['loss']:.5f}, tokens/s {tps[len(tps) // 2]:.0f}")
sys.exit(0 if worst <= rel and same else 1)
PY
}

# train NAME NPROC SEQ EXTRA...: NPROC 0 is a plain process, otherwise `fp4train launch --gpus NPROC`.
train() {
  local name=$1 n=$2 seq=$3
  shift 3
  local cmd=("$B/fp4train" train "${common[@]}" --set "data.seq=$seq" "$@" --out "$out/$name")
  [ "$n" -eq 0 ] || cmd=("$B/fp4train" launch --gpus "$n" -- "${cmd[@]}")
  timeout 300 "${cmd[@]}" >>"$out/$name.log" 2>&1 || { echo "$name failed:"; tail -5 "$out/$name.log"; exit 1; }
}

t0=$SECONDS
timeout 300 "$B/test_cuda" --gtest_filter='DistCuda.*' >"$out/test_cuda.log" 2>&1
rc=$?
[ $rc -eq 0 ] || status=1
echo "== test_cuda DistCuda rc=$rc $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/test_cuda.log" | tr '\n' ' ')"

echo "== data $DATA, $MODEL on $DEVICE, $STEPS steps of 16 rows; bit-for-bit at $EXACT_SEQ tokens a row, curves at $SEQ"
train plain 0 "$EXACT_SEQ"
train launch1 1 "$EXACT_SEQ"
grep -E "NCCL|data parallel" "$out/launch1.log" | head -3
compare "$out/plain" "$out/launch1" 0 || status=1

if [ "$GPUS" -ge 2 ]; then
  train "launch$GPUS" "$GPUS" "$EXACT_SEQ"
  train "launch$GPUS-nooverlap" "$GPUS" "$EXACT_SEQ" --set dist.overlap=false
  compare "$out/launch$GPUS" "$out/launch$GPUS-nooverlap" 0 || status=1
  # N -> 1: stop a GPUS-rank run at half time, resume it on one GPU.
  half=$((STEPS / 2))
  train resumed "$GPUS" "$EXACT_SEQ" --set "train.steps=$half"
  train resumed 0 "$EXACT_SEQ"
  grep -E "^resumed from" "$out/resumed.log" | head -1
  compare "$out/launch$GPUS" "$out/resumed" 2e-3 "$half" || status=1
  # GPUS ranks vs one GPU at the longer rows: the same curve within BF16 and attention-atomics noise.
  train "plain-seq$SEQ" 0 "$SEQ"
  train "launch$GPUS-seq$SEQ" "$GPUS" "$SEQ"
  compare "$out/plain-seq$SEQ" "$out/launch$GPUS-seq$SEQ" 2e-3 || status=1
fi
echo "== dist_gpu_check status=$status in $((SECONDS - t0))s"
exit $status
