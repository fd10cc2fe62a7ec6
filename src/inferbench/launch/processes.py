"""Every cell is measured in fresh processes: ``measure.repeats`` of them, and a GPU cell that the
first ones find host-bound in ``measure.host_bound_repeats`` (inferbench.trackers.bound).

Within one process, the confidence interval of a percentile says how well the calls pin it down;
it says nothing about the next process, whose memory layout, clocks, cuDNN algorithm choices and the
vCPU its launching thread lands on differ. On shared VMs a launch-bound GPU cell moves 10-75%
between processes; the spread between processes is what a comparison must be judged against
(inferbench.analysis.uncertainty).

How: the ``run-cell`` process imports the engine's libraries once (timed on their own, as
``cold_start_s.import``: what every engine pays, never part of one engine's extra start-up), then
forks one child per repeat, one after another. A forked child is a fresh process for everything a
measurement depends on (its own CUDA context, allocator, cuDNN autotuning, engine, thread placement
and machine lock), without paying the imports again. The cell's processes share one compiler cache
(``COMPILER_CACHES``), empty when the first starts: the later ones load the code it generated, which
takes a compiled model tens of seconds a process to generate. They do not load its autotuned choices:
with those shared, a compiled cell's processes agreed while its leases did not
(docs/results/h100/default_leases), so every process benchmarks and chooses its
kernels anew (inferbench.engines.pytorch.compile.compile_module). A record's cold start is its first
process's, which compiled from nothing. Forking is safe only while the parent has not
initialised CUDA (a child of such a process cannot use the GPU); if a library's import did, the
processes are spawned instead (each imports the libraries again, outside its timed calls) and the
log says so.

A first process that compiled into those caches (``PRIMING_STEPS``) is not timed like the later ones,
which load what it made: it primes the cell, and ``repeats`` more are measured. A torch.compile cell's
first process runs in a priming job of its own (inferbench.launch.cell_job.prime_cell), whose record and
caches its job starts from (``primed``). Its cold start is the
record's; its calls enter no figure. A cell's p50 is the geometric mean of its timed processes' p50s in its
fast mode (inferbench.core.stats.fast_mode: a process that met the host slow throughout is listed, not
averaged in), so that a process that happened to time more calls does not weigh more; the p50 of their
calls pooled is kept beside it (``p50_pooled``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from inferbench.catalog.scenarios import scenario_info
from inferbench.catalog.targets import load_target
from inferbench.core.cells import COLD_START_STEPS, CellRecord
from inferbench.core.errors import UserError
from inferbench.core.stats import fast_mode_p50, fast_phase, latency_stats, percentile_ci
from inferbench.core.storage import BOUNDARIES, load_samples, save_cell
from inferbench.engines.base import compiled_for_others
from inferbench.machine import watchdog
from inferbench.machine.lifetime import kill_group, why_not_fork
from inferbench.machine.lock import MachineLock
from inferbench.machine.scratch import scratch_folder
from inferbench.machine.watchdog import Heartbeat

log = logging.getLogger(__name__)


def spread_pct(values: Sequence[float | None]) -> float | None:
    """(max - min) / median of the values, in percent; None with fewer than two values."""
    present = [v for v in values if v is not None]
    if len(present) < 2:
        return None
    median = float(np.median(present))
    return 100.0 * (max(present) - min(present)) / median if median > 0 else None


def _p50_ci(record: CellRecord, boundary: str) -> list[float] | None:
    if boundary == "device":
        return (record.latency_ci95_ms or {}).get("p50")
    return ((record.end_to_end or {}).get("latency_ci95_ms") or {}).get("p50")


def primes(records: Sequence[CellRecord]) -> bool:
    """Whether the cell's first process compiled for the others (``PRIMING_STEPS``): its calls are left out."""
    return bool(records) and compiled_for_others(records[0].cold_start_s)


def timed_processes(records: Sequence[CellRecord]) -> list[CellRecord]:
    """The processes that timed the cell: all but a priming first one."""
    return list(records[1:] if primes(records) else records)


