"""Every environment variable inferbench reads, declared once: its name, type, allowed values, default and
meaning, and the parser that turns its text into a typed value. A bad value is refused by name before any
job (a UserError naming the variable, the value and what is allowed): the workflow checks all of them as it
starts (workflow/rules/common.smk), the command line before its verb runs (inferbench.cli.main), and the
modules that use one read it here (``VARIABLE.read()``), so a value is understood the same everywhere.

An empty value counts as unset, for every variable: its default applies.

Read elsewhere and not declared here, since inferbench parses none of them: CUDA_VISIBLE_DEVICES (the GPU
pool's fallback, then set by a GPU job to its device: inferbench.machine.gpu_slots), XDG_RUNTIME_DIR (an
unusable one falls back to the temp directory: inferbench.core.fsutil), the other thread variables
(MKL_NUM_THREADS, ...) and SLURM_JOB_ID (kept as they are in a record's environment), MLFLOW_TRACKING_URI
and MLFLOW_EXPERIMENT_NAME (the MLflow exporter), KAGGLE_* (the downloads). Only the standard library is
imported here: the command line and the machine lock read these before anything imports torch.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from inferbench.core.errors import UserError

#: how long a value may be in a message (a partition's JSON can be long)
_SHOWN_CHARS = 120
#: a GPU as CUDA_VISIBLE_DEVICES names it: an index, or a GPU's or MIG instance's UUID. A lock file is
#: named after it, so no "/" (the old MIG-GPU-<uuid>/<gi>/<ci> form: use the MIG-<uuid> one)
_DEVICE = re.compile(r"\d+|(GPU|MIG)-[0-9A-Za-z-]+")
#: the words that turn a switch on or off
_ON, _OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
#: INFERBENCH_HOST_PARTITION's value once read: no partition (measurements stay machine-wide)
PARTITION_OFF: Literal["off"] = "off"
#: the most threads a job may be given; more only exhausts the machine
MAX_THREADS = 4096


@dataclass(frozen=True)
class Variable:
    """An environment variable of type ``kind``, which means ``meaning``: ``parse`` turns a non-empty value
    into the typed value or raises ValueError saying what is wrong with it; ``allowed`` says what is
    accepted and ``unset`` what happens without it (``default``: the value then), in the words a refusal
    uses."""

    name: str
    kind: str
    allowed: str
    unset: str
    meaning: str
    parse: Callable[[str], Any]
    default: Any = None

    def read(self, environ: Mapping[str, str] | None = None) -> Any:
        """The typed value (``default`` where unset or empty), or a UserError naming the variable, the value
        and what is allowed."""
        value = (os.environ if environ is None else environ).get(self.name)
        if value is None or not value.strip():
            return self.default
        try:
            return self.parse(value)
        except ValueError as error:
            shown = value if len(value) <= _SHOWN_CHARS else value[:_SHOWN_CHARS] + "..."
            raise UserError(
                f"{self.name}={shlex.quote(shown)}: {error}; allowed: {self.allowed} (unset: {self.unset})"
            ) from None


def _integer(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            number = int(text.strip())
        except ValueError:
            raise ValueError("is not a whole number") from None
        if not low <= number <= high:
            raise ValueError("is out of range")
        return number

    return parse


def _switch(text: str) -> bool:
    word = text.strip().lower()
    if word not in (*_ON, *_OFF):
        raise ValueError("is neither on nor off")
    return word in _ON


def _device(text: str) -> str:
    device = text.strip()
    if not _DEVICE.fullmatch(device):
        raise ValueError(f"{device!r} is not a GPU index or UUID")
    return device


def _devices(text: str) -> tuple[str, ...]:
    devices = tuple(_device(d) for d in text.split(",") if d.strip())
    if not devices:
        raise ValueError("names no GPU")
    repeated = sorted({d for d in devices if devices.count(d) > 1})
    if repeated:
        # two slots on one GPU would put two GPU jobs on it at once
        raise ValueError(f"{', '.join(repeated)} named more than once")
    return devices


def _lock_file(text: str) -> Path:
    path = Path(text)
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # a missing file, or one under a file: see below
        info = None
    except OSError as error:
        raise ValueError(f"cannot be looked at ({error.strerror})") from None
    if info is not None:
        if stat.S_ISLNK(info.st_mode):
            raise ValueError("is a symbolic link, which inferbench does not follow")
        if stat.S_ISDIR(info.st_mode):
            raise ValueError("is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("is not a regular file")
        return path
    # a missing file is created, with its folders: the nearest one that exists must be a folder
    folder = path.absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise ValueError(f"its folder {folder} is not a directory")
    return path


def _cpus(what: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        # pinning a process to no CPU fails every job ("Invalid argument")
        raise ValueError(f"{what} is not a non-empty list of CPUs")
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in value):
        raise ValueError(f"{what} names something other than a CPU number (0, 1, ...)")
    return tuple(value)


def _threads(text: str) -> int:
    levels = [_integer(1, MAX_THREADS)(level) for level in text.split(",")]
    return levels[0]  # the outermost level: the threads the job's own code starts


def parse_partition(text: str) -> tuple[dict[str, tuple[int, ...]], tuple[int, ...]] | Literal["off"]:
    """INFERBENCH_HOST_PARTITION: ``PARTITION_OFF`` for one of the words that turn it off, else the slots
    (device -> CPUs) and the shared CPUs of its JSON, each a non-empty list of CPU numbers."""
    if text.strip().lower() in (*_OFF, "none"):
        return PARTITION_OFF
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: JSON nested too deep
        raise ValueError("is neither off nor a partition's JSON") from None
    if not isinstance(data, dict) or set(data) != {"slots", "shared"} or not isinstance(data["slots"], dict):
        raise ValueError('is not an object {"slots": {<GPU>: [<CPU>, ...], ...}, "shared": [<CPU>, ...]}')
    # a slot's GPU is named as the pool named it (CUDA_VISIBLE_DEVICES's entries included): only compared
    slots = {d: _cpus(f"GPU {d}'s slot", cpus) for d, cpus in data["slots"].items()}
    return slots, _cpus("the shared CPUs", data["shared"])


LOCK_FILE = Variable(
    "INFERBENCH_LOCK_FILE",
    "path",
    "a path to a regular file (created 0600 if missing), not a directory or a symbolic link",
    "measure.lock in this user's own directory",
    "the machine lock's file, its queue beside it (the name plus .queue): runs pointing at one file never "
    "measure at the same time",
    _lock_file,
)
GPUS = Variable(
    "INFERBENCH_GPUS",
    "devices",
    "GPU indices or UUIDs (GPU-..., MIG-...) separated by commas, each once, e.g. 0,1",
    "the CUDA_VISIBLE_DEVICES the run started with, else the GPUs nvidia-smi lists",
    "the GPUs that the run's GPU jobs share out, one to each",
    _devices,
)
GPU_CLAIMED = Variable(
    "INFERBENCH_GPU_CLAIMED",
    "device",
    "the device a GPU job claimed (set by inferbench for the job's own processes)",
    "the process claims a GPU of the pool itself",
    "the GPU this process's job claimed, which its processes use",
    str.strip,  # whatever the pool named, CUDA_VISIBLE_DEVICES included: only compared, never a path
)
GPU_SLOT_CPUS = Variable(
    "INFERBENCH_GPU_SLOT_CPUS",
    "integer",
    "a whole number from 1 to 1024",
    "4, a GPU cell's threads",
    "cores each GPU measures on when the host is partitioned",
    _integer(1, 1024),
    4,
)
GPUS_MEASURE_AT_ONCE = Variable(
    "INFERBENCH_GPUS_MEASURE_AT_ONCE",
    "switch",
    "1, true, yes, on or 0, false, no, off",
    "off: one GPU's timed loop at a time",
    "every GPU times its calls under a lock of its own, at the same moment as the others",
    _switch,
    False,
)
HOST_PARTITION = Variable(
    "INFERBENCH_HOST_PARTITION",
    "partition",
    'off (or 0, false, no, none), or the JSON {"slots": {<GPU>: [<CPU>, ...]}, "shared": [<CPU>, ...]} '
    "with a non-empty list of CPU numbers in each",
    "planned once per run from the GPUs and CPUs, and handed to its jobs",
    "the host's partition: each GPU's measuring cores and the shared ones",
    parse_partition,
)
WARM_SOCKET = Variable(
    "INFERBENCH_WARM_SOCKET",
    "path",
    "the warm-start server's socket (set by the workflow for its jobs)",
    "a job runs its command itself",
    "where a job finds the warm-start server; one that does not answer is not used",
    str,
)
OMP_NUM_THREADS = Variable(
    "OMP_NUM_THREADS",
    "threads",
    f"a whole number from 1 to {MAX_THREADS}, or OpenMP's list of them per nesting level (4,2)",
    "the libraries' own choice; the workflow sets it to each job's threads",
    "the threads a job computes with (the first level), as Snakemake sets it for a rule's threads",
    _threads,
)

#: every variable, by name
VARIABLES: dict[str, Variable] = {
    v.name: v
    for v in (
        LOCK_FILE,
        GPUS,
        GPU_CLAIMED,
        GPU_SLOT_CPUS,
        GPUS_MEASURE_AT_ONCE,
        HOST_PARTITION,
        WARM_SOCKET,
        OMP_NUM_THREADS,
    )
}


def problems(environ: Mapping[str, str] | None = None) -> list[str]:
    """What is wrong with the environment's values of every variable, one line each (empty: nothing)."""
    found = []
    for variable in VARIABLES.values():
        try:
            variable.read(environ)
        except UserError as error:
            found.append(str(error))
    return found
