"""What the host did while a cell measured: the machine's CPU time split from /proc/stat (steal =
time the hypervisor gave this VM's vCPUs to someone else), this process's context switches and CPU time,
and the CPU time of the processes it started (vLLM's engine core issues every step from one).

These explain spread between runs that the within-run statistics cannot: a launch-bound GPU cell is
as fast as the host thread that issues its kernels. A window in which other work held the host's cores
(``contended``) timed the contention, not the engine: each parallel region waits for a scheduler slice on
the core the other work holds (docs/measuring.md, "Other work on the host"). Where the process is pinned,
only its own cores count: work on the host's other cores takes nothing from it.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path
from typing import Any

#: the columns of the aggregate `cpu` line of /proc/stat, in jiffies
PROC_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def parse_proc_stat(text: str, cpus: frozenset[int] | None = None) -> dict[str, int]:
    """The aggregate ``cpu`` line of /proc/stat as named counters; with ``cpus``, the sum of those CPUs'
    own lines (``cpuN``) instead."""
    totals: dict[str, int] | None = None
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or (cpus is None) != (name == "cpu"):
            continue
        if cpus is not None and not (name[3:].isdigit() and int(name[3:]) in cpus):
            continue
        values = dict(zip(PROC_STAT_FIELDS, (int(v) for v in rest.split()[: len(PROC_STAT_FIELDS)]), strict=False))
        totals = values if totals is None else {k: totals.get(k, 0) + v for k, v in values.items()}
    if totals is None:
        raise ValueError(f"no `cpu` line in /proc/stat{f' for CPUs {sorted(cpus)}' if cpus is not None else ''}")
    return totals


def _read_proc_stat(cpus: frozenset[int] | None) -> tuple[dict[str, int] | None, dict[str, int] | None]:
    """The host's counters and, with ``cpus``, those of these CPUs, from one read of /proc/stat (None: not Linux)."""
    try:
        text = Path("/proc/stat").read_text()
        return parse_proc_stat(text), parse_proc_stat(text, cpus) if cpus else None
    except (OSError, ValueError):  # not Linux
        return None, None


def own_cpus() -> frozenset[int] | None:
    """The CPUs this process's threads may run on (all of them together), where they are kept to some of the
    host's (a pinned CPU cell); None where some thread may run on every CPU (a GPU cell pins only its launching
    thread), or the platform cannot say."""
    allowed: set[int] = set()
    try:
        for task in Path("/proc/self/task").iterdir():
            try:
                allowed |= os.sched_getaffinity(int(task.name))
            except ProcessLookupError:  # a thread that ended meanwhile
                continue
    except (AttributeError, OSError, ValueError):
        return None
    return frozenset(allowed) if allowed and len(allowed) < (os.cpu_count() or 0) else None


def parse_pid_stat(text: str) -> tuple[int, float]:
    """A /proc/<pid>/stat line's parent pid and CPU time (user + system, every thread), in seconds."""
    fields = text[text.rindex(")") + 2 :].split()  # the command name, in parentheses, may hold spaces
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descendants_cpu_s(table: dict[int, tuple[int, float]], root: int) -> dict[int, float]:
    """Each descendant of ``root`` in a {pid: (parent pid, CPU s)} table, with its CPU seconds."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found, todo = {}, list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        found[pid] = table[pid][1]
        todo += children.get(pid, ())
    return found


def read_descendants_cpu_s() -> dict[int, float] | None:
    """The CPU seconds of each process this one started, and theirs, from /proc; None where it cannot be read."""
    table = {}
    try:
        stats = list(Path("/proc").glob("[0-9]*/stat"))
    except OSError:
        return None
    for stat in stats:
        try:
            table[int(stat.parent.name)] = parse_pid_stat(stat.read_text())
        except (OSError, ValueError, IndexError):  # a process that ended meanwhile
            continue
    return descendants_cpu_s(table, os.getpid()) if table else None


#: a window is contended where work other than the cell's held at least this many cores on average while
#: fewer than this many of the host's cores stood idle: the cell's threads then waited for a core
CONTENDED_CORES = 0.5


def window_summary(
    before: dict[str, int] | None,
    after: dict[str, int] | None,
    usage_before: Any,
    usage_after: Any,
    children_before: dict[int, float] | None = None,
    children_after: dict[int, float] | None = None,
    wall_s: float | None = None,
    mine: tuple[dict[str, int] | None, dict[str, int] | None] | None = None,
) -> dict[str, Any]:
    """Steal and busy shares of the machine's CPU time in the window, this process's context switches
    (involuntary ones: the scheduler took the CPU away) and CPU time, and that of the processes it started
    that lived through the window (None where there were none). Over ``wall_s`` seconds: the cores other work
    held on average (busy CPU time less this process's and its children's), the cores left idle, and whether
    the window was ``contended`` (``CONTENDED_CORES``). ``mine``: the counters of the CPUs the process was kept
    to (pinned), at both ends: then those three are of its own cores, and other work on the rest of the host
    contends nothing; ``on_cpus`` says which it was."""
    cpu_s = [u.ru_utime + u.ru_stime for u in (usage_before, usage_after)]
    lived = (children_before or {}).keys() & (children_after or {}).keys()
    out: dict[str, Any] = {
        "voluntary_switches": usage_after.ru_nvcsw - usage_before.ru_nvcsw,
        "involuntary_switches": usage_after.ru_nivcsw - usage_before.ru_nivcsw,
        "process_cpu_s": cpu_s[1] - cpu_s[0],
        "children_cpu_s": sum(children_after[p] - children_before[p] for p in lived) if lived else None,
        "steal_pct": None,
        "busy_pct": None,
        "others_cores": None,
        "idle_cores": None,
        "contended": None,
    }
    host = _delta(before, after) if before and after else None
    if host and (total := sum(host.values())) > 0:
        idle = host["idle"] + host["iowait"]
        out["steal_pct"] = 100.0 * host["steal"] / total
        out["busy_pct"] = 100.0 * (total - idle) / total
    own = _delta(*mine) if mine and mine[0] and mine[1] else None
    out["on_cpus"] = "own" if own else "host"
    watched = own or host
    if watched and sum(watched.values()) > 0 and wall_s:
        tick = os.sysconf("SC_CLK_TCK")
        idle = watched["idle"] + watched["iowait"]
        own_s = out["process_cpu_s"] + (out["children_cpu_s"] or 0.0)
        others = max(0.0, ((sum(watched.values()) - idle - watched["steal"]) / tick - own_s) / wall_s)
        out["others_cores"] = others
        out["idle_cores"] = idle / tick / wall_s
        out["contended"] = others >= CONTENDED_CORES and out["idle_cores"] < CONTENDED_CORES
    return out


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in PROC_STAT_FIELDS}


class HostWindow:
    """Context manager: reads the counters at both ends; ``summary`` after it closes."""

    def __enter__(self) -> HostWindow:
        self._cpus = own_cpus()  # pinned: other work counts as contention only on these
        self._children = read_descendants_cpu_s()
        (self._stat, self._mine), self._usage = _read_proc_stat(self._cpus), resource.getrusage(resource.RUSAGE_SELF)
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        (stat, mine_after), usage = _read_proc_stat(self._cpus), resource.getrusage(resource.RUSAGE_SELF)
        mine = (self._mine, mine_after) if self._cpus else None
        wall_s = time.perf_counter() - self._started
        self.summary = window_summary(
            self._stat, stat, self._usage, usage, self._children, read_descendants_cpu_s(), wall_s, mine
        )
