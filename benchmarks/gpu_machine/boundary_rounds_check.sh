#!/usr/bin/env bash
# A few GPU default cells whose two boundaries were timed one after the other before the ABBA rounds
# (lease 1: ResNet-50 eager fp32 b1 read end-to-end p50 0.86x its device p50), run by the workflow with
# the rounds, then the independent loop in the same lease. Needs only .devw carried (no ONNX Runtime GPU):
#   bash benchmarks/gpu_machine/boundary_rounds_check.sh      (writes cells.tgz, independent.json, timing.txt to $OUT)
set -uo pipefail
out=${OUT:-/tmp/inferbench-out}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .devw/*.whl || exit 1
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$out/install.log" 2>&1 || exit 1
cells=(
  results/cells/resnet50/torch_eager-fp32/cuda/b1-s0-t0.json
  results/cells/bert_base/torch_eager-fp32/cuda/b1-s32-t0.json
  results/cells/bert_base/torch_eager-fp32/cuda/b1-s128-t0.json
  results/cells/bert_base/torch_cudagraph-fp16/cuda/b1-s128-t0.json
  results/cells/resnet50/torch_cudagraph-fp16/cuda/b32-s0-t0.json
)
start=$(date +%s)
snakemake "${cells[@]}" --cores 16 --resources gpu=1 > "$out/snakemake.log" 2>&1
echo "cells rc=$? wall_s=$(( $(date +%s) - start ))" | tee -a "$out/timing.txt"
tar czf "$out/cells.tgz" results/cells
python3 - "${cells[@]}" <<'PY' | tee -a "$out/timing.txt"
import json, sys
for path in sys.argv[1:]:
    try:
        r = json.load(open(path))
    except OSError:
        print(path, "missing"); continue
    dev, e2e = r["latency_ms"]["p50"], r["end_to_end"]["latency_ms"]["p50"]
    runs = (r.get("repeats") or {}).get("per_repeat", [])
    each = [f"{x['p50_ms']:.3f}/{x['e2e_p50_ms']:.3f}" for x in runs]
    print(f"{path}: device p50 {dev:.3f} ms, e2e p50 {e2e:.3f} ms, e2e/device {e2e / dev:.3f}, per process {each}")
PY
python3 benchmarks/tools/independent_loop.py --out "$out/independent.json" >> "$out/timing.txt" 2>&1
tail -8 "$out/timing.txt"
