#!/usr/bin/env bash
# The README's first command on the lent GPU machine, as a new user runs it: `python -m pip install -e .`
# then `snakemake --cores 8 --resources gpu=1`, timed. The machine has no network, so pip installs what
# pyproject.toml declares from wheels (PIP_NO_INDEX / PIP_FIND_LINKS, as the README says):
#   .devw/        snakemake and its dependencies, onnxsim (../shared/gpu/build-wheelhouse.sh)
#   .gpuwheels/   kaggle and its dependencies, six, nvidia-ml-py, setuptools (pip download, see README)
#   /tmp/ortp/    the onnxruntime-gpu wheel in five pieces, copied there by the five calls before this one
# The machine comes with the CPU package onnxruntime preinstalled: it is removed first, as the README
# says for an environment that already has it. Results go to $OUT.
set -uo pipefail
out=${OUT:-/tmp/inferbench-out}
mkdir -p "$out" /tmp/wheels
limit=${1:-540}
cp .devw/*.whl .gpuwheels/*.whl /tmp/wheels/
[ -d /tmp/ortp ] && cat /tmp/ortp/part* > /tmp/wheels/onnxruntime_gpu-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$out/gpu.csv"

python -m pip uninstall -y -q onnxruntime > /dev/null 2>&1
export PIP_NO_INDEX=1 PIP_FIND_LINKS=/tmp/wheels PYTHONUNBUFFERED=1
start=$(date +%s)
python -m pip install -e . > "$out/install.log" 2>&1
echo "install rc=$? wall_s=$(( $(date +%s) - start ))" | tee "$out/timing.txt"
tail -2 "$out/install.log"
python -m inferbench list engines 2>&1 | grep -E "warning|^ort_" | tee -a "$out/timing.txt"

start=$(date +%s)
timeout -k 15 "$limit" snakemake --cores 8 --resources gpu=1 > "$out/snakemake.log" 2>&1
echo "workflow rc=$? wall_s=$(( $(date +%s) - start ))" | tee -a "$out/timing.txt"
start=$(date +%s%N)
snakemake --cores 8 --resources gpu=1 -n > "$out/rerun.log" 2>&1
echo "dry re-run rc=$? wall_ms=$(( ($(date +%s%N) - start) / 1000000 ))" | tee -a "$out/timing.txt"
bash benchmarks/collect_gpu_run.sh
