#!/usr/bin/env bash
# The README's picture of `fsr report`: the page for the given run directories (several are
# compared), opened in headless chromium and saved as a PNG of its top 1400x2400 pixels.
#
# usage (in fsr's environment, from any folder): bash bench/report_screenshot.sh OUT.png RUN_DIR [RUN_DIR ...]
#   e.g. (runs from bench/report_runs.sh)
#   bash bench/report_screenshot.sh docs/report.png runs-islands4/*/
#   bash bench/report_screenshot.sh docs/report-compare.png runs-islands4/*/ runs-islands1/*/
set -euo pipefail
png=${1:?OUT.png}; shift
page=$(mktemp --suffix=.html)
profile=$(mktemp -d)
trap 'rm -rf "$page" "$profile"' EXIT
PYTHONPATH="$(cd "$(dirname "$0")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}" python3 -m fsr report "$@" -o "$page" > /dev/null
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile" \
  --window-size=1400,2400 --virtual-time-budget=20000 --screenshot="$(realpath -m "$png")" "file://$page" 2>/dev/null
echo "$png"
