#!/usr/bin/env bash
# On the GPU machine, vLLM carried and installed (/tmp/vllm-site): a TinyLlama-shaped checkpoint, the probe in
# both modes (each under a time limit: a hang is a finding), then vLLM's own latency benchmark at batch 1.
export PYTHONPATH=/tmp/vllm-site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_USE_FLASHINFER_SAMPLER=0 \
  VLLM_HOST_IP=127.0.0.1 VLLM_ALLREDUCE_USE_SYMM_MEM=0 VLLM_NO_USAGE_STATS=1 VLLM_CACHE_ROOT=/tmp/vllm-cache
model=/tmp/probe-llama
[ -f $model/config.json ] || python3 - <<'PY'
import torch
from transformers import LlamaConfig, LlamaForCausalLM
config = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                     num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048)
torch.manual_seed(0)
LlamaForCausalLM(config).to(torch.float16).save_pretrained("/tmp/probe-llama")
PY
for mode in ${MODES:-once twice}; do
  echo "== mode $mode"
  timeout -k 5 ${PROBE_LIMIT:-150} python3 experiments/vllm_profile_probe/vllm_profile_probe.py $model $mode 2>&1 \
    | grep -E '^\{|Error|error|Traceback' | tail -5
  echo "rc=${PIPESTATUS[0]}"
done