def contended(record: CellRecord) -> bool:
    """Whether other work held the host's cores while the process timed (inferbench.trackers.host_telemetry)."""
    return bool((record.host_telemetry or {}).get("contended"))


def counted_processes(records: Sequence[CellRecord]) -> list[CellRecord]:
    """The processes whose calls make the cell's figures: the timed ones the host's other work left alone,
    or every timed one where it contended them all (the record then says so: ``repeats.contended``)."""
    timed = timed_processes(records)
    return [r for r in timed if not contended(r)] or timed


def cell_p50(p50s: Sequence[float | None], pooled: float | None) -> float | None:
    """The cell's p50 from its processes' (``fast_mode_p50``); the pooled calls' p50 where a process has none."""
    if not p50s or any(v is None for v in p50s):
        return pooled
    return fast_mode_p50([float(v) for v in p50s])


def merged_bound(records: Sequence[CellRecord]) -> dict[str, Any] | None:
    """The cell's bound over its processes: host if any process found it host-bound (the cautious
    reading: its time then depends on the host), device if every classified process found device."""
    classes = [r.bound["class"] for r in records if r.bound and r.bound.get("class")]
    if not classes:
        return None
    first = next(r.bound for r in records if r.bound and r.bound.get("class"))
    return {**first, "class": "host" if "host" in classes else "device", "per_process": classes}


def merge_repeats(
    records: list[CellRecord], samples: list[dict[str, np.ndarray]]
) -> tuple[CellRecord, dict[str, np.ndarray]]:
    """One record from the records of a cell's fresh processes.

    A priming first process (``primes``) is listed, marked ``prime``, and its cold start is the record's;
    every other figure comes from the timed processes. Their p50 (both boundaries) is the geometric mean of
    their p50s in the fast mode (``cell_p50``), beside ``p50_pooled``; the other percentiles, CIs and throughput
    come from their pooled samples. Each process's p50 (with its 95% CI) is kept for the between-process
    spread. Peak memory is the largest; the status is the first non-ok one, naming its process, so a flaky
    cell is not hidden.
    """
    if not records:
        raise ValueError("no repeats to merge")
    first = records[0]
    summary = repeats_section(records)
    per_repeat = summary["per_repeat"]
    timed = [r for r in per_repeat if r["counted"]]
    bad = next(((i, r) for i, r in enumerate(records) if r.status != "ok"), None)
    if bad is not None:
        index, record = bad
        reason = f"repeat {index + 1} of {len(records)}: {record.reason}" if len(records) > 1 else record.reason
        return replace(record, reason=reason, repeats=summary), samples[index]
    kept = [r for r, entry in zip(records, per_repeat, strict=True) if entry["counted"]]
    kept_samples = [s for s, entry in zip(samples, per_repeat, strict=True) if entry["counted"]]
    base = kept[0]
    memory = {
        name: max((v for r in records if (v := r.memory_mb.get(name)) is not None), default=None)
        for name in base.memory_mb
    }
    every = {
        # the cost a user pays once, and what the engine said beside it (its compile cache made, the attention
        # kernel the first process found): the first process's
        "cold_start_s": first.cold_start_s,
        "engine": first.engine,
        "memory_mb": memory,
        # when each process held the machine, the priming one too (per_repeat's order)
        "measured_windows_unix": [w for r in records for w in r.measured_windows_unix or []],
        "repeats": summary,
    }
    if len(kept) == 1:
        return replace(base, **every), kept_samples[0]

    return pooled_record(base, kept, kept_samples, timed, every)


