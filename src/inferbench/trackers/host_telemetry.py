"""What the host did while a cell measured: the machine's CPU time split from /proc/stat (steal =
time the hypervisor gave this VM's vCPUs to someone else) and this process's context switches.

These explain spread between runs that the within-run statistics cannot: a launch-bound GPU cell is
as fast as the host thread that issues its kernels.
"""

from __future__ import annotations

import resource
from pathlib import Path
from typing import Any

#: the columns of the aggregate `cpu` line of /proc/stat, in jiffies
PROC_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def parse_proc_stat(text: str) -> dict[str, int]:
    """The aggregate ``cpu`` line of /proc/stat as named counters."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1 : 1 + len(PROC_STAT_FIELDS)]]
            return dict(zip(PROC_STAT_FIELDS, values, strict=False))
    raise ValueError("no aggregate `cpu` line in /proc/stat")


def _read_proc_stat() -> dict[str, int] | None:
    try:
        return parse_proc_stat(Path("/proc/stat").read_text())
    except (OSError, ValueError):  # not Linux
        return None


def window_summary(
    before: dict[str, int] | None, after: dict[str, int] | None, usage_before: Any, usage_after: Any
) -> dict[str, Any]:
    """Steal and busy shares of the machine's CPU time in the window, and this process's context
    switches (involuntary ones: the scheduler took the CPU away)."""
    cpu_s = [u.ru_utime + u.ru_stime for u in (usage_before, usage_after)]
    out: dict[str, Any] = {
        "voluntary_switches": usage_after.ru_nvcsw - usage_before.ru_nvcsw,
        "involuntary_switches": usage_after.ru_nivcsw - usage_before.ru_nivcsw,
        "process_cpu_s": cpu_s[1] - cpu_s[0],
        "steal_pct": None,
        "busy_pct": None,
    }
    if before and after:
        delta = {k: after.get(k, 0) - before.get(k, 0) for k in PROC_STAT_FIELDS}
        total = sum(delta.values())
        if total > 0:
            out["steal_pct"] = 100.0 * delta["steal"] / total
            out["busy_pct"] = 100.0 * (total - delta["idle"] - delta["iowait"]) / total
    return out


class HostWindow:
    """Context manager: reads the counters at both ends; ``summary`` after it closes."""

    def __enter__(self) -> HostWindow:
        self._stat, self._usage = _read_proc_stat(), resource.getrusage(resource.RUSAGE_SELF)
        return self

    def __exit__(self, *exc: object) -> None:
        self.summary = window_summary(
            self._stat, _read_proc_stat(), self._usage, resource.getrusage(resource.RUSAGE_SELF)
        )
