#!/usr/bin/env bash
# A lighter install on the lent GPU machine for the LLM serving stages alone: snakemake and its dependencies
# (.devw), vLLM's wheels (.vllmw) and uvicorn (`vllm serve`), packed as one tar in pieces, .carry_serving/NN
# (about half the calls of the full .carry and .carry_vllm). Made here with:
#   bash benchmarks/gpu_machine/prepare_gpu_carry.sh --serving
# Each call before the working one carries one piece and runs `mkdir -p /tmp/carry_serving && cp
# .carry_serving/NN/* /tmp/carry_serving/`; the working call sources this (llm_yardsticks_on_gpu_machine.sh
# does where .carry_serving is carried). Every wheel goes in with --no-deps beside the machine's own packages
# (pip would downgrade numpy for vLLM's optional dependencies), then the project itself, editable.
# Writes gpu.csv, install.log and timing.txt to $out; returns 1 when a piece is missing or pip fails.
mkdir -p "$out" /tmp/carry_serving
cp .carry_serving/*/* /tmp/carry_serving/ 2>/dev/null
if [ ! -f /tmp/carry_serving/pieces ] || [ "$(ls /tmp/carry_serving/part* | wc -l)" != "$(cat /tmp/carry_serving/pieces)" ] ||
   [ "$(cat /tmp/carry_serving/part* | sha256sum | cut -d' ' -f1)" != "$(cat /tmp/carry_serving/wheels.tar.sha256)" ]; then
  echo "the serving pieces are missing, incomplete or corrupt: carry each .carry_serving/NN in its own call first" >&2
  return 1
fi
nvidia-smi --query-gpu=index,name,uuid,driver_version,clocks.max.sm,power.limit --format=csv > "$out/gpu.csv"
mkdir -p /tmp/serving-wheels && cat /tmp/carry_serving/part* | tar -x -C /tmp/serving-wheels
install_start=$(date +%s)
{ python -m pip install --no-index --no-deps --no-compile --target /tmp/site /tmp/serving-wheels/*.whl &&
  python -m pip install --no-index --no-deps --no-compile --target /tmp/vllm-site /tmp/serving-wheels/vllm/*.whl
} > "$out/install.log" 2>&1 || return 1
cat > /tmp/vllm-env.sh <<'ENV'
export PYTHONPATH=/tmp/vllm-site:/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 \
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_HOST_IP=127.0.0.1 \
  VLLM_ALLREDUCE_USE_SYMM_MEM=0 VLLM_NO_USAGE_STATS=1
ENV
source /tmp/vllm-env.sh
python -m pip install -q --no-deps --no-build-isolation -e . >> "$out/install.log" 2>&1 || return 1
echo "install rc=0 wall_s=$(( $(date +%s) - install_start ))" | tee "$out/timing.txt"
return 0
