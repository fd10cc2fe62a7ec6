"""Several GPUs working at once, each measuring on CPU cores of its own.

On a machine with one GPU (or none) every measurement holds the machine lock exclusively: nothing else
of the workflow runs meanwhile (inferbench.machine.lock). With two GPUs or more that serialises the GPUs'
jobs: a second GPU only overlapped preparation (docs/results/h200x2/multi-gpu). So
with several GPUs the host is partitioned, and a GPU's timed loop no longer waits for the other GPUs'
preparation:

- the host is partitioned once per run: each GPU of the pool (inferbench.machine.gpu_slots) gets a slot of
  ``INFERBENCH_GPU_SLOT_CPUS`` cores (4: a GPU cell's threads), from its NUMA node where the driver says
  which CPUs are local to it, the highest-numbered first (the first cores take the system's
  interrupts); the cores left over are shared by everything else. Too few cores for a slot per GPU and
  as many again for the rest: no partition, measurements stay exclusive machine-wide.
- a GPU cell's measuring process times its calls (warm-up included) on its GPU's slot, holding the GPUs'
  measuring lock exclusively and the machine lock shared: one GPU's timed loop at a time, while the
  other GPUs' jobs set up beside it on the shared cores. The timed loops are a small part of the
  work; the rest overlaps (docs/results/h200x2/multi-gpu-partitioned). With
  ``INFERBENCH_GPUS_MEASURE_AT_ONCE=1`` each GPU has a measuring lock of its own and the GPUs time their
  calls at the same moment. Not by default: on multi-GPU VMs a launch-bound loop on one GPU can run
  slower while the same loop runs on the other GPU from the other slot, with the measuring core's own
  speed unchanged: something the guest's cores do not divide. Memory copies and compiles on the shared
  cores slow it too, which timing one GPU at a time does not prevent (figures:
  docs/results/h200x2/multi-gpu-partitioned);
- everything else runs on the shared cores, away from the slots: every other job process (preparation,
  compiling) and the GPU cells' own set-up (loading, torch.compile's workers, capturing), which a
  few-core slot would slow by much; a CPU cell still measures alone, with the machine lock exclusive;
- the partition travels to a job's processes in ``INFERBENCH_HOST_PARTITION`` (JSON; ``off``, ``0``,
  ``false``, ``no`` or ``none`` turns it off; empty counts as unset), so that every process of a run reads
  the same one. A bad value is refused by name before any job (inferbench.core.env_vars).

Only the standard library is imported here.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferbench.core.env_vars import (
    GPU_CLAIMED,
    GPU_SLOT_CPUS,
    GPUS_MEASURE_AT_ONCE,
    HOST_PARTITION,
    PARTITION_OFF,
    parse_partition,
)
from inferbench.machine.cores import auto_cores, parse_cpulist
from inferbench.machine.gpu_slots import gpu_pool, query_gpus
from inferbench.machine.lock import MachineLock, open_lock_file

PARTITION_ENV = HOST_PARTITION.name
SLOT_CPUS_ENV = GPU_SLOT_CPUS.name
#: on (``1``): every GPU times its calls under a lock of its own, at the same moment as the others
AT_ONCE_ENV = GPUS_MEASURE_AT_ONCE.name

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HostPartition:
    """Each GPU's measuring cores (by its pool entry, as CUDA_VISIBLE_DEVICES names it), and the rest."""

    slots: dict[str, tuple[int, ...]]
    shared: tuple[int, ...]

    def to_json(self) -> str:
        return json.dumps({"slots": {d: list(c) for d, c in self.slots.items()}, "shared": list(self.shared)})

    @classmethod
    def from_json(cls, text: str) -> HostPartition:
        parsed = parse_partition(text)  # the one parser of INFERBENCH_HOST_PARTITION's values
        if parsed == PARTITION_OFF:
            raise ValueError(f"{text!r} turns the partition off: there is no partition to read")
        return cls(*parsed)


