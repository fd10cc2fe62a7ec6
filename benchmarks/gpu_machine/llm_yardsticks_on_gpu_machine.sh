#!/usr/bin/env bash
# Issues 57 and 58 in one lease: the `llm` preset's vLLM cells held to vLLM's own benchmarks, every generation
# engine's decode-step split, and serving under load, as one detached sequence of stages, so that no stage
# waits for a call (a lease lasts 30 minutes held, and the machine goes back after 30 s idle).
#
# Carry .carry/NN and .carry_vllm/NN first (benchmarks/gpu_machine/prepare_gpu_carry.sh prints the calls). The
# first call (carrying the last piece) installs and starts the stages; it and every later call wait up to
# limit_s (540 by default) and bring back, in $OUT/yardsticks.tgz, what is done: each stage's log, the
# benchmarks' tables, each study's summary and report, the records so far.
#   bash benchmarks/gpu_machine/llm_yardsticks_on_gpu_machine.sh [limit_s]
#
# The stages, in the order that keeps the most if the lease ends early:
#   gen_vllm         llm_gpu narrowed to vLLM, prompt 128, batch 1 and 16 (VLLM_BATCHES='1' for batch 1 only)
#   bench_latency    vllm bench latency at each vLLM cell (benchmarks/tools/vllm_bench_latency.py)
#   gen_all          llm_gpu narrowed to prompt 128, batch 1: the other three engines (vLLM's cell is there)
#   serving          llm_serving_gpu, whole (vLLM and hf_static under load), SERVING_REPEATS (3) processes a cell
#   bench_throughput vLLM's offline throughput benchmark at each vLLM llm_load cell's capacity run
#   endpoint         llm_endpoint_gpu: vLLM in-process against the same engine behind `vllm serve` (issue 73)
#   bench_serve      `vllm bench serve` and the project's own client in turn, BENCH_ROUNDS (3) rounds, against one
#                    server started with each vllm_serve cell's command, at its VALID loads
#                    (benchmarks/tools/vllm_bench_serve.py --in-turn); the client once for each way of sending
#                    prompts in BENCH_CLIENT_PROMPTS ('token_ids'; 'token_ids words' adds text as the benchmark
#                    sends it), and the benchmark replaying the client's requests (--replay; BENCH_REPLAY=0: not);
#                    BENCH_LOADS=N: the N lowest VALID loads only
#   endpoint_rest    llm_endpoint_gpu whole: the cells `endpoint` left out (ENDPOINT_ENGINES), measured after the
#                    yardstick, so that a lease that ends early keeps the yardstick
#   bench_floor      the same rounds against the null server paced as vLLM (BENCH_PACE, '25,3.5' ms): each
#                    client's own cost on this host (--floor --pace)
# The last four are not run by default: STAGES='endpoint bench_serve bench_floor'.
# STAGES='serving bench_throughput' runs those only (all five take about 28 minutes on an H100 after the
# carry, at the edge of a lease: split them over two leases where the device time allows).
set -uo pipefail
all_stages="gen_vllm bench_latency gen_all serving bench_throughput"   # STAGES may name endpoint, bench_serve, bench_floor
run=${YARDSTICKS_RUN:-/tmp/inferbench-yardsticks}   # the run: its tree, stages, outputs

