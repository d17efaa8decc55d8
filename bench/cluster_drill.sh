#!/usr/bin/env bash
# Cluster drill: a two-node Ray cluster on one host (one GPU per node), a campaign run with
# `fsr run softmax --address auto`, and a fault under it: in the first run the second node's
# raylet is killed (SIGKILL, a machine dropping out), in the second one GPU worker's actor process.
# Each kill comes once both GPUs have produced rows. bench/cluster_drill_check.py then checks the
# lineage and the terminal: every row exactly once, no CRASH/TIMEOUT caused by the kill, both
# GPUs used before it, work going on after it, one fsr line about the loss, no Ray output.
#
# usage: bash bench/cluster_drill.sh OUT_DIR [EVALS] [--fake] [--dry-run]
#   EVALS: evaluations per run (default 30, at least 3); the kill comes after EVALS/3 rows
#   --fake: a fake evaluator in every worker (bench/cluster_drill_fake.py), for a rehearsal
#           without GPUs; without it the host needs two GPUs
#   --dry-run: check the arguments and the host, say what would run, and stop
# Arguments and the host are checked before anything starts: a mistake is one line and exit 2
# (exit 3: fewer than two GPUs without --fake).
# Logs (six files): OUT_DIR/drill.txt (everything), OUT_DIR/{node,actor}.txt (each run's
# terminal), OUT_DIR/runs.tgz (the lineages, each with its cluster.log of Ray's output),
# OUT_DIR/ray-logs.tgz (Ray's session logs).
set -uo pipefail
usage="usage: bash bench/cluster_drill.sh OUT_DIR [EVALS] [--fake] [--dry-run]"
fail() { echo "cluster_drill: error: $1 ($usage)" >&2; exit "${2:-2}"; }
out="" n="" fake="" dry=""
for arg in "$@"; do
  case $arg in
    --fake) fake=--fake ;;
    --dry-run) dry=1 ;;
    -*) fail "unknown option $arg" ;;
    *) if [[ -z $out ]]; then out=$arg
       elif [[ -z $n ]]; then n=$arg
       else fail "one OUT_DIR and one EVALS at most, not also '$arg'"; fi ;;
  esac
done
[[ -n $out ]] || fail "OUT_DIR is missing"
n=${n:-30}
[[ $n =~ ^[0-9]+$ && $n -ge 3 ]] || fail "EVALS must be an integer of at least 3, not '$n'"
[[ -e $out && ! -d $out ]] && fail "OUT_DIR $out is not a directory"
command -v pgrep > /dev/null || fail "the drill needs pgrep (procps)"
if [[ -z $fake ]]; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
  [[ $gpus -ge 2 ]] || fail "the drill needs two GPUs, this host has ${gpus:-0}; --fake rehearses it without" 3
fi
out=$(realpath -m "$out")
cd "$(dirname "$0")/.." || fail "cannot enter the checkout"  # bench/ and `python3 -m fsr` from the root
if [[ -n $dry ]]; then
  echo "cluster drill: $n evaluations per run, ${fake:+fake evaluator, }logs in $out"
  exit 0
fi
port=${DRILL_PORT:-46379}
tmp=${DRILL_TMP:-/tmp/fsr-drill-$$}  # Ray's temp dir: every process of the drill's cluster names it
work=$tmp-runs
mkdir -p "$out" "$work"
cpus=${DRILL_CPUS:-$(( $(nproc) / 2 ))}
ray_cli=(python3 -m ray.scripts.scripts)
fsr=(python3 -m fsr)
[[ $fake == --fake ]] && fsr=(python3 bench/cluster_drill_fake.py)
export RAY_AUTH_MODE=disabled PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
log() { echo "[drill $(date -u +%H:%M:%S)] $*" | tee -a "$out/drill.txt"; }

