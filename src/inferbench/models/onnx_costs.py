"""What making an ONNX file cost, read from the reports the workflow writes beside it: part of the cold
start of every engine prepared from that file (ONNX Runtime, OpenVINO)."""

from __future__ import annotations

import json
from pathlib import Path


def onnx_build_costs(onnx: str | Path) -> dict[str, float]:
    """Seconds spent making ``onnx`` (export, onnxsim or the fusions, and the fp16/int8 conversion of a
    variant), read from the reports the workflow writes beside it: they are part of the cold start of a cell
    prepared from it. ``<workload>[.fused][.<variant>].onnx``: the plain export reports in ``<workload>.export.json``,
    every other file in the file's name with ``.json``."""
    onnx = Path(onnx)
    workload, *rest = onnx.name.removesuffix(".onnx").split(".")
    fused = rest[:1] == ["fused"]
    base = onnx.parent / (f"{workload}.fused.json" if fused else f"{workload}.export.json")
    base_keys = {"export_s": "export", "fuse_s" if fused else "simplify_s": "fuse" if fused else "simplify"}
    reports = [(base, base_keys)]
    if len(rest) > int(fused):  # a precision variant of the export
        reports.append((onnx.with_suffix(".json"), {"convert_s": "convert"}))
    costs: dict[str, float] = {}
    for path, keys in reports:
        if path.exists():
            report = json.loads(path.read_text())
            costs |= {name: float(report[key]) for key, name in keys.items() if report.get(key) is not None}
    return costs
