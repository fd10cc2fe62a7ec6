#!/usr/bin/env bash
# The workflow on the lent GPU machine, timed, then re-run as a dry run; results go to $OUT.
# Installs as the README says (benchmarks/gpu_machine/install_on_gpu_machine.sh: the wheel bundle's last piece
# carried with the command, the others copied to /tmp/carry by the calls before; prepare_gpu_carry.sh).
#
#   bash benchmarks/gpu_machine/run_on_gpu_machine.sh [seconds allowed, default 540] [snakemake arguments...]
#   REMEASURE=1 bash benchmarks/gpu_machine/run_on_gpu_machine.sh ...   # a second run: every cell again, in fresh
#                                                           # processes, on the data and models already made
#
# A run cut off by the time limit continues where it stopped when called again on the same machine
# (results/ stays while the machine is up): add the wall times of the calls.
set -uo pipefail
out=${OUT:-/tmp/inferbench-out}
mkdir -p "$out"
limit=${1:-540}
shift || true
if [ -f /tmp/inferbench-installed ]; then   # a later call on the same machine: installed already
  export PIP_NO_INDEX=1 PYTHONUNBUFFERED=1
else
  source benchmarks/gpu_machine/install_on_gpu_machine.sh || exit 1
  touch /tmp/inferbench-installed
fi
# a call cut off by its time limit leaves snakemake's directory lock behind; nothing else runs here
snakemake --unlock "$@" > /dev/null 2>&1
if [ "${REMEASURE:-0}" = 1 ]; then
  rm -rf results/cells results/summary.csv results/summary.parquet results/plots results/report.md
fi
start=$(date +%s)
timeout -k 15 "$limit" snakemake --cores 16 --resources gpu=1 --rerun-incomplete "$@" > "$out/snakemake.log" 2>&1
echo "workflow rc=$? wall_s=$(( $(date +%s) - start ))" | tee "$out/timing.txt"
start=$(date +%s%N)
snakemake --cores 16 --resources gpu=1 -n "$@" > "$out/rerun.log" 2>&1
echo "dry re-run rc=$? wall_ms=$(( ($(date +%s%N) - start) / 1000000 ))" | tee -a "$out/timing.txt"
tail -3 "$out/rerun.log"

bash benchmarks/gpu_machine/collect_gpu_run.sh
if grep -q "repeats" results/summary.csv 2>/dev/null; then
  python3 benchmarks/tools/compare_runs.py results/summary.csv | tee "$out/repeats.txt" | tail -30
fi
