#!/usr/bin/env bash
# Data-parallel checks on a GPU machine (docs/DIST.md):
#   1. test_cuda DistCuda.*: one NCCL rank trains bit-identically to the plain CUDA engine.
#   2. `fp4train launch --gpus 1 -- fp4train train` (NCCL, ZeRO-1 path) vs plain `fp4train train`: the
#      same losses, bit for bit.
#   3. With GPUS >= 2: `launch --gpus GPUS` vs one GPU with the same global batch: loss curves within
#      BF16 noise (the ranks' GEMMs see fewer rows), and a 2-rank checkpoint resumed on 1 GPU.
# usage: scripts/dist_gpu_check.sh [GPUS] (env: B=build dir, DATA=prepared shards, STEPS, MODEL)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
B=${B:-build-gpu}
GPUS=${1:-1}
DATA=${DATA:-data/shards-gpt2}
STEPS=${STEPS:-40}
MODEL=${MODEL:-olmo2-30m}
out=${OUT:-$root/gpu-out}/dist
rm -rf "$out" && mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
status=0

common=(--config "configs/runs/$MODEL.toml" --recipe bf16 --set train.device=cuda --set "data.train_dir=$DATA"
  --set data.train_text= --set data.val_text= --set data.batch=16 --set data.seq=512 --set "train.steps=$STEPS"
  --set optim.warmup=5 --set train.log_every=1 --set train.eval_every=0 --set train.eval_batches=4
  --set "train.ckpt_every=$((STEPS / 2))")

# compare RUN_A RUN_B REL: prints the largest relative loss difference; fails above REL.
compare() {
  /usr/bin/env python3 - "$1" "$2" "$3" <<'PY'
import json, sys
def losses(run):
    return [json.loads(l) for l in open(run + "/metrics.jsonl") if '"train"' in l]
a, b, rel = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
assert len(a) == len(b) and a, f"{len(a)} vs {len(b)} train records"
worst = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b))
tps = [r["tokens_per_s"] for r in b[len(b) // 2:]]
print(f"{sys.argv[2]}: {len(a)} steps, max relative loss difference {worst:.3g} (limit {rel:g}), "
      f"final loss {a[-1]['loss']:.5f} vs {b[-1]['loss']:.5f}, tokens/s {sorted(tps)[len(tps) // 2]:.0f}")
sys.exit(0 if worst <= rel else 1)
PY
}

timeout 300 "$B/test_cuda" --gtest_filter='DistCuda.*' >"$out/test_cuda.log" 2>&1
echo "== test_cuda DistCuda rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/test_cuda.log" | tr '\n' ' ')"

timeout 400 "$B/fp4train" train "${common[@]}" --out "$out/plain" >"$out/plain.log" 2>&1 || { echo "plain run failed"; tail "$out/plain.log"; exit 1; }
timeout 400 "$B/fp4train" launch --gpus 1 -- "$B/fp4train" train "${common[@]}" --out "$out/launch1" >"$out/launch1.log" 2>&1 ||
  { echo "launch --gpus 1 failed"; tail "$out/launch1.log"; exit 1; }
grep -E "NCCL|data parallel" "$out/launch1.log" | head -4
compare "$out/plain" "$out/launch1" 0 || status=1

if [ "$GPUS" -ge 2 ]; then
  timeout 400 "$B/fp4train" launch --gpus "$GPUS" -- "$B/fp4train" train "${common[@]}" --out "$out/launch$GPUS" \
    >"$out/launch$GPUS.log" 2>&1 || { echo "launch --gpus $GPUS failed"; tail "$out/launch$GPUS.log"; exit 1; }
  compare "$out/plain" "$out/launch$GPUS" 2e-3 || status=1
  # N -> 1: stop the multi-GPU run at half time, resume on one GPU.
  half=$((STEPS / 2))
  timeout 400 "$B/fp4train" launch --gpus "$GPUS" -- "$B/fp4train" train "${common[@]}" --set "train.steps=$half" \
    --out "$out/resumed" >"$out/resumed-a.log" 2>&1 && timeout 400 "$B/fp4train" train "${common[@]}" --out "$out/resumed" \
    >"$out/resumed-b.log" 2>&1 || { echo "N->1 resume failed"; tail "$out/resumed-b.log"; exit 1; }
  compare "$out/plain" "$out/resumed" 2e-3 || status=1
fi
echo "== dist_gpu_check status=$status"
exit $status
