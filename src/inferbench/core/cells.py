"""One cell = workload x engine x precision x device x batch x sequence length x threads x scenario.

A cell has an id, a path under ``results/cells`` that names every dimension, and one JSON record.
The scenario is named in the path only where it is not ``single`` (the timed loop of one call at a
time): its suffix after the threads (``-server``, ``-offline``) comes from the scenario axis's
declaration (inferbench.catalog.scenarios).
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from inferbench.catalog.scenarios import PLAIN, SCENARIOS, SECTION_FIELDS_BEFORE_4, path_suffix, scenario_info
from inferbench.core.environment import libraries_column
from inferbench.core.fsutil import read_json, write_json

#: the record's layout: raised whenever a field is added, removed or renamed (tests/test_records.py pins the
#: fields of this version); records of ``READABLE_VERSIONS`` load, the fields they lack at their defaults
SCHEMA_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)  # 1: before ``code``; 2: before ``scenario_section``; 3: before ``sections``
Status = Literal["ok", "unavailable", "oom", "invalid", "failed"]
STATUSES: tuple[str, ...] = ("ok", "unavailable", "oom", "invalid", "failed")
#: a process's start-up steps, one after another (``CellRecord.cold_start_s``): the library imports, the
#: engine's preparation (its own named steps inside it), the first call
COLD_START_STEPS: tuple[str, ...] = ("import", "prepare", "first_call")

CELL_PATTERN = "{workload}/{engine}-{precision}/{device}/b{batch}-s{seq}-t{threads}{scenario_suffix}.json"
#: the scenario named by a path's suffix
_BY_SUFFIX = {path_suffix(name): name for name in SCENARIOS}
_CELL_RE = re.compile(
    r"(?P<workload>[a-z0-9_]+)/(?P<engine>[a-z0-9_]+)-(?P<precision>[a-z0-9]+)/(?P<device>[a-z]+)/"
    r"b(?P<batch>\d+)-s(?P<seq>\d+)-t(?P<threads>\d+)(?P<suffix>"
    + "|".join(re.escape(suffix) for suffix in sorted(_BY_SUFFIX, key=len, reverse=True))
    + r")\.json$"
)


@dataclass(frozen=True, order=True)
class CellKey:
    """Everything that changes what a cell measures. ``seq_len`` is 0 for non-text workloads,
    ``threads`` is 0 on devices where the host thread count is not an axis (cuda); in a serving
    scenario ``batch_size`` is the dynamic batcher's largest batch."""

    workload: str
    engine: str
    precision: str
    device: str
    batch_size: int
    seq_len: int
    threads: int
    scenario: str = "single"

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIOS:
            raise ValueError(f"scenario must be one of {tuple(SCENARIOS)}, got {self.scenario!r}")

    @property
    def relpath(self) -> str:
        return CELL_PATTERN.format(
            workload=self.workload,
            engine=self.engine,
            precision=self.precision,
            device=self.device,
            batch=self.batch_size,
            seq=self.seq_len,
            threads=self.threads,
            scenario_suffix=path_suffix(self.scenario),
        )

    @property
    def cell_id(self) -> str:
        return self.relpath.removesuffix(".json")

    @classmethod
    def of_fields(cls, named: Mapping[str, Any], scenario: str | None = None) -> CellKey:
        """The cell that ``named`` names by the axes' short names (``workload``, ``engine``, ``precision``,
        ``device``, ``batch``, ``seq``, ``threads``; numbers as text or int): a workflow job's wildcards, the
        CLI's arguments. Its scenario: ``scenario``, else ``named``'s, else the plain one. A job of cells
        measured in turn names no engine: its key's engine is empty."""
        return cls(
            str(named["workload"]),
            str(named.get("engine", "")),
            str(named["precision"]),
            str(named["device"]),
            int(named["batch"]),
            int(named["seq"]),
            int(named["threads"]),
            scenario or named.get("scenario") or PLAIN,
        )

    @classmethod
    def from_path(cls, path: str | Path) -> CellKey:
        match = _CELL_RE.search(Path(path).as_posix())
        if not match:
            raise ValueError(f"{path} is not a cell path of the form {CELL_PATTERN}")
        g = match.groupdict()
        return cls(
            g["workload"],
            g["engine"],
            g["precision"],
            g["device"],
            int(g["batch"]),
            int(g["seq"]),
            int(g["threads"]),
            _BY_SUFFIX[g["suffix"]],
        )


