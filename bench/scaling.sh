#!/usr/bin/env bash
# Scaling of search campaigns over GPU counts (offline proposer, same budget and seed): each
# campaign is run once per GPU set, nvidia-smi samples utilisation every second during each run
# (OUT_DIR/smi-LABEL.csv), `fsr report --format md` says where the time went (OUT_DIR/report-LABEL.md:
# evaluations per GPU-minute per task, each worker's occupancy, seconds per stage); then one kernel
# is timed on every GPU of the largest set (timings of the same kernel must agree across GPUs).
#
# usage: bash bench/scaling.sh OUT_DIR EVALS_PER_TASK "GPU_SET ..." CAMPAIGN [CAMPAIGN ...]
#   GPU_SET: a CUDA_VISIBLE_DEVICES value
#   CAMPAIGN: task names joined by '+'
#   e.g. bash bench/scaling.sh out 40 "0 0,1" softmax softmax+sgemm
set -uo pipefail
out=${1:?out dir}; n=${2:?evaluations per task}; sets=(${3:?GPU sets}); shift 3
mkdir -p "$out/runs"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
for campaign in "$@"; do
  for gpus in "${sets[@]}"; do
    label="${campaign//+/_}-gpus${gpus//,/_}"  # file names of letters, digits, '-' and '_' only
    nvidia-smi --query-gpu=timestamp,index,utilization.gpu --format=csv,noheader -l 1 > "$out/smi-$label.csv" &
    smi=$!
    CUDA_VISIBLE_DEVICES=$gpus timeout 540 python3 -m fsr run ${campaign//+/ } --max-evaluations "$n" \
      --tune-trials 8 --seed 0 --plain --runs-dir "$out/runs/$label" > "$out/log-$label.txt" 2>&1
    kill $smi
    run=$(ls -d "$out/runs/$label"/*/ | head -1)
    python3 -m fsr report "$run" --format md > "$out/report-$label.md" 2>&1
  done
done
for campaign in "$@"; do for gpus in "${sets[@]}"; do
  label="${campaign//+/_}-gpus${gpus//,/_}"
  echo "## $campaign on GPUs $gpus"
  sed -n '/^| task/,/^$/p' "$out/report-$label.md"  # the summary: a row per task
  sed -n '/^### Workers/,/^###/p' "$out/report-$label.md" | grep "^|"
  grep -E "gpu busy|^  worker|evaluations in" "$out/log-$label.txt" | tail -4
done; done
[[ ${SAME_KERNEL:-1} == 1 ]] || exit 0  # SAME_KERNEL=0 skips the per-GPU timing of one kernel
for gpu in $(echo "${sets[-1]}" | tr , ' '); do
  CUDA_VISIBLE_DEVICES=$gpu python3 -m fsr eval softmax examples/softmax_fast.cu --json --repeat 2 | tail -1 | \
    python3 -c "import json,sys; r=json.load(sys.stdin); print('GPU $gpu softmax_fast median', round(r['timing']['median_us'], 1), 'us')"
done