def process_entry(r: CellRecord, prime: bool) -> dict[str, Any]:
    """What a cell's record keeps of one of its processes: its figures and what may explain a spread."""
    return {
        "status": r.status,
        "prime": prime,
        "p50_ms": (r.latency_ms or {}).get("p50"),
        "p50_ci95_ms": _p50_ci(r, "device"),
        "e2e_p50_ms": ((r.end_to_end or {}).get("latency_ms") or {}).get("p50"),
        "e2e_p50_ci95_ms": _p50_ci(r, "end_to_end"),
        "n_iters": r.n_iters,
        "bound": (r.bound or {}).get("class"),
        "cold_start_s": cold_start_total_s(r.cold_start_s),
        "hostname": r.environment.get("hostname"),
        "pid": r.environment.get("pid"),
        "gpu_uuid": r.environment.get("gpu_uuid"),
        # what its timed loop held, and on which cores it ran (several GPUs, each on cores of its own)
        "measuring_lock": (r.measuring or {}).get("lock"),
        "cpus": (r.measuring or {}).get("cpus"),
        # what may explain a spread: the host's steal and busy shares, the GPU's clock
        "host_steal_pct": (r.host_telemetry or {}).get("steal_pct"),
        "host_busy_pct": (r.host_telemetry or {}).get("busy_pct"),
        # the cores other work held while it timed; a contended process is left out where others were not
        "host_others_cores": (r.host_telemetry or {}).get("others_cores"),
        "contended": contended(r),
        "involuntary_switches": (r.host_telemetry or {}).get("involuntary_switches"),
        # the share of its timed windows the host ran at its fast pace (inferbench.core.stats.fast_phase)
        "fast_phase_share": (r.host_telemetry or {}).get("fast_phase_share"),
        # the CPU its own processes used (vLLM's engine core): a host-bound engine's pace
        "children_cpu_s": (r.host_telemetry or {}).get("children_cpu_s"),
        "gpu_sm_clock_mean_mhz": ((r.gpu_telemetry or {}).get("sm_clock_mhz") or {}).get("mean"),
    }


def repeats_section(records: list[CellRecord]) -> dict[str, Any]:
    """The record's ``repeats``: every process listed (``per_repeat``), which of them count, and the spread
    of the counted ones' p50s."""
    priming = primes(records)
    per_repeat = [process_entry(r, priming and index == 0) for index, r in enumerate(records)]
    counted = counted_processes(records)
    for entry, record in zip(per_repeat, records, strict=True):
        entry["counted"] = any(record is r for r in counted)
    timed = [r for r in per_repeat if r["counted"]]
    return {
        "n": len(timed),
        "primed": priming,
        # how many timed processes the host's other work contended; all of them: the cell's figures are its
        "contended": sum(r["contended"] for r in per_repeat if not r["prime"]),
        "all_contended": all(r["contended"] for r in timed),
        "per_repeat": per_repeat,
        "p50_spread_pct": spread_pct([r["p50_ms"] for r in timed]),
        "e2e_p50_spread_pct": spread_pct([r["e2e_p50_ms"] for r in timed]),
        "description": "each repeat is a fresh process; spread = (max - min) / median of the counted repeats' p50; "
        "a prime repeat compiled for the others, a contended one timed while other work held the host's cores "
        "(counted only where every one was): neither is in a figure",
    }