def options_id(options: dict[str, Any]) -> str:
    """A short digest of a variant's options (its engine and settings, not its name): equal for one
    configuration under two names."""
    text = json.dumps(options, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class NewerRecord(ValueError):
    """A record this checkout cannot read because a newer inferbench wrote it: kept, never removed as damaged."""


@dataclass
class CellRecord:
    """The one record a cell writes. Measurement fields stay ``None`` unless ``status`` is ok/invalid."""

    key: CellKey
    status: Status
    engine_impl: str
    reason: str | None = None
    #: inference, or train (one call = one optimizer step, or one epoch through a DataLoader)
    mode: str = "inference"
    #: which boundary the headline latencies time (``device`` or ``end_to_end``), and what that covered
    timing: str | None = None
    timing_description: str | None = None
    #: the clock of that boundary: ``cuda_events`` (GPU events on the stream the engine computes on) or ``host``
    clock: str | None = None
    latency_ms: dict[str, float | None] | None = None
    #: 95% bootstrap confidence interval [low, high] of each reported percentile
    latency_ci95_ms: dict[str, list[float]] | None = None
    #: coefficient of variation of the per-call latencies (std / mean)
    cv: float | None = None
    #: the `end_to_end` boundary, measured after the engine's own one (the same one where that is
    #: already end to end): description, latency_ms, latency_ci95_ms, cv, n_iters, throughput_per_s
    end_to_end: dict[str, Any] | None = None
    throughput_per_s: float | None = None
    #: items one timed call processes (the batch; the dataset's rows for a training epoch)
    items_per_call: int | None = None
    #: seeded input batches the timed calls cycled through
    input_batches: int | None = None
    n_iters: int | None = None
    warmup_iters: int | None = None
    measured_s: float | None = None
    #: when each process held the machine lock exclusively to measure: [start, end] in Unix seconds,
    #: one pair per process; no other cell's window on this machine overlaps them (inferbench.machine.lock)
    measured_windows_unix: list[list[float]] | None = None
    #: what the timed loop held (inferbench.machine.host_partition.measuring): ``lock`` (``machine``; ``gpus``
    #: on a partitioned host, one GPU timing at a time; ``gpu <device>`` where GPUs time at once), the
    #: ``cpus`` the timed loop ran on and ``pinning``: what pinned it (measure.cpu_affinity, a GPU's slot)
    #: or why nothing did
    measuring: dict[str, Any] | None = None
    parity: dict[str, Any] | None = None
    memory_mb: dict[str, float | None] = field(default_factory=dict)
    #: NVML samples during the device-boundary rounds: clocks, temperature, power, energy per item
    gpu_telemetry: dict[str, Any] | None = None
    #: the host during the cell's timed calls: machine steal/busy shares, this process's context switches
    host_telemetry: dict[str, Any] | None = None
    #: what the variant computes with: graph, precision mode, channels-last, compile mode, CUDA graph,
    #: IO binding, TF32 (inferbench.catalog.engines.COMPUTATION_KEYS; None where a key does not apply)
    computation: dict[str, Any] = field(default_factory=dict)
    #: GPU cells: who set the pace, the device or the host (inferbench.trackers.bound), and the signals
    bound: dict[str, Any] | None = None
    #: the fresh processes that measured the cell: each one's headline numbers and their spread
    repeats: dict[str, Any] | None = None
    #: seconds before the first timed call, by step: ``import``, ``prepare`` and ``first_call`` follow
    #: each other (``COLD_START_STEPS``); the engine's own steps (``load_model``, ``compile``...) are parts of
    #: ``prepare``
    cold_start_s: dict[str, float] = field(default_factory=dict)
    #: the figures a scenario keeps as its own, under the name of its folder (ScenarioInfo.section): what its
    #: measurement returned; its declaration's ``columns`` put them in the summary
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: how the cell's job started: ``warm`` (forked from the warm-start server, inferbench.launch.warm),
    #: or ``cold`` (a process that imported the libraries itself)
    launcher: str | None = None
    engine: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    #: the code that made the record: ``job``, the code identity of its job (the hash of the code the job
    #: runs, by which the workflow decides to re-run the cell: inferbench.plan.code; None for a hand run),
    #: and ``package``, a hash of the package's source as it ran, which names the code also where the tree
    #: had uncommitted changes
    code: dict[str, str | None] = field(default_factory=dict)
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        if self.status != "ok" and not self.reason:
            raise ValueError(f"a {self.status!r} record needs a reason")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["cell"] = out.pop("key")
        out["cell"]["cell_id"] = self.key.cell_id
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CellRecord:
        data = dict(data)
        version = data.get("schema_version")
        if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
            raise NewerRecord(
                f"record schema_version {version} is newer than this checkout reads ({READABLE_VERSIONS}): "
                "update the checkout to read it"
            )
        if version not in READABLE_VERSIONS:
            raise ValueError(f"record schema_version {version!r} is not one of {READABLE_VERSIONS}: re-run the cell")
        if version < 4:
            data["sections"] = _sections_before_4(data)
        unknown = sorted(set(data) - {f.name for f in fields(cls)} - {"cell"})
        if unknown:  # fields a later inferbench writes: the record is kept, not read as damaged
            raise NewerRecord(
                f"record has fields this checkout does not know ({', '.join(unknown[:5])}): written by a newer "
                "inferbench? update the checkout to read it"
            )
        cell = dict(data.pop("cell"))
        cell.pop("cell_id", None)
        return cls(key=CellKey(**cell), **data)

    def save(self, path: str | Path) -> None:
        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> CellRecord:
        """The record at ``path``; at a cell path (results/cells/...), a ValueError unless the record is
        that cell's: a record copied onto another cell's path would publish its numbers as that cell's."""
        record = cls.from_dict(read_json(path))
        where = "/" + Path(path).as_posix()
        # a process's record inside a cell's scratch folder is at no cell path: nothing to match
        if _CELL_RE.search(where) and not where.endswith("/" + record.key.relpath):
            raise ValueError(f"it is the record of {record.key.cell_id}, not of the cell its path names")
        return record

    def _repeat_p50s(self, key: str = "p50_ms") -> list[float]:
        """The counted processes' p50s: a priming process (inferbench.launch.processes.primes) is no sample, nor
        one the host's other work contended where another was not (``counted``; older records lack it)."""
        repeats = (self.repeats or {}).get("per_repeat", [])
        return [r[key] for r in repeats if r.get(key) is not None and r.get("counted", not r.get("prime"))]

    def _fast_phase_pct(self) -> float | None:
        shares = self._repeat_p50s("fast_phase_share")  # the counted processes' field
        own = (self.host_telemetry or {}).get("fast_phase_share")
        shares = shares or ([own] if own is not None else [])
        return 100.0 * statistics.median(shares) if shares else None

    def _e2e_p50_ci(self) -> list[float | None]:
        return ((self.end_to_end or {}).get("latency_ci95_ms") or {}).get("p50") or [None, None]

    def _rate(self, p50_ms: float | None, items: float, own: float | None) -> float | None:
        """Items per second at a p50 (ms): calls timed one at a time. A scenario that times requests under
        load or generated tokens (one with a section of its own) reports its own rate (``own``)."""
        if self.key.scenario != PLAIN or self.sections:
            return own
        return items / p50_ms * 1e3 if p50_ms else None

    def _by_process(self, key: str) -> str | None:
        """Each process's p50 (ms), ';'-separated: what the between-process intervals are made of."""
        values = self._repeat_p50s(key)
        if not values and key == "p50_ms" and self.latency_ms:  # a record measured in one process
            values = [self.latency_ms["p50"]]
        return ";".join(f"{v:.6g}" for v in values) or None

    def flatten(self) -> dict[str, Any]:
        """One summary row: the cell's dimensions, its status and the headline metrics."""
        lat = self.latency_ms or {}
        e2e_lat = (self.end_to_end or {}).get("latency_ms") or {}
        p50 = lat.get("p50")
        telemetry = self.gpu_telemetry or {}
        items = self.items_per_call or self.key.batch_size
        e2e_mean_rate = (self.end_to_end or {}).get("throughput_per_s")
        row: dict[str, Any] = {
            **asdict(self.key),
            "engine_impl": self.engine_impl,
            # the variant's options, named or not: two cells equal in it and their key but the variant's name
            # are one configuration measured twice (an A/A pair: inferbench.analysis.comparison.twin_pairs)
            "options_id": options_id(self.options) if self.options else None,
            "planted_slowdown": self.options.get("planted_slowdown"),
            "mode": self.mode,
            **self.computation,
            # which attention kernel ran (inferbench.trackers.attention), where the engine says
            "attention_kernel": (self.engine.get("attention") or {}).get("kernel"),
            "status": self.status,
            "reason": self.reason,
            "timing": self.timing,
            **{f"latency_{k}_ms": lat.get(k) for k in ("p50", "p90", "p95", "p99", "mean", "std", "min", "max")},
            # p50 is the median of the processes' p50s; this one pools their calls (one process: the same)
            "latency_p50_pooled_ms": lat.get("p50_pooled", p50),
            **{
                f"latency_{k}_ci95_{side}_ms": ((self.latency_ci95_ms or {}).get(k) or [None, None])[i]
                for k in ("p50", "p99")
                for i, side in enumerate(("low", "high"))
            },
            "latency_cv": self.cv,
            **{
                f"e2e_latency_{k}_ms": ((self.end_to_end or {}).get("latency_ms") or {}).get(k)
                for k in ("p50", "p99", "mean")
            },
            "e2e_latency_p50_pooled_ms": e2e_lat.get("p50_pooled", e2e_lat.get("p50")),
            **dict(
                zip(("e2e_latency_p50_ci95_low_ms", "e2e_latency_p50_ci95_high_ms"), self._e2e_p50_ci(), strict=True)
            ),
            # the one throughput (items per call / p50 at the boundary), as every page and plot shows it; a
            # scenario with a rate of its own (a decoder's served requests/s under load) keeps that
            "e2e_throughput_per_s": self._rate(e2e_lat.get("p50"), items, e2e_mean_rate),
            "e2e_throughput_mean_per_s": e2e_mean_rate,
            "e2e_n_iters": (self.end_to_end or {}).get("n_iters"),
            "latency_per_item_p50_ms": p50 / items if p50 is not None else None,
            "throughput_per_s": self._rate(p50, items, self.throughput_per_s),
            # items over the mean call: what a run of back-to-back calls would average
            "throughput_mean_per_s": self.throughput_per_s,
            "items_per_call": self.items_per_call,
            "n_iters": self.n_iters,
            "repeats": (self.repeats or {}).get("n", 1 if self.latency_ms else None),
            "repeat_p50_spread_pct": (self.repeats or {}).get("p50_spread_pct"),
            "p50_by_process_ms": self._by_process("p50_ms") if self.latency_ms else None,
            "e2e_p50_by_process_ms": self._by_process("e2e_p50_ms") if self.latency_ms else None,
            "bound": (self.bound or {}).get("class"),
            "launch_share": (self.bound or {}).get("launch_share"),
            "gpu_busy_pct": (self.bound or {}).get("gpu_busy_pct"),
            **{
                f"repeat_p50_{name}_ms": pick(p50s) if (p50s := self._repeat_p50s()) else None
                for name, pick in (("min", min), ("max", max))
            },
            **{
                f"parity_{k}": (self.parity or {}).get(k)
                for k in ("rel_l2", "max_abs", "cosine", "top1_agreement", "auc")
            },
            "measured_s": self.measured_s,
            "host_peak_rss_mb": self.memory_mb.get("host_peak_rss"),
            "host_rss_at_start_mb": self.memory_mb.get("host_rss_at_start"),
            "gpu_peak_allocated_mb": self.memory_mb.get("gpu_peak_allocated"),
            "gpu_process_peak_mb": self.memory_mb.get("gpu_process_peak_nvml"),
            "energy_per_item_mj": telemetry.get("energy_per_item_mj"),
            "gpu_power_mean_w": (telemetry.get("power_w") or {}).get("mean"),
            "gpu_sm_clock_mean_mhz": (telemetry.get("sm_clock_mhz") or {}).get("mean"),
            "gpu_temperature_max_c": (telemetry.get("temperature_c") or {}).get("max"),
            "host_steal_pct": (self.host_telemetry or {}).get("steal_pct"),
            "host_busy_pct": (self.host_telemetry or {}).get("busy_pct"),
            # the share of the timed windows the host ran at its fast pace, the median process's
            # (inferbench.core.stats.fast_phase): below 100, the p50 left its slow phases out
            "host_fast_phase_pct": self._fast_phase_pct(),
            # timed processes left out because other work held the host's cores; True: every one was, and
            # the figures are theirs (inferbench.launch.processes.counted_processes)
            "contended_processes": (self.repeats or {}).get("contended"),
            "host_contended": (self.repeats or {}).get("all_contended", (self.host_telemetry or {}).get("contended")),
            "involuntary_switches": (self.host_telemetry or {}).get("involuntary_switches"),
            **{f"{k}_s": v for k, v in self.cold_start_s.items()},
            "hostname": self.environment.get("hostname"),
            # the CPUs the host has: a CPU cell's threads are a share of them
            "host_cpus": self.environment.get("cpu_count"),
            "cpu": self.environment.get("cpu_model"),
            "gpu": self.environment.get("gpu_name"),
            "gpu_driver": self.environment.get("gpu_driver"),
            "cuda": self.environment.get("cuda_runtime"),
            "cudnn": str(v) if (v := self.environment.get("cudnn")) is not None else None,
            "python": self.environment.get("python"),
            "git_commit": self.environment.get("git_commit"),
            "git_dirty": self.environment.get("git_dirty"),
            "code_job": self.code.get("job"),
            "code_package": self.code.get("package"),
            "schema_version": self.schema_version,
            # the library versions the record holds (its engine's and the harness's), ``name=version;...``
            "libraries": libraries_column(self.environment.get("libraries")),
            "created_at": self.created_at,
        }
        return row


def _sections_before_4(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A record of schema 1 to 3's scenario figures (popped from ``data``) under today's section names: its
    scenario's folder (a LoadGen result under ``serving``, a load sweep under ``llm_load``, TTFT/TPOT under
    ``generation``)."""
    cell = data.get("cell") or {}
    try:
        section = scenario_info(cell.get("scenario", PLAIN), data.get("mode", "inference")).section
    except ValueError:  # a scenario this checkout does not declare: the field's own name
        section = None
    old = {name: data.pop(name, None) for name in SECTION_FIELDS_BEFORE_4}
    return {section or name: value for name, value in old.items() if value is not None}


def record_section(data: Mapping[str, Any], section: str) -> dict[str, Any] | None:
    """A record's ``section`` read from its JSON (``data``), of any readable schema: for tools that read records
    without loading them."""
    if "sections" in data:
        return data["sections"].get(section)
    return _sections_before_4(dict(data)).get(section)
