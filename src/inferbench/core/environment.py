"""The environment fingerprint stored with every record."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import inferbench

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "CUDA_VISIBLE_DEVICES")
LIBRARIES = (
    "torch",
    "timm",
    "transformers",
    "onnx",
    "onnxruntime",
    "onnxruntime-gpu",
    "openvino",
    "vllm",
    "numpy",
    "snakemake",
)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _libraries() -> dict[str, str]:
    versions = {name: v for name in LIBRARIES if (v := _version(name))}
    # onnxruntime and onnxruntime-gpu install the same module; where both are present, the one that
    # was imported is the one that ran: its own version is what "onnxruntime" means in a record
    module = sys.modules.get("onnxruntime")
    if module is not None and getattr(module, "__version__", None):
        versions["onnxruntime"] = module.__version__
    elif (importable := _importable_version("onnxruntime", ("onnxruntime-gpu", "onnxruntime"))) is not None:
        versions["onnxruntime"] = importable
    return versions


def _importable_version(module: str, distributions: tuple[str, ...]) -> str | None:
    """The version of the distribution whose copy of ``module`` an import would load."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    site = Path(spec.origin).resolve().parent.parent
    for name in distributions:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if Path(str(dist.locate_file(""))).resolve() == site:
            return dist.version
    return None


def _git(*args: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(
            ["git", *args], capture_output=True, text=True, timeout=5, cwd=Path(inferbench.__file__).parent
        )
    except (OSError, subprocess.SubprocessError):
        return None


@functools.cache
def _git_commit() -> str | None:
    out = _git("rev-parse", "HEAD")
    return (out.stdout.strip() or None) if out else None


@functools.cache
def _git_dirty() -> bool | None:
    """Whether tracked files differ from the commit: then the commit alone does not name the code."""
    out = _git("diff", "--quiet", "HEAD", "--")
    return None if out is None or out.returncode not in (0, 1) else out.returncode == 1


@functools.cache
def package_source_hash() -> str:
    """A short hash of every source file of the installed package (its path and bytes): it names the
    code that ran also where the git tree had uncommitted changes."""
    root = Path(inferbench.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def fingerprint(include_gpu: bool = True) -> dict[str, Any]:
    env: dict[str, Any] = {
        "hostname": platform.node(),
        "pid": os.getpid(),  # the process that measured (each of a cell's processes has its own)
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "affinity_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "inferbench": inferbench.__version__,
        "git_commit": _git_commit(),
        "git_dirty": _git_dirty(),
        "libraries": _libraries(),
        # thread settings the libraries read at start-up (an engine's own threads are in its record)
        "thread_env": {k: os.environ[k] for k in THREAD_VARIABLES if k in os.environ},
        # the cluster job this ran in, if any
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "gpu_name": None,
    }
    if include_gpu:
        import torch

        env["cuda_runtime"] = torch.version.cuda
        env["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            env |= {
                "gpu_name": props.name,
                "gpu_uuid": str(props.uuid),  # which physical device, whatever CUDA_VISIBLE_DEVICES renumbered
                "gpu_memory_mb": props.total_memory // 2**20,
                "gpu_capability": f"{props.major}.{props.minor}",
                "cudnn": torch.backends.cudnn.version(),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            }
            try:
                import pynvml

                pynvml.nvmlInit()
                env["gpu_driver"] = pynvml.nvmlSystemGetDriverVersion()
            except Exception:  # NVML is optional (the `gpu` extra)
                env["gpu_driver"] = None
    return env
