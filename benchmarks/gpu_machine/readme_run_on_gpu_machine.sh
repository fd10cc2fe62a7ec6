#!/usr/bin/env bash
# The README's first command on the lent GPU machine, as a new user runs it: `python -m pip install -e .`
# (benchmarks/gpu_machine/install_on_gpu_machine.sh: offline, from carried wheels) then
# `snakemake --cores 8 --resources gpu=1`, timed. Results go to $OUT (at most 8 files).
#   bash benchmarks/gpu_machine/readme_run_on_gpu_machine.sh [limit_s, default 540]
# PRESET=<name> runs a study preset instead (`--configfile config/studies/<name>.yaml`); CONTINUE=1 goes on
# with a run cut off by the previous call's limit on the same machine (the install kept in /tmp).
# STUDIES=a,b selects studies by name (`--config run=[a,b]`): a preset too long for one lease, split
# study by study so that each study's cells share a lease. WORKLOADS=a,b (with one study in STUDIES)
# narrows that study to those workloads: a study too long for one lease, split by model.
# BACKGROUND=1 runs the workflow detached from the call (setsid): the call waits up to limit_s and returns,
# the workflow goes on, and the next call (CONTINUE=1 BACKGROUND=1) waits for that same run instead of
# starting another, so that a call's time limit kills no cell in flight. The archive is made when the
# run has finished. A detached run works in a copy of the checkout (/tmp/inferbench-run/tree, installed
# from there): each call copies the checkout over the repository root, which would change the code of
# the cells still running. A call with other settings (the next study) starts another run once that one
# has finished.
set -uo pipefail
out=${OUT:-/tmp/inferbench-out}
limit=${1:-540}
call_started=$(date +%s)   # the detached run's wait ends limit s after this, the install included
configfiles=()
[ -n "${PRESET:-}" ] && configfiles+=("config/studies/$PRESET.yaml")
# NARROW='engines: [vllm], seq_lens: [128]' with one study in STUDIES: any of its keys, as a config file of its
# own (a --config value reads numbers as strings)
if [ -n "${NARROW:-}" ]; then
  narrow=/tmp/inferbench-narrow-${STUDIES:?NARROW needs one study in STUDIES}.yaml
  printf 'studies:\n  %s: {%s}\n' "$STUDIES" "$NARROW" > "$narrow"
  configfiles+=("$narrow")
fi
# MEASURE='repeats: 2, max_repeats: 8': measure settings over the preset's, as a config file of their own
if [ -n "${MEASURE:-}" ]; then
  printf 'measure: {%s}\n' "$MEASURE" > /tmp/inferbench-measure.yaml
  configfiles+=(/tmp/inferbench-measure.yaml)
fi
preset=()
[ ${#configfiles[@]} -gt 0 ] && preset=(--configfile "${configfiles[@]}")   # one flag: a second would replace the first
overrides=()
[ -n "${STUDIES:-}" ] && overrides+=("run=[$STUDIES]")
# WORKLOADS=a,b with one study in STUDIES: only those workloads of it (merged into the study by Snakemake)
[ -n "${WORKLOADS:-}" ] && overrides+=("studies={${STUDIES:?WORKLOADS needs one study in STUDIES}: {workloads: [$WORKLOADS]}}")
[ ${#overrides[@]} -gt 0 ] && preset+=(--config "${overrides[@]}")
run=/tmp/inferbench-run   # a detached run's arguments, log, start time, exit status and tree, kept between calls
if [ "${BACKGROUND:-0}" = 1 ]; then
  mkdir -p /tmp/carry /tmp/carry_vllm && cp .carry/*/* /tmp/carry/ 2>/dev/null   # this call's piece of the wheels
  cp .carry_vllm/*/* /tmp/carry_vllm/ 2>/dev/null
  if [ ! -d "$run/tree" ]; then
    mkdir -p "$run/tree" && tar -c --exclude=./.carry --exclude=./.carry_vllm . | tar -x -C "$run/tree"
  fi
  cd "$run/tree" || exit 1
fi
if [ "${CONTINUE:-0}" = 1 ]; then
  mkdir -p "$out"
  export PIP_NO_INDEX=1 PYTHONUNBUFFERED=1
  [ -f /tmp/vllm-env.sh ] && source /tmp/vllm-env.sh   # vLLM, where the first call installed it
else
  source benchmarks/gpu_machine/install_on_gpu_machine.sh || exit 1
fi

if [ "${BACKGROUND:-0}" = 1 ]; then
  this_run="${preset[*]}"
  if [ -f "$run/start" ] && [ "$(cat "$run/args" 2>/dev/null)" != "$this_run" ]; then
    if [ ! -f "$run/rc" ]; then
      echo "another background run is still going ($(cat "$run/args")): wait for it with its own settings" >&2
      exit 1
    fi
    # the run before has finished: this call starts another (e.g. the next study) in the same tree
    rm -f "$run/start" "$run/rc" "$run/args" "$run/snakemake.log"
  fi
  source benchmarks/gpu_machine/wait_for_detached_run.sh
  if [ ! -f "$run/start" ]; then
    start_detached_run --cores 8 --resources gpu=1 "${preset[@]}"
    printf '%s' "$this_run" > "$run/args"
  fi
  wait_for_detached_run "workflow"
else
  start=$(date +%s)
  timeout -k 15 "$limit" snakemake --cores 8 --resources gpu=1 "${preset[@]}" > "$out/snakemake.log" 2>&1
  echo "workflow rc=$? wall_s=$(( $(date +%s) - start ))" | tee -a "$out/timing.txt"
fi
start=$(date +%s%N)
snakemake --cores 8 --resources gpu=1 "${preset[@]}" -n > "$out/rerun.log" 2>&1
echo "dry re-run rc=$? wall_ms=$(( ($(date +%s%N) - start) / 1000000 ))" | tee -a "$out/timing.txt"
bash benchmarks/gpu_machine/collect_gpu_run.sh