def pooled_record(
    base: CellRecord,
    kept: list[CellRecord],
    kept_samples: list[dict[str, np.ndarray]],
    timed: list[dict[str, Any]],
    every: dict[str, Any],
) -> tuple[CellRecord, dict[str, np.ndarray]]:
    """The record of several counted processes (``kept``, their entries ``timed``): the cell's p50 from their
    p50s, the rest from their calls pooled; a scenario with figures of its own pools them itself."""
    pooled = {b: np.concatenate([s[b] for s in kept_samples]) for b in BOUNDARIES}
    items = base.items_per_call or base.key.batch_size
    stats = pooled_stats(pooled["device"], [s["device"] for s in kept_samples], items)
    e2e = pooled_stats(pooled["end_to_end"], [s["end_to_end"] for s in kept_samples], items)
    latency = _with_cell_p50(stats["latency_ms"], [r["p50_ms"] for r in timed])
    e2e_latency = _with_cell_p50(e2e["latency_ms"], [r["e2e_p50_ms"] for r in timed])
    e2e_latencies = {"latency_ms": e2e_latency, **{k: e2e[k] for k in ("latency_ci95_ms", "cv", "n_iters")}}
    merged = replace(
        base,
        **every,
        latency_ms=latency,
        latency_ci95_ms=stats["latency_ci95_ms"],
        cv=stats["cv"],
        throughput_per_s=stats["throughput_per_s"],
        n_iters=stats["n_iters"],
        warmup_iters=sum(r.warmup_iters or 0 for r in kept),
        measured_s=sum(r.measured_s or 0.0 for r in kept),
        end_to_end={**(base.end_to_end or {}), **e2e_latencies, "throughput_per_s": e2e["throughput_per_s"]},
        bound=merged_bound(kept),
    )
    # a scenario whose records hold figures of their own (generation's TTFT and TPOT, a sweep under load) pools
    # them itself
    own = scenario_info(base.key.scenario, base.mode).merge
    if own is not None:
        fields = load_target(own)(kept)
        if "sections" in fields:  # its own section beside any other the processes' records share
            fields["sections"] = {**merged.sections, **fields["sections"]}
        if "end_to_end" in fields:  # its own end-to-end figures (a served rate) beside the pooled ones
            fields["end_to_end"] = {**fields["end_to_end"], **e2e_latencies}
        merged = replace(merged, **fields)
    return merged, pooled


def pooled_stats(pooled: np.ndarray, processes: Sequence[np.ndarray], items: int) -> dict[str, Any]:
    """The pooled calls' figures, the interval of their p50 made of each process's calls in the host's fast
    phase (inferbench.core.stats.fast_phase), as the processes' own p50s are."""
    stats = latency_stats(pooled, items)
    masks = [fast_phase(samples)[0] for samples in processes]
    if "p50" in stats["latency_ci95_ms"] and not all(mask.all() for mask in masks):
        fast = np.concatenate([samples[mask] for samples, mask in zip(processes, masks, strict=True)]) * 1e3
        if interval := percentile_ci(fast, ["p50"]).get("p50"):
            stats["latency_ci95_ms"] = {**stats["latency_ci95_ms"], "p50": list(interval)}
    return stats


def _with_cell_p50(latency: dict[str, float | None], p50s: Sequence[float | None]) -> dict[str, float | None]:
    """Pooled percentiles with the p50 made the cell's from its processes' (``cell_p50``), the pooled one kept
    beside."""
    return {**latency, "p50": cell_p50(p50s, latency["p50"]), "p50_pooled": latency["p50"]}


def processes_wanted(
    records: Sequence[CellRecord],
    repeats: int,
    host_bound_repeats: int,
    parted: tuple[float, int] | None = None,
) -> int:
    """How many fresh processes the cell needs, given those measured so far: ``repeats`` timed ones, or
    ``host_bound_repeats`` once a timed process found it host-bound (and none failed), plus a priming first
    one (``primes``). ``parted`` (spread %, cap): while the timed processes' p50s lie further apart than that
    share of their median ((max - min) / median), one more, up to the cap of timed processes: a cell whose
    processes part is measured again rather than averaged (the report calls one that still parts unstable);
    and one more for each process the host's other work contended (``contended``), within the same cap."""
    if any(r.status != "ok" for r in records):
        return len(records)  # a broken process ends the cell: its record says which
    timed = timed_processes(records)
    steady = [r for r in timed if not contended(r)]
    host = any((r.bound or {}).get("class") == "host" for r in timed)
    wanted = max(repeats, host_bound_repeats if host else 0)
    if parted is not None:
        spread_limit, cap = parted
        spread = spread_pct([(r.latency_ms or {}).get("p50") for r in steady])
        if len(steady) >= wanted and spread is not None and spread > spread_limit:
            wanted = max(wanted, min(len(steady) + 1, cap))
        # a process the host's other work contended is measured again, within the cap
        wanted = min(wanted + len(timed) - len(steady), max(cap, wanted))
    return wanted + len(records) - len(timed)


