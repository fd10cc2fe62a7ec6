#!/usr/bin/env bash
# The README's first command on the lent GPU machine, as a new user runs it: `python -m pip install -e .`
# (benchmarks/install_on_gpu_machine.sh: offline, from carried wheels) then
# `snakemake --cores 8 --resources gpu=1`, timed. Results go to $OUT (at most 8 files).
#   bash benchmarks/readme_run_on_gpu_machine.sh [limit_s, default 540]
# PRESET=<name> runs a study preset instead (`--configfile config/studies/<name>.yaml`); CONTINUE=1 goes on
# with a run cut off by the previous call's limit on the same machine (the install kept in /tmp).
# STUDIES=a,b selects studies by name (`--config run=[a,b]`): a preset too long for one lease, split
# study by study so that each study's cells share a lease.
set -uo pipefail
out=${OUT:-/tmp/inferbench-out}
limit=${1:-540}
preset=()
[ -n "${PRESET:-}" ] && preset=(--configfile "config/studies/$PRESET.yaml")
[ -n "${STUDIES:-}" ] && preset+=(--config "run=[$STUDIES]")
if [ "${CONTINUE:-0}" = 1 ]; then
  mkdir -p "$out"
  export PIP_NO_INDEX=1 PYTHONUNBUFFERED=1
else
  source benchmarks/install_on_gpu_machine.sh
fi

start=$(date +%s)
timeout -k 15 "$limit" snakemake --cores 8 --resources gpu=1 "${preset[@]}" > "$out/snakemake.log" 2>&1
echo "workflow rc=$? wall_s=$(( $(date +%s) - start ))" | tee -a "$out/timing.txt"
start=$(date +%s%N)
snakemake --cores 8 --resources gpu=1 "${preset[@]}" -n > "$out/rerun.log" 2>&1
echo "dry re-run rc=$? wall_ms=$(( ($(date +%s%N) - start) / 1000000 ))" | tee -a "$out/timing.txt"
bash benchmarks/collect_gpu_run.sh
