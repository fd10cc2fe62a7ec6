#!/usr/bin/env bash
# Is a cell measured in a child of the warm-start server (inferbench.launch.warm) slower than one run in
# its own process? Alternates the two for BERT-base fp16 b1 s128 as a CUDA graph (device-bound, 0.75 ms:
# the cell most sensitive to host work) on an otherwise idle lent GPU machine, with snakemake from the
# carried wheels (.devw) and the package from src/. Prints one line per run; vmstat's 1 s samples go to $OUT.
#   bash benchmarks/gpu_machine/warm_fork_check.sh [rounds, default 3]
set -uo pipefail
out=${OUT:-/tmp/inferbench-out}
mkdir -p "$out"
export PIP_NO_INDEX=1 PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
python -m pip install -q --find-links .devw --find-links .gpuwheels snakemake > "$out/pip.log" 2>&1 || tail -3 "$out/pip.log"
cell=results/cells/bert_base/torch_cudagraph-fp16/cuda/b1-s128-t0.json
echo "warm_start: false" > /tmp/no_warm_start.yaml  # the server here is this script's, started below
run() { snakemake --cores 8 --resources gpu=1 --configfile /tmp/no_warm_start.yaml --forcerun "$cell" -- "$cell" > "$out/$1.log" 2>&1; }
summary() {
  python - "$1" "$cell" <<'PY'
import json, sys
r = json.load(open(sys.argv[2]))
for p in r["repeats"]["per_repeat"]:
    print(f"{sys.argv[1]:7s} pid {p['pid']:6d} device p50 {p['p50_ms']:.4f} ms  e2e p50 {p['e2e_p50_ms']:.4f} ms  "
          f"host busy {p['host_busy_pct']:.1f}%  involuntary {p['involuntary_switches']}  cold start {p['cold_start_s']:.1f} s")
print(f"{sys.argv[1]:7s} cell: device p50 {r['latency_ms']['p50']:.4f}  process cpu {r['host_telemetry']['process_cpu_s']:.2f} s")
PY
}
vmstat 1 > "$out/vmstat.txt" &
vmstat_pid=$!
run build && summary own0
python -m inferbench warm-server --socket /tmp/warm.sock > "$out/server.log" 2>&1 &
server=$!
until [ -S /tmp/warm.sock ] && grep -q imported "$out/server.log"; do sleep 1; done
for i in $(seq "${1:-3}"); do
  INFERBENCH_WARM_SOCKET=/tmp/warm.sock run "warm$i" && summary "warm$i"
  run "own$i" && summary "own$i"
done
kill "$server" "$vmstat_pid"