#: where torch.compile (Inductor) and Triton keep compiled and autotuned kernels; both libraries read
#: the variable when they compile, so a process may set it after importing them
COMPILER_CACHES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def primed_caches(primed: Path) -> Path:
    """The compiler caches a priming job filled, beside its record: ``<record stem>.caches/``."""
    return primed.with_suffix(".caches")


def use_cell_compiler_caches(directory: Path) -> None:
    """Point this process's compiler caches at the cell's folders under ``directory`` (empty for its first
    process): what the first process compiled, the later ones load."""
    for variable in COMPILER_CACHES:
        cache = directory / variable.lower()
        cache.mkdir(parents=True, exist_ok=True)
        os.environ[variable] = str(cache)


def _child(
    measure_one: Callable[[Path, int], CellRecord],
    out: Path,
    index: int,
    parent: int,
    caches: Path,
    heartbeat: Heartbeat,
) -> None:
    from inferbench.machine.lifetime import die_with_parent
    from inferbench.trackers.memory import note_process_start

    die_with_parent(parent)  # a measuring process never outlives its cell's job
    watchdog.watch(heartbeat)
    note_process_start()  # the memory it shares with its parent, kept beside its peak
    use_cell_compiler_caches(caches)
    measure_one(out, index)


def cold_start_total_s(cold_start_s: dict[str, float]) -> float | None:
    """A process's seconds before its first timed call: the steps that follow each other, not the engine's
    own steps as well (they are parts of ``prepare``: counting both counted a compile twice)."""
    steps = [cold_start_s[step] for step in COLD_START_STEPS if step in cold_start_s]
    return sum(steps) if steps else None


def end_on_sigterm() -> None:
    """A cancelled job (SIGTERM: Snakemake stopping it, a cluster cancelling it) unwinds like an error: its
    measuring process's group is killed, its scratch folder removed and its machine lock released, in that
    order, before it exits with 143 as a process ended by SIGTERM would."""

    def end(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, end)


@dataclass
class CellProcesses:
    """One cell's fresh processes: those run so far, and how to run the next one until the cell has what it
    needs (``processes_wanted``). ``measure_one(record_path, index)`` runs in each child: it must write a record
    and its samples at the path it is given whatever happens (inferbench.scenarios.run.run_cell does). A child
    whose heartbeat stops for ``stall_timeout_s`` is ended (inferbench.machine.watchdog); a child ended so, or
    one that died without a record (a segfault, the OOM killer), gets ``failed(why)`` as its record (without
    ``failed``: a UserError). The children's records, and the cell's compiler caches, go in ``scratch``."""

    measure_one: Callable[[Path, int], CellRecord]
    scratch: Path
    repeats: int
    host_bound_repeats: int = 0
    stall_timeout_s: float = math.inf
    failed: Callable[[str], CellRecord] | None = None
    parted: tuple[float, int] | None = None
    records: list[CellRecord] = field(default_factory=list)
    samples: list[dict[str, np.ndarray]] = field(default_factory=list)
    caches: Path | None = None

    def start_from(self, primed: Path | None) -> None:
        """The cell's compiler caches, and where a priming job compiled (``primed``: its record), that job's
        process as the cell's first (``_primed_start``)."""
        self.caches = self.scratch / "caches"
        if primed is not None:
            self.records, self.samples, self.caches = _primed_start(primed, self.caches)

    @property
    def done(self) -> bool:
        wanted = processes_wanted(self.records, self.repeats, self.host_bound_repeats, self.parted)
        return len(self.records) >= wanted

    @property
    def broken(self) -> bool:
        """Whether a process failed: that ends the cell (its record says which)."""
        return any(r.status != "ok" for r in self.records)

    @property
    def class_wanted(self) -> int:
        """The timed processes its class asks (``repeats``, or ``host_bound_repeats`` once found host-bound),
        before any more for processes that part."""
        timed = len(timed_processes(self.records))
        return processes_wanted(self.records, self.repeats, self.host_bound_repeats) - (len(self.records) - timed)

    def run_next(self, context: Any, lock: MachineLock | None) -> None:
        """The cell's next fresh process; ``lock`` (held shared) is released while it runs."""
        if self.caches is None:
            self.start_from(None)
        index = len(self.records)
        method = "forked" if context.get_start_method() == "fork" else "spawned"
        log.info("process %d: fresh (%s after the imports)", index + 1, method)
        record, process_samples = run_one_process(
            context, self.measure_one, self.scratch / f"repeat{index}.json", index, self.caches,  # type: ignore[arg-type]
            lock, self.stall_timeout_s, self.failed,
        )  # fmt: skip
        self.records.append(record)
        self.samples.append(process_samples)
        if index == 0 and primes(self.records) and record.status == "ok":
            log.info("process 1 compiled for the others: it primes the cell, its calls count in no figure")

    def merged(self) -> tuple[CellRecord, dict[str, np.ndarray]]:
        return merge_repeats(self.records, self.samples)


