"""Peak numbers on a GPU through the package's own engines and measuring loop (not a test).

    python benchmarks/tools/gpu_targets.py --out results/benchmarks/gpu_targets.json [--quick]

1. ResNet-50 at 224 px: the candidate engines at batch 256, then a batch sweep of the best one;
   images/s from CUDA-event device time (inputs resident on the GPU).
2. BERT-base at batch 1, sequence 128: eager, CUDA graph, torch.compile; p50 latency.
Models have random weights (latency does not depend on the values). Each configuration runs in this
one process, one after another; nothing else runs on the GPU.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from inferbench.core.stats import latency_stats
from inferbench.engines.registry import load_engine_class
from inferbench.models import create_model, make_inputs
from inferbench.models.registry import save_checkpoint
from inferbench.scenarios.timing import CudaEventTimer, measure_calls


def run_engine(
    impl: str,
    checkpoint: Path,
    spec: Any,
    batch: int,
    seq: int,
    precision: str,
    options: dict[str, Any],
    min_time_s: float,
) -> dict[str, Any]:
    gc.collect()  # the previous configuration's model and graphs are gone before this one starts
    torch.cuda.empty_cache()
    engine = load_engine_class(impl)("cuda", precision, 0, {"engine": impl, **options})
    example = make_inputs(spec.inputs, batch, seq, 0)
    start = time.perf_counter()
    try:
        engine.prepare(checkpoint, spec.inputs, example)
        staged = engine.stage(example)
        result = measure_calls(
            lambda: engine.run(staged),
            CudaEventTimer(engine.stream(), engine.synchronize),
            warmup_s=1.0,
            min_time_s=min_time_s,
            min_iters=50,
        )
    except torch.OutOfMemoryError as error:
        return {
            "engine": impl,
            "batch": batch,
            "precision": precision,
            "options": options,
            "status": "oom",
            "reason": str(error)[:200],
        }
    stats = latency_stats(result.samples_s, batch)
    return {
        "engine": impl,
        "batch": batch,
        "seq": seq,
        "precision": precision,
        "options": options,
        "status": "ok",
        "prepare_s": time.perf_counter() - start - result.measured_s - result.warmup_s,
        "p50_ms": stats["latency_ms"]["p50"],
        "p99_ms": stats["latency_ms"]["p99"],
        "items_per_s": stats["throughput_per_s"],
        "n_iters": stats["n_iters"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="shorter measuring, fewer candidates")
    args = parser.parse_args()
    min_time = 1.0 if args.quick else 3.0
    results: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "timing": "CUDA events, device-resident inputs",
    }
    tmp = Path(tempfile.mkdtemp())

    resnet = create_model("resnet50")
    save_checkpoint(resnet, tmp / "resnet50.pt", seed=0)
    cl = {"channels_last": True}
    candidates = [
        ("torch_eager", "fp32", {}),
        ("torch_eager", "bf16", cl),
        ("torch_eager", "fp16", {**cl, "precision_mode": "cast"}),
        ("torch_cudagraph", "fp16", cl),
        ("torch_compile", "bf16", cl),
        ("torch_compile", "fp16", {**cl, "precision_mode": "cast"}),
    ]
    if args.quick:
        candidates = candidates[2:4] + candidates[5:]
    rows = []
    for impl, precision, options in candidates:
        rows.append(run_engine(impl, tmp / "resnet50.pt", resnet, 256, 0, precision, options, min_time))
        print(json.dumps(rows[-1]), flush=True)
    best = max((r for r in rows if r["status"] == "ok"), key=lambda r: r["items_per_s"])
    sweep = []
    for batch in (128, 512, 1024):
        sweep.append(
            run_engine(
                best["engine"], tmp / "resnet50.pt", resnet, batch, 0, best["precision"], best["options"], min_time
            )
        )
        print(json.dumps(sweep[-1]), flush=True)
    sweep.append(best)
    top = max((r for r in sweep if r["status"] == "ok"), key=lambda r: r["items_per_s"])
    results["resnet50_b256"] = rows
    results["resnet50_batch_sweep"] = sorted(sweep, key=lambda r: r["batch"])
    results["resnet50_best"] = {
        "engine": top["engine"],
        "precision": top["precision"],
        "options": top["options"],
        "batch": top["batch"],
        "images_per_s": top["items_per_s"],
        "b256_images_per_s": best["items_per_s"],
    }

    bert = create_model("bert_base")
    save_checkpoint(bert, tmp / "bert.pt", seed=0)
    bert_rows = []
    for impl, precision, options in [
        ("torch_eager", "fp16", {}),
        ("torch_cudagraph", "fp32", {}),
        ("torch_cudagraph", "fp16", {}),
        ("torch_compile", "fp16", {"precision_mode": "cast", "mode": "reduce-overhead"}),
    ]:
        bert_rows.append(run_engine(impl, tmp / "bert.pt", bert, 1, 128, precision, options, min_time))
        print(json.dumps(bert_rows[-1]), flush=True)
    results["bert_base_b1_s128"] = bert_rows
    fastest = min((r for r in bert_rows if r["status"] == "ok"), key=lambda r: r["p50_ms"])
    results["bert_best"] = {"engine": fastest["engine"], "precision": fastest["precision"], "p50_ms": fastest["p50_ms"]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps({"resnet50_best": results["resnet50_best"], "bert_best": results["bert_best"]}, indent=2))


if __name__ == "__main__":
    main()
