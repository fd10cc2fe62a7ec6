#!/usr/bin/env bash
# timm's own benchmark.py and the workflow's peak study in one GPU lease, then the ratios (issue 17).
#   bash benchmarks/gpu_machine/peak_side_by_side.sh [limit_s of this call, default 570]
# Installs as the README says (benchmarks/gpu_machine/install_on_gpu_machine.sh: the wheel bundle's last piece
# carried, the others copied to /tmp/carry by the calls before, see prepare_gpu_carry.sh) and needs
# `.anchors/timm_benchmark.py` (a copy of ../shared/anchors/timm_benchmark.py) carried with the command;
# results go to $OUT, in at most 8 files (what the lent machine brings back): timing.txt, ratios.md,
# ratios.json, snakemake.log and peak.tgz (summary, report, roofline, plots, records, profiles, logs,
# timm's JSON and logs). The workflow runs detached from the call (setsid, as readme_run_on_gpu_machine.sh's
# BACKGROUND=1): the call waits for it until limit_s after its start and returns, the run goes on, and
# the next call (CONTINUE=1) waits for that same run; a cell longer than one call (freezing with
# max-autotune: ~16 minutes of autotuning) is never killed by a call's limit. Ratios and peak.tgz come
# with the call that sees the run finish; every call brings the records made so far.
# timm runs first, with its best flags for these models (fp16 weights, channels-last, torch.compile),
# each model and batch in a fresh process; then `snakemake --configfile config/studies/peak.yaml`.
# STUDIES=a,b runs those studies of the preset only and STUDY_OVERRIDES='peak_vision: {workloads: [resnet50],
# batch_sizes: [256]}' narrows them (a lease too short for the whole preset), PROFILE_CELLS='a/b/c, d/e/f' the
# profiled cells; TIMM_RUNS='resnet50:256' the model:batch runs of timm's side.
set -uo pipefail
out=${OUT:-/tmp/inferbench-out}
call_started=$(date +%s)   # wait_for_detached_run's deadline counts from here, the install included
limit=$(( ${1:-570} - 20 ))
preset=(--configfile config/studies/peak.yaml)
if [ -n "${STUDY_OVERRIDES:-}${PROFILE_CELLS:-}" ]; then   # a config file, not --config: that one reads numbers as strings
  : > /tmp/peak_overrides.yaml
  [ -n "${STUDY_OVERRIDES:-}" ] && printf 'studies: {%s}\n' "$STUDY_OVERRIDES" >> /tmp/peak_overrides.yaml
  [ -n "${PROFILE_CELLS:-}" ] && printf 'profile: {cells: [%s]}\n' "$PROFILE_CELLS" >> /tmp/peak_overrides.yaml
  preset+=(/tmp/peak_overrides.yaml)
fi
[ -n "${STUDIES:-}" ] && preset+=(--config "run=[$STUDIES]")
mkdir -p "$out"

# CONTINUE=1: a later call on the same machine waits for the run the first one started (the install and
# timm's results kept in /tmp)
if [ "${CONTINUE:-0}" = 1 ]; then
  export PIP_NO_INDEX=1 PYTHONUNBUFFERED=1
else
  source benchmarks/gpu_machine/install_on_gpu_machine.sh || exit 1
  mkdir -p /tmp/peak_timm
  for run in ${TIMM_RUNS:-resnet50:256 resnet50:1024 vit_base_patch16_224:256}; do
    model=${run%%:*} batch=${run##*:}
    start=$(date +%s)
    python3 .anchors/timm_benchmark.py --bench inference --no-retry -m "$model" --img-size 224 -b "$batch" \
      --precision float16 --channels-last --torchcompile --num-warm-iter 10 --num-bench-iter 50 \
      --results-file "/tmp/peak_timm/timm_${model}_b$batch.json" --results-format json \
      > "/tmp/peak_timm/timm_${model}_b$batch.log" 2>&1
    echo "timm $model b$batch rc=$? wall_s=$(( $(date +%s) - start ))" | tee -a /tmp/peak_timm/timing.txt
  done
fi
cat /tmp/peak_timm/timing.txt >> "$out/timing.txt"
# the README's command for the preset (the done-when), detached: started by the first call, waited
# for by the next ones
run=/tmp/inferbench-peak-run   # not readme_run_on_gpu_machine.sh's: a call of that one must not wait for this run
source benchmarks/gpu_machine/wait_for_detached_run.sh
if [ ! -f "$run/start" ]; then
  snakemake --unlock "${preset[@]}" > /dev/null 2>&1   # a run killed with an earlier machine's call
  start_detached_run --cores 8 --resources gpu=1 "${preset[@]}"
fi
wait_for_detached_run "workflow"   # returns once the run has finished; else ends this call, the run going on
python3 benchmarks/tools/peak_ratios.py --summary results/summary.csv /tmp/peak_timm/timm_*.json --out-json "$out/ratios.json" \
  > "$out/ratios.md"
# not the scratch of a killed job (its compiler caches: 355 MB for one max-autotune cell)
tar czf "$out/peak.tgz" --exclude='repeats-*' results/summary.csv results/report.md results/roofline.csv results/plots results/cells \
  results/profiles results/cost results/machine results/onnx/*.json results/models/*.json logs \
  -C /tmp peak_timm 2>/dev/null
tail -40 "$out/ratios.md"
