"""What GPU telemetry costs the measurement it observes (not a test; needs a CUDA GPU and NVML).

    python experiments/observer_effect/observer_effect.py --out observer_effect.json [--processes 2] [--rounds 6]
        [--seconds 1.0]

Two cells on cuda, each in ``--processes`` fresh processes: the no-op engine (the harness alone) and
BERT-base eager fp32 at batch 1, sequence 128 (launch-bound: its time follows the host thread that
launches a few hundred kernels per call). In each process the three telemetry modes take turns for
``--rounds`` rounds (off, thread, ends, off, thread, ends, ...), so that a drift of the host's speed
hits all three alike; each turn warms up 0.2 s and then times calls for ``--seconds``:

  off     no telemetry
  thread  the design before: NVML clocks, power, temperature and this process's memory read every
          50 ms by a background thread while the calls are timed
  ends    the design now (inferbench.trackers.gpu_telemetry): NVML read at the loop's two ends only

Prints, per cell and mode, the median over rounds and processes of the p50 and mean per call and the
ratio to ``off``, and writes every turn's numbers to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

MODES = ("off", "thread", "ends")
SAMPLE_INTERVAL_S = 0.05


class ThreadSampler:
    """The sampler of the design before: a background thread reading NVML every 50 ms."""

    def __init__(self, telemetry: Any) -> None:
        self.telemetry = telemetry
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.samples = 0

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL_S):
            self.telemetry.read_instant()
            self.telemetry._process_memory_mb()
            self.samples += 1

    def __enter__(self) -> ThreadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def one_process(cell: str, rounds: int, seconds: float) -> list[dict[str, Any]]:
    import contextlib

    import numpy as np

    from inferbench.engines.registry import load_engine_class
    from inferbench.models import create_model, make_inputs
    from inferbench.models.registry import save_checkpoint
    from inferbench.scenarios.timing import CudaEventTimer, measure_calls
    from inferbench.trackers.gpu_telemetry import GpuTelemetry

    if cell == "noop":
        engine = load_engine_class("noop")("cuda", "fp32", 0, {"engine": "noop"})
        engine.prepare(None, (), {})
        staged = engine.stage({})
    else:
        spec = create_model("bert_base")
        with tempfile.TemporaryDirectory() as tmp:
            save_checkpoint(spec, Path(tmp) / "bert.pt", seed=0)
            engine = load_engine_class("torch_eager")("cuda", "fp32", 0, {"engine": "torch_eager"})
            batch = make_inputs(spec.inputs, 1, 128, seed=0)
            engine.prepare(Path(tmp) / "bert.pt", spec.inputs, batch)
        staged = engine.stage(batch)
    timer = CudaEventTimer(engine.stream(), engine.synchronize)
    results = []
    for round_index in range(rounds):
        for mode in MODES:
            telemetry = GpuTelemetry.for_cuda_device()
            if telemetry is None:
                raise SystemExit("NVML is not available here: nothing to measure")
            watch = {"off": contextlib.nullcontext(), "thread": ThreadSampler(telemetry), "ends": telemetry}[mode]
            with watch:
                result = measure_calls(lambda: engine.run(staged), timer, 0.2, seconds, 10)
            ms = np.asarray(result.samples_s) * 1e3
            results.append(
                {
                    "cell": cell,
                    "mode": mode,
                    "round": round_index,
                    "p50_ms": float(np.median(ms)),
                    "mean_ms": float(ms.mean()),
                    "p99_ms": float(np.percentile(ms, 99)),
                    "calls": int(ms.size),
                    "nvml_reads": getattr(watch, "samples", None),
                    # the driver's utilization samples over the loop (ends mode): is that API there?
                    "gpu_busy_pct": telemetry.gpu_busy_pct if mode == "ends" else None,
                }
            )
    return results


def summarise(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for cell in sorted({t["cell"] for t in turns}):
        off = {k: statistics.median(t[k] for t in turns if t["cell"] == cell and t["mode"] == "off")
               for k in ("p50_ms", "mean_ms")}  # fmt: skip
        for mode in MODES:
            mine = [t for t in turns if t["cell"] == cell and t["mode"] == mode]
            p50 = statistics.median(t["p50_ms"] for t in mine)
            mean = statistics.median(t["mean_ms"] for t in mine)
            rows.append(
                {
                    "cell": cell,
                    "mode": mode,
                    "turns": len(mine),
                    "p50_ms": p50,
                    "mean_ms": mean,
                    "p50_vs_off": p50 / off["p50_ms"],
                    "mean_vs_off": mean / off["mean_ms"],
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--child", choices=["noop", "bert_eager"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_process(args.child, args.rounds, args.seconds)))
        return
    turns: list[dict[str, Any]] = []
    for cell in ("noop", "bert_eager"):
        for process in range(args.processes):
            cmd = [sys.executable, __file__, "--child", cell, "--rounds", str(args.rounds),
                   "--seconds", str(args.seconds), "--out", str(args.out)]  # fmt: skip
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            for turn in json.loads(done.stdout.strip().splitlines()[-1]):
                turns.append({**turn, "process": process})
    summary = summarise(turns)
    args.out.write_text(json.dumps({"summary": summary, "turns": turns}, indent=2))
    print(f"{'cell':12s} {'mode':7s} {'turns':>5s} {'p50 ms':>9s} {'mean ms':>9s} {'p50/off':>8s} {'mean/off':>8s}")
    for row in summary:
        print(f"{row['cell']:12s} {row['mode']:7s} {row['turns']:5d} {row['p50_ms']:9.4f} {row['mean_ms']:9.4f} "
              f"{row['p50_vs_off']:8.3f} {row['mean_vs_off']:8.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