def plan_partition(
    cpus: Iterable[int], devices: Sequence[str], per_slot: int, local: dict[str, set[int]] | None = None
) -> HostPartition | None:
    """A slot of ``per_slot`` cores for each of ``devices`` (from the cores ``local`` to it where known and
    free, then from any free one, highest-numbered first), the rest shared; None with fewer than two
    devices or fewer than ``per_slot`` cores left shared (then measurements stay machine-wide)."""
    free = sorted(set(cpus), reverse=True)
    if len(devices) < 2 or per_slot < 1 or len(free) < per_slot * (len(devices) + 1):
        return None
    slots: dict[str, tuple[int, ...]] = {}
    for device in devices:
        near = [c for c in free if c in (local or {}).get(device, set())]
        chosen = (near + [c for c in free if c not in near])[:per_slot]
        slots[device] = tuple(sorted(chosen))
        free = [c for c in free if c not in chosen]
    return HostPartition(slots, tuple(sorted(free)))


def numa_local_cpus(devices: Sequence[str]) -> dict[str, set[int]]:
    """The CPUs local to each device (its PCI device's ``local_cpulist``), where the driver says; empty
    where ``nvidia-smi`` or sysfs does not answer."""
    local = {}
    for index, bus in query_gpus("index", "pci.bus_id"):
        # nvidia-smi spells the domain with 8 digits, sysfs with 4: 00000000:1B:00.0 -> 0000:1b:00.0
        path = Path("/sys/bus/pci/devices") / bus.lower()[-12:] / "local_cpulist"
        if index in devices and path.exists():
            local[index] = parse_cpulist(path.read_text())
    return local


def current_partition() -> HostPartition | None:
    """This run's partition (see the module's docstring): from ``INFERBENCH_HOST_PARTITION`` where a parent
    process set it, else planned here from the GPU pool and this process's CPUs and passed on to children."""
    given = HOST_PARTITION.read()  # off (or 0, false, no, none), or a partition; empty: as if unset
    if given is not None:
        return None if given == PARTITION_OFF else HostPartition(*given)
    pool = gpu_pool()
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    per_slot = GPU_SLOT_CPUS.read()
    partition = plan_partition(cpus, pool, per_slot, numa_local_cpus(pool) if len(pool) > 1 else None)
    if partition is None and len(pool) > 1:
        log.warning(
            "%d GPUs but %d CPUs: too few for %d cores per GPU and as many for the rest; measurements stay "
            "exclusive machine-wide (%s sets the cores per GPU)",
            len(pool),
            len(cpus),
            per_slot,
            SLOT_CPUS_ENV,
        )
    os.environ[PARTITION_ENV] = partition.to_json() if partition else PARTITION_OFF
    return partition


def pin_process(cpus: Iterable[int]) -> None:
    """Every thread of this process (and the processes and threads it starts later) onto ``cpus``: Linux
    sets a thread's affinity, and libraries may have started theirs already."""
    cpus = set(cpus)
    tasks = Path("/proc/self/task")
    for tid in [int(t.name) for t in tasks.iterdir()] if tasks.exists() else [0]:
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:  # a thread that ended meanwhile
            continue


def keep_to_shared_cores() -> tuple[int, ...] | None:
    """Move this process (and the processes it starts) onto the shared cores, off every GPU's slot, where
    the run is partitioned; return them (None: not partitioned, nothing changed)."""
    partition = current_partition()
    if partition is None or not hasattr(os, "sched_setaffinity"):
        return None
    pin_process(partition.shared)
    return partition.shared


