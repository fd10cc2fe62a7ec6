#!/usr/bin/env bash
# The README's install on the lent GPU machine, which has no network: `python -m pip install -e .`,
# with pip finding what pyproject.toml declares among carried wheels (PIP_NO_INDEX / PIP_FIND_LINKS).
# benchmarks/gpu_machine/prepare_gpu_carry.sh packs every wheel it needs (snakemake & co., onnxsim, LoadGen,
# onnxruntime-gpu, onnxruntime-genai-cuda, openvino, kaggle & co.) into one tar in pieces .carry/NN: the
# calls before this one each copied a piece to /tmp/carry, the call that sources this carries the last.
# The machine comes with the CPU package onnxruntime preinstalled: it is removed first, as the README
# says for an environment that already has it. Sourced by the scripts that run the workflow there;
# writes gpu.csv, install.log and the first lines of timing.txt to $out; returns 1 (the callers stop)
# when a piece is missing, the bundle is corrupt or pip fails. Where vLLM's piece set (.carry_vllm) was
# carried too, vLLM is installed beside the machine's packages (/tmp/vllm-site on PYTHONPATH).
mkdir -p "$out" /tmp/wheels /tmp/carry
cp .carry/*/* /tmp/carry/ 2>/dev/null
if [ ! -f /tmp/carry/pieces ]; then
  echo "no wheel bundle carried (.carry/NN/pieces): run benchmarks/gpu_machine/prepare_gpu_carry.sh here first" >&2
  return 1
fi
have=$(ls /tmp/carry/part* 2>/dev/null | wc -l)
if [ "$have" != "$(cat /tmp/carry/pieces)" ]; then
  echo "only $have of $(cat /tmp/carry/pieces) pieces of the wheel bundle are here: carry each .carry/NN" \
    "in its own call first (benchmarks/gpu_machine/prepare_gpu_carry.sh prints the calls)" >&2
  return 1
fi
if [ "$(cat /tmp/carry/part* | sha256sum | cut -d' ' -f1)" != "$(cat /tmp/carry/wheels.tar.sha256)" ]; then
  echo "the joined wheel bundle's SHA-256 differs from .carry's: make the pieces again and carry them all" >&2
  return 1
fi
cat /tmp/carry/part* | tar -x -C /tmp/wheels
nvidia-smi --query-gpu=index,name,uuid,driver_version,clocks.max.sm,power.limit --format=csv > "$out/gpu.csv"
python -m pip uninstall -y -q onnxruntime > /dev/null 2>&1
export PIP_NO_INDEX=1 PIP_FIND_LINKS=/tmp/wheels PYTHONUNBUFFERED=1
install_start=$(date +%s)
python -m pip install -e . > "$out/install.log" 2>&1
install_rc=$?
echo "install rc=$install_rc wall_s=$(( $(date +%s) - install_start ))" | tee "$out/timing.txt"
tail -2 "$out/install.log"
[ "$install_rc" = 0 ] || return 1
# vLLM, where its piece set was carried (.carry_vllm/NN to /tmp/carry_vllm): its 24 wheels beside the
# machine's packages, never resolved against them (pip would downgrade numpy for an optional dependency)
mkdir -p /tmp/carry_vllm && cp .carry_vllm/*/* /tmp/carry_vllm/ 2>/dev/null
if [ -f /tmp/carry_vllm/pieces ]; then
  if [ "$(ls /tmp/carry_vllm/part* | wc -l)" != "$(cat /tmp/carry_vllm/pieces)" ] ||
     [ "$(cat /tmp/carry_vllm/part* | sha256sum | cut -d' ' -f1)" != "$(cat /tmp/carry_vllm/wheels.tar.sha256)" ]; then
    echo "the vLLM pieces are incomplete or corrupt: carry each .carry_vllm/NN in its own call first" >&2
    return 1
  fi
  mkdir -p /tmp/vllm-wheels && cat /tmp/carry_vllm/part* | tar -x -C /tmp/vllm-wheels
  vllm_start=$(date +%s)
  python -m pip install -q --no-index --no-deps --no-compile --target /tmp/vllm-site /tmp/vllm-wheels/*.whl \
    >> "$out/install.log" 2>&1 || return 1
  echo "vllm install wall_s=$(( $(date +%s) - vllm_start ))" | tee -a "$out/timing.txt"
  # the environment vLLM ran in on these machines: offline, no FlashInfer (not carried), loopback only; kept
  # for later calls on the same machine (CONTINUE=1, benchmarks/tools/vllm_bench_latency.py)
  cat > /tmp/vllm-env.sh <<'ENV'
export PYTHONPATH=/tmp/vllm-site${PYTHONPATH:+:$PYTHONPATH} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_HOST_IP=127.0.0.1 VLLM_ALLREDUCE_USE_SYMM_MEM=0 VLLM_NO_USAGE_STATS=1
ENV
  source /tmp/vllm-env.sh
fi
python -m inferbench list engines 2>&1 | grep -E "warning|^ort_|^vllm" | tee -a "$out/timing.txt"
return 0
