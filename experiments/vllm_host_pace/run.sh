#!/usr/bin/env bash
# On the GPU machine, vLLM's pieces carried (.carry_vllm/NN): install them, a TinyLlama-shaped checkpoint, then
# vllm_host_pace.py in fresh processes: idle, with busy-looping neighbours, idle again (MODES to change).
set -u
here=$(dirname "$0")
if [ ! -d /tmp/vllm-site ]; then
  mkdir -p /tmp/carry_vllm /tmp/vllm-wheels && cp .carry_vllm/*/* /tmp/carry_vllm/ 2>/dev/null
  cat /tmp/carry_vllm/part* | tar -x -C /tmp/vllm-wheels
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/vllm-site /tmp/vllm-wheels/*.whl
fi
export PYTHONPATH=/tmp/vllm-site:$PWD/src HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_USE_FLASHINFER_SAMPLER=0 \
  VLLM_HOST_IP=127.0.0.1 VLLM_ALLREDUCE_USE_SYMM_MEM=0 VLLM_NO_USAGE_STATS=1 VLLM_CACHE_ROOT=/tmp/vllm-cache \
  OMP_NUM_THREADS=4
model=/tmp/probe-llama
[ -f $model/config.json ] || python3 - <<'PY'
import torch
from transformers import LlamaConfig, LlamaForCausalLM
config = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                     num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048)
torch.manual_seed(0)
with torch.device("cuda"):
    model = LlamaForCausalLM(config).to(torch.float16)
model.save_pretrained("/tmp/probe-llama")
PY
for mode in ${MODES:-idle busy idle}; do
  spinners=()
  if [ "$mode" = busy ]; then  # neighbours that keep 8 of the 16 vCPUs from halting
    for _ in 1 2 3 4 5 6 7 8; do python3 -c 'while True: pass' & spinners+=($!); done
  fi
  timeout -k 5 ${PACE_LIMIT:-150} python3 "$here/vllm_host_pace.py" $model "$mode" 2>&1 | grep -E '^\{|Error' | tail -3
  [ ${#spinners[@]} -gt 0 ] && kill "${spinners[@]}"
done
