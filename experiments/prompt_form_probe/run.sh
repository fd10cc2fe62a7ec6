#!/usr/bin/env bash
# One-off probe (issue 73): the project's client reads a lower TTFT p50 than `vllm bench serve` on the same server.
# The prompt's form does not explain it (text and token ids read alike). Do the requests themselves? Each tool draws
# its own arrivals and lengths, each with its own seeded generator; `--replay` makes the benchmark send the client's
# own requests (a timed trace: the same arrivals and lengths), a side of the rounds between the two.
#
# On the lent GPU machine, after carrying each .carry_serving/NN but the last in its own call, carry the last and run
#   bash experiments/prompt_form_probe/run.sh [ROUNDS]
# The first call installs the serving set and starts the probe detached from the call; it and every later call
# (same command, nothing carried) wait up to PROBE_WAIT_S (540) and bring back what is done, $OUT/prompt_form.tgz.
# The probe makes what the client's cell reads (the model's checkpoint and description, the parity reference) with
# snakemake, saves that checkpoint where the record's server command reads it, and runs
# benchmarks/tools/vllm_bench_serve.py --in-turn ROUNDS (3) --client-prompts ... --loads 1 [--replay] against
# cells/: a `vllm_serve` cell's record (its samples left out), whose sweep gives the load and settings. No workflow
# cell runs: the record stands in for the endpoint stage, which takes eight minutes. About 9 minutes at 3 rounds,
# 12 at 4. REPLAY=1 (the default): bench, the replay, the client sending token ids; REPLAY=0: bench, the client
# sending text, then token ids (text in the middle, next to both sides it is compared with).
set -uo pipefail
here=experiments/prompt_form_probe
run=/tmp/prompt-form-run

if [ "${1:-}" = --detached ]; then  # the probe itself, in the run's copy of the tree
  began=$(date +%s)
  snakemake --cores 8 results/models/llm:llama.json results/models/llm:llama.pt results/reference/llm:llama-s128.npz \
    > "$run/out/inputs.log" 2>&1 || { touch "$run/done"; exit 1; }
  python - "$here/cells" > "$run/out/checkpoint.log" 2>&1 <<'PY' || { touch "$run/done"; exit 1; }
import json, sys
from pathlib import Path

from inferbench.engines.endpoint.engine import save_served_checkpoint
from inferbench.models.registry import load_checkpoint

record = json.loads(next(Path(sys.argv[1]).glob("*.json")).read_text())
folder = Path(record["engine"]["model"])  # the checkpoint the server command serves
spec, _ = load_checkpoint("results/models/llm:llama.pt")
save_served_checkpoint(spec.module.model.half(), folder)  # the weights the client's parity reference came from
print(folder)
PY
  echo "inputs and checkpoint after $(( $(date +%s) - began )) s" >> "$run/out/timing.txt"
  # the middle side of every round (bench, middle, client; then reversed) sits next to both it is compared with
  sides=(--client-prompts token_ids --replay)
  [ "${REPLAY:-1}" = 1 ] || sides=(--client-prompts words token_ids)
  python benchmarks/tools/vllm_bench_serve.py "$here/cells" --in-turn "$2" "${sides[@]}" \
    --loads 1 --out "$run/out/prompt_form.json" --md "$run/out/prompt_form.md" > "$run/out/prompt_form.log" 2>&1
  echo "probe rc=$? after $(( $(date +%s) - began )) s" >> "$run/out/timing.txt"
  touch "$run/done"
  exit 0
fi

out=${OUT:-/tmp/prompt-form-out}
call_started=$(date +%s)
mkdir -p "$out"
if [ ! -f "$run/start" ]; then
  source benchmarks/gpu_machine/install_serving_on_gpu_machine.sh || exit 1
  # a copy of the checkout: each call copies the checkout over the repository root
  mkdir -p "$run/tree" "$run/out" && tar -c --exclude=./.carry_serving . | tar -x -C "$run/tree"
  cp "$out"/gpu.csv "$out"/timing.txt "$run/out/"
  date +%s > "$run/start"
  (cd "$run/tree" && setsid nohup bash "$here/run.sh" --detached "${1:-3}" < /dev/null > "$run/out/detached.log" 2>&1 &)
fi
while [ ! -f "$run/done" ] && [ "$(date +%s)" -lt $(( call_started + ${PROBE_WAIT_S:-540} )) ]; do sleep 5; done
tar czf "$out/prompt_form.tgz" -C "$run" out   # one file: a call brings back at most 8
echo "after $(( $(date +%s) - $(cat "$run/start") )) s: $([ -f "$run/done" ] && echo done || echo running)"
cat "$run/out/timing.txt"
tail -8 "$run/out/prompt_form.log" 2>/dev/null
