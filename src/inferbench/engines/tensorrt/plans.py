"""Where TensorRT plans are cached and whether TensorRT can run here: light (no TensorRT, torch only
where a GPU is asked about), so the Snakefile names a cell's plan without importing either.

A plan is only valid for the GPU and TensorRT that built it: plans live under a folder named after
both (``results/engines/tensorrt/<gpu>-trt<version>/``), one per engine variant (its build options),
workload, precision and shape. Builds share a timing cache in that folder, so later builds skip
kernel timing.
"""

from __future__ import annotations

import ctypes
import importlib.util
import re
from pathlib import Path

from inferbench.engines.base import cuda_unavailable_reason
from inferbench.engines.tensorrt import PRECISIONS

ENGINE_ROOT = Path("results/engines/tensorrt")


def tensorrt_unavailable_reason() -> str | None:
    """TensorRT itself (libnvinfer), which ONNX Runtime's provider and the native engine both need."""
    if importlib.util.find_spec("tensorrt") is not None:
        return None
    for name in ("libnvinfer.so.10", "libnvinfer.so.8", "libnvinfer.so"):
        try:
            ctypes.CDLL(name)
            return None
        except OSError:
            continue
    return "TensorRT is not installed here (no `tensorrt` Python package and no libnvinfer shared library)"


def native_unavailable_reason(device: str, precision: str) -> str | None:
    """Why the native engine cannot run a cell here, or None."""
    if device != "cuda":
        return "TensorRT runs on NVIDIA GPUs only"
    if precision not in PRECISIONS:
        return f"TensorRT engines here are built for {', '.join(PRECISIONS)}, not {precision}"
    if importlib.util.find_spec("tensorrt") is None:
        return "the `tensorrt` Python package is not installed (pip install tensorrt, on a machine with an NVIDIA GPU)"
    return cuda_unavailable_reason()


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


def target_name(gpu_name: str, trt_version: str) -> str:
    """The cache folder of one GPU model and TensorRT version, e.g. ``nvidia-h100-80gb-hbm3-trt10.9.0``."""
    return f"{_slug(gpu_name)}-trt{_slug(trt_version)}"


def current_target() -> str | None:
    """The cache folder for this machine's first GPU and installed TensorRT, or None where either is missing."""
    if importlib.util.find_spec("tensorrt") is None:
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        trt_version = version("tensorrt")
    except PackageNotFoundError:
        import tensorrt

        trt_version = tensorrt.__version__
    import torch

    if not torch.cuda.is_available():
        return None
    return target_name(torch.cuda.get_device_name(0), trt_version)


def plan_path(
    target: str, variant: str, workload: str, precision: str, batch: int, seq: int, root: Path = ENGINE_ROOT
) -> Path:
    """Where one engine is cached: per GPU and TensorRT version, engine variant (its build options),
    workload, precision and shape."""
    return root / target / variant / f"{workload}.{precision}.b{batch}-s{seq}.plan"


def timing_cache_path(plan: str | Path) -> Path:
    """One timing cache per target folder (GPU x TensorRT version), shared by all its builds."""
    return Path(plan).parent.parent / "timing.cache"


def build_report_path(plan: str | Path) -> Path:
    return Path(plan).with_suffix(".json")
