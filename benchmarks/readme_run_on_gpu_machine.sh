#!/usr/bin/env bash
# The README's first command on the lent GPU machine, as a new user runs it: `python -m pip install -e .`
# (benchmarks/install_on_gpu_machine.sh: offline, from carried wheels) then
# `snakemake --cores 8 --resources gpu=1`, timed. Results go to $OUT.
set -uo pipefail
out=${OUT:-/tmp/inferbench-out}
limit=${1:-540}
source benchmarks/install_on_gpu_machine.sh

start=$(date +%s)
timeout -k 15 "$limit" snakemake --cores 8 --resources gpu=1 > "$out/snakemake.log" 2>&1
echo "workflow rc=$? wall_s=$(( $(date +%s) - start ))" | tee -a "$out/timing.txt"
start=$(date +%s%N)
snakemake --cores 8 --resources gpu=1 -n > "$out/rerun.log" 2>&1
echo "dry re-run rc=$? wall_ms=$(( ($(date +%s%N) - start) / 1000000 ))" | tee -a "$out/timing.txt"
bash benchmarks/collect_gpu_run.sh