start_cluster() {
  log "starting the head (GPU 0) and a second node (GPU 1) on 127.0.0.1:$port"
  CUDA_VISIBLE_DEVICES=0 timeout 90 "${ray_cli[@]}" start --head --port="$port" --node-ip-address=127.0.0.1 \
    --num-gpus=1 --num-cpus="$cpus" --object-store-memory=2000000000 --include-dashboard=false --temp-dir="$tmp" \
    --disable-usage-stats >> "$out/drill.txt" 2>&1 || return 1
  CUDA_VISIBLE_DEVICES=1 timeout 90 "${ray_cli[@]}" start --address="127.0.0.1:$port" --node-ip-address=127.0.0.1 \
    --num-gpus=1 --num-cpus="$cpus" --object-store-memory=2000000000 --node-manager-port=46380 --object-manager-port=46381 \
    --dashboard-agent-listen-port=46382 --temp-dir="$tmp" >> "$out/drill.txt" 2>&1 || return 1
  timeout 60 python3 -c "
import time, ray
ray.init(address='127.0.0.1:$port', log_to_driver=False)
for _ in range(100):
    if ray.cluster_resources().get('GPU', 0) >= 2: break
    time.sleep(0.3)
print('cluster GPUs:', ray.cluster_resources().get('GPU', 0))" >> "$out/drill.txt" 2>&1
}

stop_cluster() {  # only the drill's own processes: those naming its temp dir, by id
  for pid in $(pgrep -f -- "$tmp"); do kill -9 "$pid" 2>/dev/null; done
  sleep 2
}

kill_node() {  # the second node's raylet: the one listening on the drill's node-manager port
  local pid; pid=$(pgrep -f -- "raylet.*--node_manager_port=46380" | head -1)
  log "killing the second node's raylet (pid ${pid:-none})"
  [[ -n $pid ]] && kill -9 "$pid"
}

kill_actor() {  # one GPU worker's actor process
  local pid; pid=$(pgrep -f -- "^ray::GpuWorker" | tail -1)
  log "killing a GPU worker's actor process (pid ${pid:-none})"
  [[ -n $pid ]] && kill -9 "$pid"
}

drill() {  # $1: node | actor
  local kind=$1 runs="$work/$1" rc=0 run killed_at
  mkdir -p "$runs"
  start_cluster || { log "FAIL  $kind: the cluster did not start"; stop_cluster; return 1; }
  log "fsr run softmax --address auto --max-evaluations $n --plain (then kill: $kind)"
  RAY_ADDRESS=127.0.0.1:$port timeout 170 "${fsr[@]}" run softmax --address auto --max-evaluations "$n" --tune-trials 4 --seed 0 \
    --plain --runs-dir "$runs" > "$out/$kind.txt" 2>&1 &
  local fsr_pid=$!
  if run=$(python3 bench/cluster_drill_check.py wait "$runs" --rows $(( n / 3 )) --timeout 120); then
    killed_at=$(date +%s.%N)
    "kill_$kind"
  else
    killed_at=$(date +%s.%N)
    log "the campaign never had rows from both GPUs; no kill"
  fi
  wait "$fsr_pid"; rc=$?
  run=${run:-$(ls -d "$runs"/*/ 2>/dev/null | head -1)}
  log "fsr exited $rc; terminal output:"; tee -a "$out/drill.txt" < "$out/$kind.txt" | tail -n 8
  stop_cluster
  [[ -n $run ]] || { log "FAIL  $kind: no run directory"; return 1; }
  python3 bench/cluster_drill_check.py check "$run" --log "$out/$kind.txt" --killed-at "$killed_at" \
    --evals "$n" --rc "$rc" | tee -a "$out/drill.txt"
}

status=0
drill node || status=1
drill actor || status=1
tar -czf "$out/runs.tgz" -C "$work" . 2>/dev/null
tar -czf "$out/ray-logs.tgz" -C "$tmp" --exclude='*.sock' --exclude='sockets' . 2>/dev/null
[[ $(stat -c %s "$out/ray-logs.tgz") -lt 15000000 ]] || rm -f "$out/ray-logs.tgz"  # what comes back is capped
rm -rf "$tmp" "$work"
log "$([[ $status == 0 ]] && echo PASS || echo FAIL): cluster drill ($n evaluations per run)"
exit $status
