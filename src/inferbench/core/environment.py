"""The environment fingerprint stored with every record."""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import inferbench

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "CUDA_VISIBLE_DEVICES")
#: what every record names besides its engine's own libraries: the harness's
HARNESS_LIBRARIES = ("numpy", "snakemake")
#: distributions that install a module under another name, the GPU build first
DISTRIBUTIONS = {
    "onnxruntime": ("onnxruntime-gpu", "onnxruntime"),
    "onnxruntime_genai": ("onnxruntime-genai-cuda", "onnxruntime-genai"),
    "tensorrt": ("tensorrt", "tensorrt-cu12", "tensorrt-cu13"),
}


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


def _libraries(modules: Iterable[str]) -> dict[str, str]:
    """The versions of the harness's libraries and of ``modules`` (by module name), those installed."""
    versions = {name: v for name in HARNESS_LIBRARIES if (v := _version(name))}
    for module in sorted(set(modules)):
        if module not in versions and (found := _module_version(module)):
            versions[module] = found
    # onnxruntime and onnxruntime-gpu install the same module; where both are present, the one that
    # was imported is the one that ran: its own version is what "onnxruntime" means in a record
    if "onnxruntime" in versions:
        module = sys.modules.get("onnxruntime")
        if module is not None and getattr(module, "__version__", None):
            versions["onnxruntime"] = module.__version__
        elif (importable := _importable_version("onnxruntime", ("onnxruntime-gpu", "onnxruntime"))) is not None:
            versions["onnxruntime"] = importable
    return versions


def engine_libraries(info: Any) -> tuple[str, ...]:
    """The top-level modules an engine (an ``EngineInfo``) uses: those it declares, and the third-party
    ones its own module imports. vLLM is imported late, so only the second kind names it."""
    return tuple(sorted({*info.libraries, *_imported_modules(info.module)}))


@functools.cache
def _imported_modules(module: str) -> frozenset[str]:
    """The third-party top-level modules ``module``'s source imports, read without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return frozenset()
    try:
        tree = ast.parse(Path(spec.origin).read_text())
    except (OSError, SyntaxError, UnicodeDecodeError):  # installed without its source: its declaration only
        return frozenset()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return frozenset(n for n in names if n not in sys.stdlib_module_names and n != "inferbench")


def _module_version(module: str) -> str | None:
    """The version of the distribution that installs ``module``, where the two names may differ."""
    installed = [name for name in DISTRIBUTIONS.get(module, (module,)) if _version(name)]
    if len(installed) > 1:  # two builds of one module: the copy an import would load ran
        return _importable_version(module, tuple(installed)) or _version(installed[0])
    if installed:
        return _version(installed[0])
    if importlib.util.find_spec(module) is None:
        return None
    # an unmapped module that imports: ask every distribution (slow, so only here)
    owners = importlib.metadata.packages_distributions().get(module, [])
    return _version(owners[0]) if owners else None


def libraries_column(versions: dict[str, str] | None) -> str | None:
    """A record's library versions as one summary field: ``name=version;...``, sorted."""
    return ";".join(f"{name}={version}" for name, version in sorted((versions or {}).items())) or None


def parse_libraries(text: Any) -> dict[str, str]:
    """The versions in a ``libraries`` summary field (empty where the field is missing)."""
    if not isinstance(text, str):
        return {}
    pairs = (part.split("=", 1) for part in text.split(";") if "=" in part)
    return {name.strip(): version.strip() for name, version in pairs}


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
def _in_checkout() -> bool:
    """Whether git tracks the package's own files: a copy without ``.git`` inside another repository
    (a home folder under git) would otherwise name that repository's commit."""
    out = _git("ls-files", "--error-unmatch", "--", Path(inferbench.__file__).name)
    return out is not None and out.returncode == 0


@functools.cache
def _git_commit() -> str | None:
    """The checkout's commit; None where the package is not in a git checkout."""
    out = _git("rev-parse", "HEAD") if _in_checkout() else None
    return (out.stdout.strip() or None) if out and out.returncode == 0 else None


@functools.cache
def _git_dirty() -> bool | None:
    """Whether the checkout differs from its commit: a tracked file changed, or a file in the package that
    git does not track (new code the commit lacks). None where there is no commit to differ from."""
    if not _in_checkout():
        return None
    changed = _git("diff", "--quiet", "HEAD", "--")
    if changed is None or changed.returncode not in (0, 1):
        return None
    untracked = _git("ls-files", "--others", "--exclude-standard", "--", ".")
    return changed.returncode == 1 or bool(untracked and untracked.stdout.strip())


@functools.cache
def package_source_hash() -> str:
    """A short hash of every source file of the installed package (its path and bytes): it names the
    code that ran also where the git tree had uncommitted changes."""
    root = Path(inferbench.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def fingerprint(include_gpu: bool = True, libraries: Iterable[str] = ()) -> dict[str, Any]:
    """Where and with what a record was made: the host, Python, the package's commit, and the versions of
    ``libraries`` (module names: what the cell's engine uses, inferbench.core.environment.engine_libraries)
    beside the harness's own."""
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
        "libraries": _libraries(libraries),
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
