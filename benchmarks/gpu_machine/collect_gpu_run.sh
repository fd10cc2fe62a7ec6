#!/usr/bin/env bash
# What a GPU-machine run brings back under $OUT (at most 8 files): summary, report, and the records,
# profiles, export and model reports, dataset stats, plots and logs in one archive; prints the cells
# per engine and status. Called at the end of run_on_gpu_machine.sh and readme_run_on_gpu_machine.sh.
out=${OUT:-/tmp/inferbench-out}
cp results/summary.csv results/report.md results/report_details.md "$out/" 2>/dev/null
# not the repeats-* folders a job killed by a time limit leaves (its processes' compiler caches: they
# made the archive too large to come back)
tar czf "$out/cells.tgz" --exclude='repeats-*' results/cells results/profiles results/onnx/*.json results/models/*.json \
  data/processed/*.stats.json results/plots logs 2>/dev/null
python3 - <<'PY'
import pandas as pd
s = pd.read_csv("results/summary.csv")
print(s.groupby(["engine", "status"]).size().to_string())
print(s[s.status != "ok"][["workload", "engine", "precision", "device", "batch_size", "reason"]].to_string()[:3000])
if "scenario" in s and (s.scenario != "single").any():  # serving cells: what LoadGen measured
    cols = ["workload", "engine", "device", "batch_size", "scenario", "status", "serving_qps", "serving_p99_ms",
            "serving_capacity_qps", "serving_mean_batch"]
    print(s[s.scenario != "single"][cols].round(2).to_string())
PY
