#!/usr/bin/env bash
# Scaling of a campaign from one GPU to two (offline proposer, same budget and seed): softmax
# alone and softmax + sgemm together, each on GPU 0 only and on both GPUs; nvidia-smi samples
# utilisation every second during each run; then the same kernel is timed on each GPU.
# Usage: bash bench/scaling.sh OUT_DIR [evaluations per task]
set -uo pipefail
out=${1:?out dir}; n=${2:-40}
mkdir -p "$out/runs"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
for spec in "softmax" "softmax sgemm"; do
  for gpus in 0 0,1; do
    label="$(echo $spec | tr ' ' '+')-gpus$gpus"
    nvidia-smi --query-gpu=timestamp,index,utilization.gpu --format=csv,noheader -l 1 > "$out/smi-$label.csv" &
    smi=$!
    CUDA_VISIBLE_DEVICES=$gpus timeout 400 python3 -m fsr run $spec --max-evaluations "$n" --tune-trials 8 \
      --seed 0 --plain --runs-dir "$out/runs/$label" 2>&1 | tail -4
    kill $smi
    run=$(ls -d "$out/runs/$label"/*/)
    python3 bench/run_report.py "$run" | tail -n +4
    python3 - "$run" "$out/smi-$label.csv" <<'PY'
import collections, sys
from fsr import lineage
rows = lineage.read(sys.argv[1]).to_pylist()
span = (max(r["finished_at"] for r in rows) - min(r["started_at"] or r["finished_at"] for r in rows)).total_seconds()
workers = collections.Counter(r["worker"] for r in rows)
util = collections.defaultdict(list)
for line in open(sys.argv[2]):
    parts = [p.strip() for p in line.split(",")]
    if len(parts) == 3 and parts[2].endswith("%"):
        util[parts[1]].append(int(parts[2].rstrip(" %")))
busy = {g: f"{sum(1 for u in v if u > 0) / len(v):.0%} of samples busy, mean {sum(v) / len(v):.0f}%" for g, v in util.items()}
print(f"  {len(rows)} evaluations in {span:.0f} s of lineage span: {60 * len(rows) / span:.1f} per minute; "
      f"per worker {dict(workers)}; nvidia-smi {busy}")
PY
  done
done
for gpu in 0 1; do
  CUDA_VISIBLE_DEVICES=$gpu python3 -m fsr eval softmax examples/softmax_fast.cu --json --repeat 2 | tail -1 | \
    python3 -c "import json,sys; r=json.load(sys.stdin); print('GPU $gpu softmax_fast median', round(r['timing']['median_us'], 1), 'us')"
done