stages() {  # the detached sequence, in the run's tree, with the install's environment
  local started
  stage() {  # stage NAME COMMAND...: its output in out/NAME.log, one line each at its start and end
    local name=$1 began
    shift
    case " ${STAGES:-$all_stages} " in *" $name "*) ;; *) return 0 ;; esac
    began=$(date +%s)
    echo "$(date +%T) $name: started" >> "$run/stages.log"
    "$@" > "$run/out/$name.log" 2>&1
    local rc=$?   # before the line below runs `date`, whose status $? would then be
    echo "$(date +%T) $name: rc=$rc after $(( $(date +%s) - began )) s" >> "$run/stages.log"
  }
  narrow() {  # narrow STUDY KEYS: a config file narrowing one study (a --config value reads 128 as a string)
    printf 'studies:\n  %s: {%s}\n' "$1" "$2" > "$run/narrow-$1.yaml"
    echo "$run/narrow-$1.yaml"
  }
  keep() {  # keep NAME: the last workflow's summary and report, named after its stage
    [ -f "$run/out/$1.log" ] || return 0
    cp results/summary.csv "$run/out/$1_summary.csv" 2>/dev/null
    cp results/report.md "$run/out/$1_report.md" 2>/dev/null
  }
  workflow=(snakemake --cores 8 --resources gpu=1)
  stage gen_vllm "${workflow[@]}" --configfile config/studies/llm.yaml \
    "$(narrow llm_gpu "engines: [vllm], seq_lens: [128], batch_sizes: [${VLLM_BATCHES:-1, 16}]")" --config 'run=[llm_gpu]'
  keep gen_vllm
  stage bench_latency python benchmarks/tools/vllm_bench_latency.py results/cells --processes 2 \
    --md "$run/out/bench_latency.md" --out "$run/out/bench_latency.json"
  stage gen_all "${workflow[@]}" --configfile config/studies/llm.yaml \
    "$(narrow llm_gpu 'seq_lens: [128], batch_sizes: [1]')" --config 'run=[llm_gpu]'
  keep gen_all
  # SERVING_REPEATS processes a cell (3 by default: the capacity set beside vLLM's benchmark's 3 runs)
  printf 'measure:\n  repeats: %s\n' "${SERVING_REPEATS:-3}" > "$run/serving-repeats.yaml"
  stage serving "${workflow[@]}" --configfile config/studies/llm.yaml "$run/serving-repeats.yaml" \
    --config 'run=[llm_serving_gpu]'
  keep serving
  stage bench_throughput python benchmarks/tools/vllm_bench_throughput.py results/cells --runs 3 \
    --md "$run/out/bench_throughput.md" --out "$run/out/bench_throughput.json"
  # ENDPOINT_ENGINES='vllm_serve': the server's cell alone (the in-process one measured in a lease before)
  stage endpoint "${workflow[@]}" --configfile \
    "$(narrow llm_endpoint_gpu "engines: [${ENDPOINT_ENGINES:-vllm, vllm_serve}]")" --config 'run=[llm_endpoint_gpu]'
  keep endpoint
  replay=(--replay)
  [ "${BENCH_REPLAY:-1}" = 1 ] || replay=()
  # shellcheck disable=SC2086  # the list of ways and the loads option are split into words on purpose
  stage bench_serve python benchmarks/tools/vllm_bench_serve.py results/cells --in-turn "${BENCH_ROUNDS:-3}" \
    --client-prompts ${BENCH_CLIENT_PROMPTS:-token_ids} ${BENCH_LOADS:+--loads "$BENCH_LOADS"} "${replay[@]}" \
    --md "$run/out/bench_serve.md" --out "$run/out/bench_serve.json"
  stage endpoint_rest "${workflow[@]}" --config 'run=[llm_endpoint_gpu]'
  keep endpoint_rest
  stage bench_floor python benchmarks/tools/vllm_bench_serve.py results/cells --in-turn "${BENCH_ROUNDS:-3}" \
    --floor --pace "${BENCH_PACE:-25,3.5}" --md "$run/out/bench_floor.md" --out "$run/out/bench_floor.json"
  echo "$(date +%T) done" >> "$run/stages.log"
  touch "$run/done"
}

if [ "${1:-}" = --stages ]; then
  cd "$run/tree" && stages
  exit 0
fi

out=${OUT:-/tmp/inferbench-out}
limit=${1:-540}
call_started=$(date +%s)
mkdir -p "$out"
if [ ! -f "$run/start" ]; then
  mkdir -p /tmp/carry /tmp/carry_vllm /tmp/carry_serving
  cp .carry/*/* /tmp/carry/ 2>/dev/null
  cp .carry_vllm/*/* /tmp/carry_vllm/ 2>/dev/null
  cp .carry_serving/*/* /tmp/carry_serving/ 2>/dev/null
  # a copy of the checkout: each call copies the checkout over the repository root, which would change the
  # code of the cells still running
  mkdir -p "$run/tree" "$run/out" &&
    tar -c --exclude=./.carry --exclude=./.carry_vllm --exclude=./.carry_serving . | tar -x -C "$run/tree"
  cd "$run/tree" || exit 1
  if [ -f /tmp/carry_serving/pieces ]; then  # the serving stages' lighter install (snakemake and vLLM only)
    source benchmarks/gpu_machine/install_serving_on_gpu_machine.sh || exit 1
  else
    source benchmarks/gpu_machine/install_on_gpu_machine.sh || exit 1
  fi
  if [ ! -f /tmp/vllm-env.sh ]; then
    echo "vLLM is not installed: carry each .carry_vllm/NN before this call" >&2
    exit 1
  fi
  cp "$out"/gpu.csv "$out"/timing.txt "$run/out/"
  date +%s > "$run/start"
  # PYTHONFAULTHANDLER: a process that hangs writes every thread's stack to its log on `kill -ABRT`
  PYTHONFAULTHANDLER=1 setsid nohup bash "$0" --stages < /dev/null > "$run/stages.out" 2>&1 &
fi
cd "$run/tree" || exit 1
while [ ! -f "$run/done" ] && [ "$(date +%s)" -lt $(( call_started + limit )) ]; do sleep 5; done
find results/cells -name caches -prune -o -name '*.json' -print 2>/dev/null > "$run/records.txt"
tar czf "$out/yardsticks.tgz" -C "$run" out stages.log stages.out \
  $(sed "s|^|tree/|" "$run/records.txt") 2>/dev/null
echo "after $(( $(date +%s) - $(cat "$run/start") )) s:"
cat "$run/stages.log"
grep -h "steps (" "$run"/out/*.log 2>/dev/null | tail -1
