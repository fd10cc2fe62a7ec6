"""Engine implementations by name, with what they can run, without importing any of them.

Heavy libraries (torch, onnxruntime, tensorrt) are imported only when an engine class is loaded,
so the grid and the Snakefile can reason about engines in milliseconds.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from inferbench.engines.base import Engine


@dataclass(frozen=True)
class EngineInfo:
    target: str  # "module:Class"
    devices: tuple[str, ...]
    precisions: tuple[str, ...]
    artifact: Literal["checkpoint", "onnx", "none"]  # what the engine is prepared from
    description: str


ENGINES: dict[str, EngineInfo] = {
    "noop": EngineInfo(
        "inferbench.engines.noop:NoopEngine",
        ("cpu", "cuda"),
        ("fp32", "fp16", "bf16"),
        "none",
        "returns a constant: measures the harness's own overhead",
    ),
    "torch_eager": EngineInfo(
        "inferbench.engines.torch_eager:TorchEager",
        ("cpu", "cuda"),
        ("fp32", "fp16", "bf16"),
        "checkpoint",
        "PyTorch eager; fp16/bf16 through autocast",
    ),
    "ort_cpu": EngineInfo(
        "inferbench.engines.ort:OrtCpu",
        ("cpu",),
        ("fp32",),
        "onnx",
        "ONNX Runtime, CPU execution provider, on the simplified ONNX export",
    ),
}


def engine_info(impl: str) -> EngineInfo:
    try:
        return ENGINES[impl]
    except KeyError:
        raise KeyError(f"unknown engine implementation {impl!r}; known: {sorted(ENGINES)}") from None


def load_engine_class(impl: str) -> type[Engine]:
    module_name, class_name = engine_info(impl).target.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def code_version(impl: str) -> str:
    """A short hash of the engine's module and the shared measuring code, without importing them.

    Snakemake does not see edits in imported modules; a rule param carrying this hash makes an edit
    of one engine re-run that engine's cells and nothing else.
    """
    module_name = engine_info(impl).target.split(":")[0]
    files = [module_name, "inferbench.engines.base", "inferbench.measure.timing", "inferbench.cell_runner"]
    digest = hashlib.sha256()
    for name in files:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise ModuleNotFoundError(name)
        digest.update(Path(spec.origin).read_bytes())
    return digest.hexdigest()[:12]
