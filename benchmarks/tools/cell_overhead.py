"""Where a cell's seconds go before measuring starts (not a test): imports, CUDA start-up, model build,
weight loading. Each cell is its own process, so these costs are paid per cell.

    python benchmarks/tools/cell_overhead.py --workload bert_base --device cuda [--out overhead.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

STEPS: dict[str, float] = {}


def step(name: str, start: float) -> float:
    now = time.perf_counter()
    STEPS[name] = round(now - start, 3)
    return now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", default="bert_base")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    t = time.perf_counter()
    import torch

    t = step("import torch", t)
    if args.device == "cuda":
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        t = step("cuda context", t)
    from inferbench.models import registry

    registry._load_builders()
    t = step("import inferbench builders", t)
    if args.workload.startswith(("bert", "distil")):
        import transformers  # noqa: F401

        t = step("import transformers", t)
    elif args.workload in ("resnet50", "vit_b16"):
        import timm  # noqa: F401

        t = step("import timm", t)
    spec = registry.create_model(args.workload)
    t = step("build on cpu (random init)", t)
    with torch.device(args.device):
        registry.create_model(args.workload)
    t = step(f"build on {args.device} (random init)", t)
    path = Path(tempfile.mkdtemp()) / "m.pt"
    registry.save_checkpoint(spec, path, seed=0)
    t = time.perf_counter()
    registry.load_checkpoint(path, args.device)
    step(f"load_checkpoint on {args.device} (build + weights)", t)
    t = time.perf_counter()
    payload = torch.load(path, map_location=args.device, weights_only=True)
    step("torch.load weights only", t)
    del payload
    result = {"workload": args.workload, "device": args.device, "seconds": STEPS}
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
