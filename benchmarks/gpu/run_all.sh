#!/usr/bin/env bash
# Run every benchmarks/gpu/ script in order on this machine (one process per visible GPU, NCCL), at most 8 minutes.
#
#   benchmarks/gpu/run_all.sh                          # results under $OUT, else benchmarks/results/gpu/
#   benchmarks/gpu/run_all.sh --backend gloo           # CPU dry run of all of them (tiny sizes, 2 processes)
#
# Extra arguments go to every script (the options they share: --backend, --device, --nprocs, --runs).
# Each script runs under its own time limit; one failing does not stop the others. Per-script logs, the
# GPU topology (nvidia-smi topo -m) and summary.txt (exit status and seconds per script) go to the same place.
set -u
cd "$(dirname "$0")/../.."
if [ -n "${OUT:-}" ]; then DIR="$OUT"; else DIR=benchmarks/results/gpu; fi
case " $* " in *" --backend gloo "*) [ -z "${OUT:-}" ] && DIR=benchmarks/results/gpu/cpu-dryrun ;; esac
mkdir -p "$DIR"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
command -v nvidia-smi >/dev/null && { nvidia-smi; nvidia-smi topo -m; } > "$DIR/nvidia-smi.txt" 2>&1
: > "$DIR/summary.txt"
run() {  # name, limit seconds, script args...
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS
    # the script's own --timeout (15 s less) ends its processes cleanly; timeout(1) is the backstop
    timeout --kill-after=10 "$limit" python "benchmarks/gpu/$name.py" --out-dir "$DIR" --timeout $((limit - 15)) "$@" \
        > "$DIR/$name.log" 2>&1
    local rc=$?
    echo "$name rc=$rc seconds=$((SECONDS - t0))" | tee -a "$DIR/summary.txt"
}
run correctness 80 "$@"
run algbw 140 "$@"
run swap 60 "$@"
run telemetry 90 "$@"
run closed_loop 110 "$@"
echo "results in $DIR" | tee -a "$DIR/summary.txt"