def run_in_turn(cells: Sequence[CellProcesses], lock: MachineLock | None = None) -> None:
    """Every cell's processes until each has what it needs, one process of each cell in turn, every other round
    in reverse (A1 B1, B2 A2, A3 B3 ...): what moves the host over minutes then meets every cell alike, and no
    cell always follows the same one. A cell goes on while another of its class does (``_takes_a_turn``).
    ``lock``, this process's machine lock held shared, is released while a child runs (the child takes its own)
    and held between children: no work of this process overlaps another cell's timed loop."""
    context = multiprocessing.get_context(start_method())
    reverse = False
    while pending := [cell for cell in cells if _takes_a_turn(cell, cells)]:
        for cell in reversed(pending) if reverse else pending:
            cell.run_next(context, lock)
        reverse = not reverse


def _takes_a_turn(cell: CellProcesses, cells: Sequence[CellProcesses]) -> bool:
    """Whether a cell measured in turn runs another process this round: while it needs one, or while a cell of
    its class (as many processes asked: ``class_wanted``) still does. So cells compared are sampled alike: one
    that stopped after two processes agreeing in the host's slow mode is not set against another that went on
    into its fast mode alone."""
    if cell.broken:
        return False
    if not cell.done:
        return True
    return any(o is not cell and not o.broken and not o.done and o.class_wanted == cell.class_wanted for o in cells)


def run_cells_in_turn(
    cells: Sequence[tuple[Callable[[Path], CellProcesses], Path, Path | None]], lock: MachineLock | None = None
) -> list[tuple[CellRecord, dict[str, np.ndarray]]]:
    """Cells measured in turn (``run_in_turn``), each given as ``(make, out, primed)``: ``make(folder)`` its
    ``CellProcesses`` with their scratch ``folder`` beside ``out``, and ``primed`` the record of its priming
    process, run in a job of its own (inferbench.launch.cell_job.prime_cell): where it compiled, it is the cell's
    first process and its caches (``primed_caches``) are the cell's; otherwise the cell's first process primes
    it here. Each cell's processes merged into one record, in ``cells``' order."""
    with contextlib.ExitStack() as scratch:
        processes = []
        for make, out, primed in cells:
            out.parent.mkdir(parents=True, exist_ok=True)
            # the children's records, and the cell's compiler caches (removed with the folder; a killed job's, by
            # the next cell that runs here)
            processes.append(make(Path(scratch.enter_context(scratch_folder(out.parent, "repeats-")))))
            processes[-1].start_from(primed)
        run_in_turn(processes, lock)
        return [cell.merged() for cell in processes]