@contextmanager
def measuring(
    lock: MachineLock, device: str, cpu_affinity: str | Sequence[int] | None = None, launches_here: bool = True
) -> Iterator[dict[str, Any]]:
    """Hold what a timed loop needs for ``device``: on a partitioned machine a GPU cell holds the GPUs'
    measuring lock (its own GPU's with ``INFERBENCH_GPUS_MEASURE_AT_ONCE=1``) exclusively and keeps the
    machine lock shared (the other GPUs' jobs set up meanwhile on the shared cores, and this process
    runs on its slot for the block; a CPU cell waits for all of them); otherwise the machine lock
    exclusively, and with ``cpu_affinity`` ``auto`` a GPU cell's calling thread runs on one physical
    core for the block (``launches_here``: False where threads started in the block launch the work, as
    a LoadGen server's; they would inherit that one core). Yields what was held, for the record: ``lock``
    (``machine``, ``gpus``: one GPU at a time, or ``gpu <device>``), the ``cpus`` the timed loop ran on
    and, where this pinned something, ``pinning`` (what, or why not)."""
    partition = current_partition() if device == "cuda" else None
    gpu = GPU_CLAIMED.read()  # this process's GPU, as its job claimed it
    slot = partition.slots.get(gpu) if partition is not None and gpu is not None else None
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    if slot is None or cpus is None:
        with lock.exclusively(), _launching_thread_pinned(device, cpu_affinity, launches_here, cpus) as held:
            yield {"lock": "machine", **held}
        return
    # the partition placed this process on the shared cores; one pinned elsewhere (measure.cpu_affinity)
    # stays where it was put
    move = set(cpus) == set(partition.shared)
    at_once = GPUS_MEASURE_AT_ONCE.read()
    held = f"gpu {gpu}" if at_once else "gpus"
    fd = open_lock_file(_measuring_lock_path(lock, held))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if move:
            pin_process(slot)  # the timed loop on this GPU's cores; the set-up before ran on the shared ones
        try:
            pinning = {"pinning": "gpu slot: the process on its GPU's cores while timing"} if move else {}
            yield {"lock": held, "cpus": sorted(slot) if move else cpus, **pinning}
        finally:
            if move:
                pin_process(cpus)
    finally:
        os.close(fd)  # closing drops the lock


def _measuring_lock_path(lock: MachineLock, held: str) -> Path:
    """The file of a GPU measuring lock (``gpus``: one GPU at a time; ``gpu <device>``: that GPU's own)."""
    return lock.path.parent / f"inferbench-measure-{held.replace(' ', '-')}.lock"


@contextmanager
def gpus_not_measuring(lock: MachineLock) -> Iterator[None]:
    """No GPU times its calls during the block. Where the run is not partitioned, the machine lock held
    shared already keeps every timed loop out; where it is, a GPU cell times under a measuring lock and the
    machine lock shared, so this holds every measuring lock shared too: for work that runs kernels on a GPU
    it has not claimed (a priming job's compile)."""
    partition = current_partition()
    if partition is None:
        yield
        return
    names = ["gpus", *(f"gpu {device}" for device in partition.slots)]
    fds = [open_lock_file(_measuring_lock_path(lock, name)) for name in names]
    try:
        for fd in fds:
            fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        for fd in fds:
            os.close(fd)  # closing drops the lock


@contextmanager
def _launching_thread_pinned(
    device: str, cpu_affinity: str | Sequence[int] | None, launches_here: bool, cpus: list[int] | None
) -> Iterator[dict[str, Any]]:
    """A GPU cell's calling thread on one physical core for the block, with ``cpu_affinity`` ``auto``:
    the thread that launches the kernels, so that the OS does not move it mid-loop. Only that thread
    and only then: pinning a whole process did not make host-bound cells repeatable
    (docs/results/h100/launch_jitter), so set-up and the process's other threads keep all their cores.
    Yields ``cpus`` (the calling thread's meanwhile) and ``pinning``."""
    if device != "cuda" or cpu_affinity != "auto":
        yield {"cpus": cpus}  # a CPU cell was pinned as a whole before it loaded (scenarios.run.pin_cpus)
        return
    if not launches_here:
        yield {"cpus": cpus, "pinning": "unpinned: threads started while timing launch the work"}
        return
    chosen = auto_cores(1)
    if not chosen.cpus or cpus is None:
        yield {"cpus": cpus, "pinning": chosen.note}
        return
    os.sched_setaffinity(0, chosen.cpus)  # 0: the calling thread (Linux sets a thread's affinity)
    try:
        yield {"cpus": list(chosen.cpus), "pinning": "auto: the launching thread on one physical core while timing"}
    finally:
        os.sched_setaffinity(0, cpus)
