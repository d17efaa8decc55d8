#!/usr/bin/env bash
# Evaluation throughput before and after a change, on one GPU, in one go: the profile of the
# GPU child on each task, then `fsr run` campaigns at default settings (bench/throughput.py).
#
# usage: bash bench/throughput.sh OUT_DIR EVALS_PER_TASK AFTER_DIR [BEFORE_DIR BEFORE_EVALS_PER_TASK]
#   AFTER_DIR, BEFORE_DIR: exported checkouts (fsr, cluster, tasks), "." for this one, e.g.
#   git archive 6665d92 fsr cluster tasks | tar -x -C .before
set -uo pipefail
out=${1:?out dir}; n=${2:?evaluations per task}; after=${3:?after dir}; before=${4:-}; before_n=${5:-12}
tasks=(softmax layernorm sgemm)
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for t in "${tasks[@]}"; do
  timeout 90 python3 bench/throughput_profile.py "$t" 6 > "$out/profile-$t.txt" 2>&1
  grep -E "candidates, child wall" "$out/profile-$t.txt"
done
timeout 300 python3 bench/throughput.py "$out" after "$n" "${tasks[@]}" --fsr-path "$after"
if [[ -n $before ]]; then
  timeout 300 python3 bench/throughput.py "$out" before "$before_n" "${tasks[@]}" --fsr-path "$before"
fi