def run_in_fresh_processes(
    measure_one: Callable[[Path, int], CellRecord],
    out: Path,
    repeats: int,
    host_bound_repeats: int = 0,
    lock: MachineLock | None = None,
    stall_timeout_s: float = math.inf,
    failed: Callable[[str], CellRecord] | None = None,
    parted: tuple[float, int] | None = None,
    primed: Path | None = None,
) -> tuple[CellRecord, dict[str, np.ndarray]]:
    """One cell's fresh processes (``CellProcesses``), one after another, merged into one record
    (``run_cells_in_turn`` of one cell)."""

    def make(folder: Path) -> CellProcesses:
        return CellProcesses(measure_one, folder, repeats, host_bound_repeats, stall_timeout_s, failed, parted)

    return run_cells_in_turn([(make, out, primed)], lock)[0]


def _primed_start(primed: Path, caches: Path) -> tuple[list[CellRecord], list[dict[str, np.ndarray]], Path]:
    """The processes a cell starts with, and its compiler caches: the priming process's record and caches
    where it compiled, else none and ``caches`` (the cell's first process primes it)."""
    record = CellRecord.load(primed)
    if record.status == "ok" and primes([record]):
        log.info("process 1 compiled for the others in a job of its own (%s): its caches are the cell's", primed)
        return [record], [{}], primed_caches(primed)
    log.warning("the priming job did not compile (%s: %s): the cell's first process primes it", record.status,
                record.reason or "no compile step")  # fmt: skip
    return [], [], caches


def run_one_process(
    context: Any,
    measure_one: Callable[[Path, int], CellRecord],
    out: Path,
    index: int,
    caches: Path,
    lock: MachineLock | None,
    stall_timeout_s: float,
    failed: Callable[[str], CellRecord] | None,
) -> tuple[CellRecord, dict[str, np.ndarray]]:
    """``measure_one(out, index)`` in one fresh child of ``context`` (fork or spawn) using the compiler caches
    in ``caches``, watched for a stall and ended with its process group; its record and samples
    (``failed(why)`` where it wrote none). ``lock``, held shared, is released while the child runs."""
    heartbeat = Heartbeat(context)
    child = context.Process(
        target=_child, args=(measure_one, out, index, os.getpid(), caches, heartbeat), name=f"repeat{index + 1}"
    )
    if lock is not None:
        lock.release()
    child.start()
    try:
        why_stalled = watchdog.wait_or_end_stalled(child, heartbeat, stall_timeout_s)
    finally:  # a cancelled job (SIGTERM: end_on_sigterm) ends its process's group before its scratch goes
        if child.exitcode is None:
            kill_group(child.pid)
            child.kill()
            child.join()
    if lock is not None:
        lock.shared()
    if why_stalled is None and not out.exists():  # run_cell writes one whatever happens: a crash
        why_stalled = f"crashed: exited with {_exit_status(child.exitcode)} and wrote no record (see this job's log)"
    if why_stalled is not None:
        log.error("process %d: %s", index + 1, why_stalled)
        if failed is None:
            raise UserError(f"process {index + 1} of the cell {why_stalled}")
        # the cell's record says what happened, and the run goes on to its summary
        save_cell(out, failed(why_stalled), {})
    return CellRecord.load(out), load_samples(out)


def _exit_status(exitcode: int | None) -> str:
    """A multiprocessing exit code in words: a negative one is the signal that ended the process."""
    if exitcode is not None and exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"status {exitcode}"


def start_method() -> str:
    """``fork`` (the children inherit the imports), or ``spawn`` once CUDA is initialised in this
    process: a forked child cannot use the GPU then ("Cannot re-initialize CUDA in forked subprocess")."""
    if why_not_fork() is not None:
        log.warning(
            "CUDA was initialised in this process before its measuring processes started (by a library's "
            "import or the model's code): they are spawned, not forked, and import the libraries again"
        )
        return "spawn"
    return "fork"


def import_libraries(modules: Sequence[str], warm_up: Callable[[], None] | None = None) -> float:
    """Import ``modules`` (and run ``warm_up``, e.g. building the model on the meta device so that
    lazily imported model code loads too); returns the seconds it took."""
    import importlib

    start = time.perf_counter()
    for name in modules:
        importlib.import_module(name)
    if warm_up is not None:
        warm_up()
    return time.perf_counter() - start
