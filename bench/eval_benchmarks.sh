#!/usr/bin/env bash
# The evaluator's benchmark on the local GPU: `fsr eval` on each task's baseline and on the
# hand-optimised softmax (each evaluated twice in one evaluator), as a markdown table; then the
# wall time per candidate of a warm evaluator. Usage: bash bench/eval_benchmarks.sh [out_dir]
set -euo pipefail
out=${1:-/tmp/fsr-bench}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for spec in "softmax tasks/softmax/baseline.cu" "softmax examples/softmax_fast.cu" \
            "layernorm tasks/layernorm/baseline.cu" "sgemm tasks/sgemm/baseline.cu"; do
  set -- $spec
  printf '%s %s|' "$1" "$2"
  python3 -m fsr eval "$1" "$2" --json --repeat 2 | paste -sd '\t'
done | tee "$out/evals.jsonl" | python3 bench/eval_table.py | tee "$out/evals.md"
python3 bench/eval_wall.py softmax 10 | tee "$out/wall.txt"
