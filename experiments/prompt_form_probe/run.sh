#!/usr/bin/env bash
# One-off probe (issue 73): `vllm bench serve` sends text prompts, which vLLM's front end tokenizes in a thread
# pool; the project's client sends token ids, which skip that step. Does the prompt's form explain why the benchmark
# reads a higher TTFT p50 than the client on the same server?
#
# On the lent GPU machine, after carrying each .carry_serving/NN but the last in its own call, carry the last and run
#   bash experiments/prompt_form_probe/run.sh [ROUNDS]
# It installs the serving set, makes what the client's cell reads (the model's checkpoint and description, the
# parity reference) with snakemake, saves that checkpoint where the record's server command reads it, and runs
# benchmarks/tools/vllm_bench_serve.py --in-turn ROUNDS (2) --client-prompts token_ids words --loads 1 against
# cells/: a `vllm_serve` cell's record (its samples left out), whose sweep gives the load and settings.
# No workflow cell runs: the record stands in for the endpoint stage, which takes eight minutes.
set -uo pipefail
out=${OUT:-/tmp/prompt-form-out}
here=experiments/prompt_form_probe
mkdir -p "$out"
source benchmarks/gpu_machine/install_serving_on_gpu_machine.sh || exit 1
began=$(date +%s)
snakemake --cores 8 results/models/llm:llama.json results/models/llm:llama.pt results/reference/llm:llama-s128.npz \
  > "$out/inputs.log" 2>&1 || { tail -20 "$out/inputs.log"; exit 1; }
python - "$here/cells" > "$out/checkpoint.log" 2>&1 <<'PY' || { cat "$out/checkpoint.log"; exit 1; }
import json, sys
from pathlib import Path

from inferbench.engines.endpoint.engine import save_served_checkpoint
from inferbench.models.registry import load_checkpoint

record = json.loads(next(Path(sys.argv[1]).glob("*.json")).read_text())
command = record["engine"]["server_command"].split()
folder = Path(command[command.index("serve") + 1])
spec, _ = load_checkpoint("results/models/llm:llama.pt")
save_served_checkpoint(spec.module.model.half(), folder)  # the weights the client's parity reference came from
print(folder)
PY
echo "inputs and checkpoint after $(( $(date +%s) - began )) s" | tee -a "$out/timing.txt"
timeout "${PROBE_LIMIT_S:-900}" python benchmarks/tools/vllm_bench_serve.py "$here/cells" --in-turn "${1:-2}" \
  --client-prompts token_ids words --loads 1 --out "$out/prompt_form.json" --md "$out/prompt_form.md" \
  > "$out/prompt_form.log" 2>&1
echo "probe rc=$? after $(( $(date +%s) - began )) s" | tee -a "$out/timing.txt"
tail -20 "$out/prompt_form.log"
