#!/usr/bin/env bash
# timm's own benchmark.py and the workflow's peak study in one GPU lease, then the ratios (issue 17).
#   bash benchmarks/peak_side_by_side.sh [workflow limit_s, default 420]
# Needs `.devw` (snakemake wheels, ../shared/gpu/README.md) and `.anchors/timm_benchmark.py` (a copy
# of ../shared/anchors/timm_benchmark.py) carried with the command; results go to $OUT.
# timm runs first, with its best flags for these models (fp16 weights, channels-last, torch.compile),
# each model in a fresh process; then `snakemake --configfile config/studies/peak.yaml`.
set -uo pipefail
out=${OUT:-/tmp/inferbench-out}
limit=${1:-420}
mkdir -p "$out"
[ -d /tmp/site/snakemake ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .devw/*.whl || exit 1
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$out/gpu.csv"

# CONTINUE=1: a second call on the same machine finishes a workflow run cut off by the time limit
# (timm's results kept in /tmp/peak_timm)
mkdir -p /tmp/peak_timm
for model in resnet50 vit_base_patch16_224; do
  [ "${CONTINUE:-0}" = 1 ] && break
  start=$(date +%s)
  python3 .anchors/timm_benchmark.py --bench inference --no-retry -m "$model" --img-size 224 -b 256 \
    --precision float16 --channels-last --torchcompile --num-warm-iter 10 --num-bench-iter 50 \
    --results-file "/tmp/peak_timm/timm_$model.json" --results-format json > "/tmp/peak_timm/timm_$model.log" 2>&1
  echo "timm $model rc=$? wall_s=$(( $(date +%s) - start ))" | tee -a /tmp/peak_timm/timing.txt
done
cp /tmp/peak_timm/timing.txt "$out/"
snakemake --unlock --configfile config/studies/peak.yaml > /dev/null 2>&1

start=$(date +%s)
timeout -k 15 "$limit" snakemake --cores 16 --resources gpu=1 --rerun-incomplete --configfile config/studies/peak.yaml \
  > "$out/snakemake.log" 2>&1
echo "workflow rc=$? wall_s=$(( $(date +%s) - start ))" | tee -a "$out/timing.txt"
cp results/summary.csv results/report.md "$out/" 2>/dev/null
tar czf "$out/cells.tgz" results/cells logs 2>/dev/null
python3 benchmarks/peak_ratios.py --summary results/summary.csv /tmp/peak_timm/timm_*.json --out-json "$out/ratios.json" \
  | tee "$out/ratios.md"
