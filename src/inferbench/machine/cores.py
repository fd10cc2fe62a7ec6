"""Which CPUs ``measure.cpu_affinity: auto`` pins a measurement to: one logical CPU per physical core,
the highest-numbered cores first (the first cores take the system's interrupts), chosen from the CPUs
the process may use. The choice depends only on those CPUs and the topology, so every process of a run
that may use the same CPUs gets the same cores.

Only the standard library is imported here.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

#: where Linux describes each logical CPU's core and package
SYS_CPUS = Path("/sys/devices/system/cpu")


class Choice(NamedTuple):
    """The CPUs chosen (empty: leave it unpinned) and, for the record, what they are or why none."""

    cpus: tuple[int, ...]
    note: str


def parse_cpulist(text: str) -> set[int]:
    """``0-3,8,10-11`` -> {0, 1, 2, 3, 8, 10, 11} (the kernel's list format)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if part:
            low, _, high = part.partition("-")
            cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def read_topology(cpus: Iterable[int], root: Path = SYS_CPUS) -> dict[int, frozenset[int]]:
    """Each of ``cpus`` -> the logical CPUs of its physical core, itself included: its
    ``thread_siblings_list``, else the CPUs of ``cpus`` with its ``physical_package_id`` and ``core_id``,
    else itself alone (no topology in sysfs: each logical CPU counts as a core)."""
    cpus = sorted(set(cpus))
    siblings: dict[int, frozenset[int]] = {}
    place: dict[int, tuple[str, str]] = {}
    for cpu in cpus:
        topology = root / f"cpu{cpu}" / "topology"
        try:
            siblings[cpu] = frozenset(parse_cpulist((topology / "thread_siblings_list").read_text())) | {cpu}
            continue
        except (OSError, ValueError):
            pass
        try:
            package, core = (topology / "physical_package_id").read_text(), (topology / "core_id").read_text()
            place[cpu] = (package.strip(), core.strip())
        except OSError:
            siblings[cpu] = frozenset({cpu})
    for cpu, where in place.items():
        siblings[cpu] = frozenset(c for c, w in place.items() if w == where)
    return siblings


def choose_cores(available: Iterable[int], topology: Mapping[int, Iterable[int]], count: int) -> Choice:
    """``count`` CPUs of ``available``: one logical CPU (its lowest-numbered available one) on each of
    ``count`` physical cores, the highest-numbered cores first. ``topology`` maps a CPU to the logical
    CPUs of its core (a CPU it leaves out is a core of its own). Fewer physical cores than ``count``:
    distinct logical CPUs, one per core first; fewer CPUs than ``count``: none, and the note says why."""
    free = set(available)
    if count < 1:
        raise ValueError(f"cannot pin to {count} CPUs")
    if len(free) < count:
        return Choice((), f"unpinned: {count} threads but {len(free)} CPUs this process may use")
    # each core by the lowest-numbered of its available CPUs, which stands for it
    first = {cpu: min((set(topology.get(cpu, ())) & free) | {cpu}) for cpu in free}
    cores = sorted(set(first.values()), reverse=True)
    if len(cores) >= count:
        return Choice(tuple(sorted(cores[:count])), f"auto: {count} physical cores, one logical CPU each")
    # hyperthreads of the same cores: still distinct CPUs, the cores' first CPUs before their siblings
    rest = sorted(free - set(cores), reverse=True)
    chosen = (cores + rest)[:count]
    return Choice(
        tuple(sorted(chosen)), f"auto: {count} logical CPUs, as this process may use only {len(cores)} physical cores"
    )


def auto_cores(count: int) -> Choice:
    """``choose_cores`` for this process: from the CPUs it may use now and the topology sysfs gives."""
    if not hasattr(os, "sched_getaffinity"):
        return Choice((), "unpinned: no CPU affinity on this OS")
    available = os.sched_getaffinity(0)
    return choose_cores(available, read_topology(available), count)
