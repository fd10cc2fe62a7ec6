#!/usr/bin/env bash
# Issue 19 on a lent 2-GPU machine, one phase per call (each call may last 10 minutes; results/ stays
# on the machine between calls while it is up). Results of each phase go to $OUT.
#
#   bash benchmarks/multi_gpu_on_gpu_machine.sh gpu2 [limit_s]  # install, then the GPU default from a clean
#                                                              # checkout with --cores 32 --resources gpu=2
#   bash benchmarks/multi_gpu_on_gpu_machine.sh gpu1 [limit_s]  # the same from clean with gpu=1 (run 1 kept
#                                                              # in /tmp/run_gpu2)
#   bash benchmarks/multi_gpu_on_gpu_machine.sh kill            # a GPU cell SIGKILLed mid-run (gpu_kill_test.py)
#
# Each phase checks the records with benchmarks/multi_gpu_check.py: the GPU each cell measured on,
# and that no two measuring windows overlapped.
set -uo pipefail
out=${OUT:-/tmp/inferbench-out}
phase=${1:?phase: gpu2, gpu1 or kill}
limit=${2:-570}
mkdir -p "$out"
if [ "$phase" = gpu2 ]; then
  source benchmarks/install_on_gpu_machine.sh
else
  export PYTHONUNBUFFERED=1
fi
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
echo "phase $phase on $gpus GPUs, $(nproc) CPUs" | tee -a "$out/timing.txt"

case "$phase" in
  gpu2 | gpu1)
    n=${phase#gpu}
    if [ "$phase" = gpu1 ] && [ "${CONTINUE:-0}" != 1 ]; then
      rm -rf /tmp/run_gpu2 && mkdir -p /tmp/run_gpu2 && mv results data logs .snakemake /tmp/run_gpu2/
    fi
    snakemake --unlock > /dev/null 2>&1
    start=$(date +%s)
    timeout -k 15 "$limit" snakemake --cores 32 --resources gpu="$n" --rerun-incomplete > "$out/snakemake.log" 2>&1
    echo "workflow gpu=$n rc=$? wall_s=$(( $(date +%s) - start ))" | tee -a "$out/timing.txt"
    start=$(date +%s%N)
    snakemake --cores 32 --resources gpu="$n" -n > "$out/rerun.log" 2>&1
    echo "dry re-run rc=$? wall_ms=$(( ($(date +%s%N) - start) / 1000000 ))" | tee -a "$out/timing.txt"
    bash benchmarks/collect_gpu_run.sh
    python benchmarks/multi_gpu_check.py results/cells --expect-gpus "$n" > "$out/multi_gpu_check.md"
    echo "multi_gpu_check rc=$?" | tee -a "$out/timing.txt"
    head -5 "$out/multi_gpu_check.md"; tail -3 "$out/multi_gpu_check.md"
    ;;
  kill)
    targets=$(ls results/cells/{bert_base,distilbert}/torch_eager-fp32/cuda/*.json | head -6)
    python benchmarks/gpu_kill_test.py --gpus 2 --cores 32 $targets > "$out/kill_test.json" 2> "$out/kill_test.err"
    echo "kill test rc=$?" | tee -a "$out/timing.txt"
    cat "$out/kill_test.json"; tail -5 "$out/kill_test.err"
    tar czf "$out/kill_logs.tgz" logs/benchmark_cell logs/warm_start.log 2>/dev/null
    ;;
esac
