#!/usr/bin/env bash
# Two small campaigns to read with `fsr report` (the README's report screenshot): three tasks with
# the default islands, then the same with one island per task; both run directories are packed
# into OUT_DIR as runs-<label>.tar.gz with each run's log.
#
# usage: bash bench/report_runs.sh OUT_DIR [EVALS_PER_TASK] [MAX_WALL_S]
#   then, on any machine: tar -xzf OUT_DIR/runs-islands4.tar.gz ... ;
#   fsr report RUN_DIR [RUN_DIR]; python bench/report_screenshot.py PAGE.html docs/report.png
set -uo pipefail
out=${1:?out dir}; n=${2:-16}; wall=${3:-100}
mkdir -p "$out/work"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for variant in "islands4:" "islands1:--islands 1"; do
  label=${variant%%:*}; flags=${variant#*:}
  python3 -m fsr run softmax layernorm sgemm --max-evaluations "$n" --max-wall "$wall" --seed 0 --plain \
    $flags --runs-dir "$out/work/$label" > "$out/log-$label.txt" 2>&1
  echo "$label: exit $?"; tail -6 "$out/log-$label.txt"
  tar -czf "$out/runs-$label.tar.gz" -C "$out/work/$label" .
done
rm -rf "$out/work"
