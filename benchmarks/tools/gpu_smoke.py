"""Does the measuring path work on this GPU machine? (not a test; seconds, needs a CUDA GPU)

    python benchmarks/tools/gpu_smoke.py [--out smoke.json]

Builds a small MLP, then measures it through `inferbench run-cell` on cuda as the workflow does
(libraries imported once, two forked processes, NVML read at the loop ends) with eager PyTorch, a CUDA
graph and the no-op engine, and prints each record's status, processes, bound and telemetry: the
checks to make before a long run on a new machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from inferbench.core.cells import CellRecord
from inferbench.models import create_model
from inferbench.models.registry import save_checkpoint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        spec = create_model("mlp_heart", in_features=13, hidden=[32, 16])
        save_checkpoint(spec, root / "m.pt", seed=0)
        meta = {"name": "mlp_heart", "arch": spec.arch, "inputs": [asdict(i) for i in spec.inputs]}
        (root / "m.json").write_text(json.dumps(meta))
        for engine in ("noop", "torch_eager", "torch_cudagraph"):
            out = root / f"{engine}.json"
            cmd = [
                sys.executable, "-m", "inferbench", "run-cell", "--workload", "mlp_heart", "--engine", engine,
                "--engine-options", json.dumps({"engine": engine}), "--precision", "fp32", "--device", "cuda",
                "--batch", "64", "--model-meta", str(root / "m.json"), "--artifact", str(root / "m.pt"),
                "--measure", json.dumps({"warmup_s": 0.1, "min_time_s": 0.2, "repeats": 2, "host_bound_repeats": 3}),
                "--out", str(out),
            ]  # fmt: skip
            env = {**os.environ, "INFERBENCH_LOCK_FILE": str(root / "lock")}
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
            print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:])
            record = CellRecord.load(out)
            telemetry = record.gpu_telemetry or {}
            results.append(
                {
                    "engine": engine,
                    "status": record.status,
                    "reason": record.reason,
                    "processes": (record.repeats or {}).get("n"),
                    "p50_by_process_ms": record.flatten()["p50_by_process_ms"],
                    "bound": record.bound,
                    "gpu_busy_pct": telemetry.get("gpu_busy_pct"),
                    "nvml_samples": telemetry.get("n_samples"),
                    "sm_clock_mhz": telemetry.get("sm_clock_mhz"),
                    "energy_per_item_mj": telemetry.get("energy_per_item_mj"),
                    "cold_start_s": record.cold_start_s,
                }
            )
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
