#!/usr/bin/env bash
# The README's install on the lent GPU machine, which has no network: `python -m pip install -e .`,
# with pip finding what pyproject.toml declares among carried wheels (PIP_NO_INDEX / PIP_FIND_LINKS);
# benchmarks/prepare_gpu_carry.sh fills every folder below in one command:
#   .devw/        snakemake and its dependencies, onnxsim (../shared/gpu/build-wheelhouse.sh)
#   .gpuwheels/   kaggle and its dependencies, six, nvidia-ml-py, setuptools, onnxruntime-genai-cuda
#                 (pip download, see README)
#   /tmp/ortp/    the onnxruntime-gpu wheel in five pieces, copied there by the five calls before this one
#   /tmp/ovp/     the openvino wheel (59 MB, too large to travel with .devw): a sixth call carries .ovwheel/
#                 and runs `mkdir -p /tmp/ovp && cp .ovwheel/*.whl /tmp/ovp/`; fill .ovwheel/ here with
#                 `python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
#                 --platform manylinux_2_28_x86_64 -d .ovwheel openvino openvino-telemetry`
# The machine comes with the CPU package onnxruntime preinstalled: it is removed first, as the README
# says for an environment that already has it. Sourced by the scripts that run the workflow there;
# writes gpu.csv, install.log and the first lines of timing.txt to $out.
mkdir -p "$out" /tmp/wheels
cp .devw/*.whl .gpuwheels/*.whl /tmp/wheels/
[ -d /tmp/ortp ] && cat /tmp/ortp/part* > /tmp/wheels/onnxruntime_gpu-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl
[ -d /tmp/ovp ] && cp /tmp/ovp/*.whl /tmp/wheels/
ls /tmp/wheels/openvino-*.whl > /dev/null 2>&1 || echo "no openvino wheel in /tmp/wheels: the install will stop at it (see the top of this script)" >&2
nvidia-smi --query-gpu=index,name,uuid,driver_version,clocks.max.sm,power.limit --format=csv > "$out/gpu.csv"
python -m pip uninstall -y -q onnxruntime > /dev/null 2>&1
export PIP_NO_INDEX=1 PIP_FIND_LINKS=/tmp/wheels PYTHONUNBUFFERED=1
install_start=$(date +%s)
python -m pip install -e . > "$out/install.log" 2>&1
echo "install rc=$? wall_s=$(( $(date +%s) - install_start ))" | tee "$out/timing.txt"
tail -2 "$out/install.log"
python -m inferbench list engines 2>&1 | grep -E "warning|^ort_" | tee -a "$out/timing.txt"
