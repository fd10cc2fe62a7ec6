#!/usr/bin/env bash
# Issue 36 on a lent 2-GPU machine, one phase per call or several (each call may last 10 minutes;
# results/ stays on the machine between calls while it is up). Results of each phase go to $OUT.
#
#   bash benchmarks/gpu_machine/multi_gpu_on_gpu_machine.sh gpu2 [limit_s]  # install, then the GPU default from a clean
#                                                              # checkout with --cores 32 --resources gpu=2
#   bash benchmarks/gpu_machine/multi_gpu_on_gpu_machine.sh gpu1 [limit_s]  # the same from clean with gpu=1 (run 1 kept
#                                                              # in /tmp/run_gpu2)
#   bash benchmarks/gpu_machine/multi_gpu_on_gpu_machine.sh gpu2again [limit_s]  # gpu=2 once more, from clean, after
#                                                              # gpu1 or straight after gpu2 (an A/A pair;
#                                                              # a gpu1 after that replaces /tmp/run_gpu2)
#   bash benchmarks/gpu_machine/multi_gpu_on_gpu_machine.sh kill            # a GPU cell SIGKILLed mid-run (gpu_kill_test.py)
#
# The workflow runs detached from the call (setsid): a call waits up to limit_s for it and returns; the
# next call with the same phase waits for the same run (the GPU default with gpu=1 takes longer than one
# call since every measuring process compiles with caches of its own), so that no call's limit kills a
# cell in flight. Its wall time is from its start to its end, whatever the calls between.
# Each phase checks the records with benchmarks/tools/multi_gpu_check.py: the GPU each cell measured on,
# and that no two measuring windows overlapped against the rule.
set -uo pipefail
out=${OUT:-/tmp/inferbench-out}
phase=${1:?phase: gpu2, gpu1, gpu2again or kill}
# 540: a call that waited 585 s (589.8 s with the collection) found the machine gone at the next call
# (2026-11-26, lease 4), its run lost with it; leave the call room
limit=${2:-540}
call_started=$(date +%s)   # the detached run's wait ends limit s after this, the install included
mkdir -p "$out"
if [ "$phase" = gpu2 ] && [ ! -f /tmp/inferbench-multi-gpu2/start ]; then
  source benchmarks/gpu_machine/install_on_gpu_machine.sh || exit 1   # once: a later call waits for the same run
else
  export PYTHONUNBUFFERED=1
fi
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
echo "phase $phase on $gpus GPUs, $(nproc) CPUs" | tee -a "$out/timing.txt"

case "$phase" in
  gpu2 | gpu1 | gpu2again)
    n=${phase#gpu}; n=${n%again}
    # gpu2again after gpu1 (gpu=2, gpu=1, gpu=2: drift over the lease) or straight after gpu2 (the same
    # configuration twice, ~370 s each: how far two runs move with nothing changed; lease 5's machine
    # went back after 1,190 s held, between gpu1 and a third run, and lease 4's during gpu1)
    previous=$(case "$phase" in
      gpu1) echo gpu2 ;;
      gpu2again) if [ -f /tmp/inferbench-multi-gpu1/start ]; then echo gpu1; else echo gpu2; fi ;;
    esac)
    run=/tmp/inferbench-multi-$phase   # the detached run's log, start time and exit status, kept between calls
    source benchmarks/gpu_machine/wait_for_detached_run.sh
    if [ ! -f "$run/start" ]; then
      if [ -n "$previous" ]; then
        if [ ! -f "/tmp/inferbench-multi-$previous/rc" ]; then
          # still going, or never run on this machine (a fresh one: nothing installed, no run to set aside)
          echo "no finished $previous run here: run (or wait for) the $previous phase first" >&2
          exit 1
        fi
        rm -rf "/tmp/run_$previous" && mkdir -p "/tmp/run_$previous" && mv results data logs .snakemake "/tmp/run_$previous/"
      fi
      snakemake --unlock > /dev/null 2>&1
      start_detached_run --cores 32 --resources gpu="$n"
    fi
    wait_for_detached_run "workflow gpu=$n"
    start=$(date +%s%N)
    snakemake --cores 32 --resources gpu="$n" -n > "$out/rerun.log" 2>&1
    echo "dry re-run rc=$? wall_ms=$(( ($(date +%s%N) - start) / 1000000 ))" | tee -a "$out/timing.txt"
    bash benchmarks/gpu_machine/collect_gpu_run.sh
    python benchmarks/tools/multi_gpu_check.py results/cells --expect-gpus "$n" > "$out/multi_gpu_check.md"
    echo "multi_gpu_check rc=$?" | tee -a "$out/timing.txt"
    head -5 "$out/multi_gpu_check.md"; tail -3 "$out/multi_gpu_check.md"
    # how noisy this VM's host is: where host-bound cells move 30-40% between processes (lease 4), no
    # comparison of two runs can show a shift of 5-10%; lease 3's VM: 4-5%
    python - <<'PY' | tee -a "$out/timing.txt"
import pandas as pd
s = pd.read_csv("results/summary.csv")
host = s[(s.status == "ok") & (s.device == "cuda") & (s.bound == "host")]
print(f"host-bound GPU cells: {len(host)}, median spread between processes {host.repeat_p50_spread_pct.median():.1f}%")
PY
    ;;
  kill)
    targets=$(ls results/cells/{bert_base,distilbert}/torch_eager-fp32/cuda/*.json | head -6)
    python experiments/gpu_kill_test/gpu_kill_test.py --gpus 2 --cores 32 $targets > "$out/kill_test.json" 2> "$out/kill_test.err"
    echo "kill test rc=$?" | tee -a "$out/timing.txt"
    cat "$out/kill_test.json"; tail -5 "$out/kill_test.err"
    tar czf "$out/kill_logs.tgz" logs/benchmark_cell logs/warm_start.log 2>/dev/null
    ;;
esac
