#!/usr/bin/env bash
# Two small campaigns to read with `fsr report` (the README's report screenshot): three tasks with
# the default islands, then the same with one island per task; both run directories are packed
# into OUT_DIR as runs-<label>.tar.gz with each run's log.
#
# usage: bash bench/report_runs.sh OUT_DIR [EVALS_PER_TASK] [MAX_WALL_S]
#   then, on any machine with chromium: unpack each archive into a folder of its own, e.g.
#   mkdir runs-islands4 && tar -xzf OUT_DIR/runs-islands4.tar.gz -C runs-islands4, and
#   bash bench/report_screenshot.sh docs/report.png runs-islands4/*/
#   bash bench/report_screenshot.sh docs/report-compare.png runs-islands4/*/ runs-islands1/*/
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
