#!/usr/bin/env bash
# Sourced by the scripts that run the workflow detached on the GPU machine (readme_run_on_gpu_machine.sh,
# multi_gpu_on_gpu_machine.sh, peak_side_by_side.sh): start_detached_run starts it; wait_for_detached_run waits for the run in $run (start, snakemake.log, rc) until $limit seconds
# after $call_started (when the calling script began: the install counts, as the call's own limit
# does), copies its log to $out and writes one line to $out/timing.txt, labelled $1. Ends the calling
# script (exit 0) while the run goes on: the next call waits for the same run.
# start_detached_run ARGS...: `snakemake ARGS` detached from the call (setsid), its start time, log and exit
# status in $run, unless a run was started there already (a later call then only waits for it).
start_detached_run() {
  [ -f "$run/start" ] && return 0
  mkdir -p "$run" && date +%s > "$run/start"
  setsid nohup bash -c 'snakemake "$@" > "$0/snakemake.log" 2>&1; echo $? > "$0/rc"' "$run" "$@" \
    < /dev/null > /dev/null 2>&1 &
}

wait_for_detached_run() {
  local label=$1 deadline progress
  deadline=$(( ${call_started:-$(date +%s)} + limit ))
  while [ ! -f "$run/rc" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
  cp "$run/snakemake.log" "$out/snakemake.log"
  progress=$(grep -E "steps \(" "$run/snakemake.log" | tail -1)
  if [ ! -f "$run/rc" ]; then
    echo "$label still running after $(( $(date +%s) - $(cat "$run/start") )) s: $progress" | tee -a "$out/timing.txt"
    # the records made so far come back with every call: the machine goes back after 30 minutes held,
    # run finished or not (a serving preset's second lease lost its archive so)
    [ -d results/cells ] && (find results/cells -name '*.json' | tar czf "$out/records_so_far.tgz" -T -)
    exit 0
  fi
  echo "$label rc=$(cat "$run/rc") wall_s=$(( $(stat -c %Y "$run/rc") - $(cat "$run/start") )) $progress" \
    | tee -a "$out/timing.txt"
}
