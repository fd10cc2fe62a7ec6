"""The answers a reader of a benchmark wants, computed from summary rows (one row per cell).

Every function takes the summary frame (inferbench.analysis.summary) and uses only measured cells
(status ``ok``; ``invalid`` cells failed the parity gate and never count as a win). Latencies are
p50 milliseconds. Cells are compared like with like (inferbench.analysis.comparison): at the device
boundary only when all are on one device and every engine's own boundary is the device one, else
end to end; each answer names its boundary. Ratios carry 95% intervals that count the spread
between fresh processes (inferbench.analysis.uncertainty), and a difference is called significant
only when its interval excludes 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from inferbench.analysis.comparison import SpreadFloors, boundary_of, p50_at, p50_of, process_p50s, rate_at
from inferbench.analysis.leases import LeaseSpread
from inferbench.analysis.summary import measured
from inferbench.analysis.verdicts import claim, claim_columns
from inferbench.catalog.engines import PLAIN_COMPUTATION, PLAIN_PRECISION

#: the engine variant every speed-up is measured against
BASELINE_ENGINE, BASELINE_PRECISION = "torch_eager", "fp32"
#: one-off costs paid outside the cell's own process (ONNX export and conversion, TensorRT build)
EXTERNAL_COLD_START = ("export_s", "simplify_s", "convert_s", "build_s")


def e2e_p50_ms(frame: pd.DataFrame) -> pd.Series:
    """End-to-end p50 per call; the engine's own p50 where the engine's boundary is already end to end."""
    return p50_at(frame, "end_to_end")


def e2e_per_item_ms(frame: pd.DataFrame) -> pd.Series:
    return e2e_p50_ms(frame) / frame["batch_size"]


def crossover_bracket(
    batches: list[float], cpu_ms: list[float], gpu_ms: list[float]
) -> tuple[float, float, float] | None:
    """Where the GPU's latency per item falls below the CPU's: the two measured batch sizes it falls
    between and an estimate inside them, interpolated linearly in log(batch) on log(cpu / gpu).
    ``None`` when the sign never changes in the measured range. Only the bracket is measured."""
    x = np.log(np.asarray(batches, dtype=float))
    ratio = np.log(np.asarray(cpu_ms, dtype=float) / np.asarray(gpu_ms, dtype=float))  # > 0: GPU faster
    for i in range(len(x) - 1):
        if ratio[i] <= 0 < ratio[i + 1]:
            if ratio[i] == 0:
                return float(batches[i]), float(batches[i]), float(batches[i])
            t = -ratio[i] / (ratio[i + 1] - ratio[i])
            return float(batches[i]), float(batches[i + 1]), float(math.exp(x[i] + t * (x[i + 1] - x[i])))
    return None


def crossover_batch(batches: list[float], cpu_ms: list[float], gpu_ms: list[float]) -> float | None:
    """The interpolated estimate of ``crossover_bracket`` (None where the sign never changes)."""
    bracket = crossover_bracket(batches, cpu_ms, gpu_ms)
    return bracket[2] if bracket else None


def _count(value: float) -> str:
    return f"{value:,.0f}"


def cpu_gpu_crossovers(summary: pd.DataFrame) -> pd.DataFrame:
    """Per workload (and sequence length): from which batch size the GPU beats the CPU per item.

    Each device's curve is its best engine at each batch (lowest end-to-end p50 per item), over the
    batch sizes measured on both devices. ``verdict`` says what the range shows when there is no
    crossing inside it."""
    ok = measured(summary).assign(per_item_ms=e2e_per_item_ms)
    rows = []
    for (workload, seq), cells in ok.groupby(["workload", "seq_len"]):
        best = cells.groupby(["device", "batch_size"])["per_item_ms"].min().unstack(0)
        if not {"cpu", "cuda"} <= set(best.columns):
            continue
        both = best[["cpu", "cuda"]].dropna().sort_index()
        if both.empty:
            continue
        batches = list(both.index)
        bracket = crossover_bracket(batches, list(both["cpu"]), list(both["cuda"]))
        crossing = bracket[2] if bracket else None
        if bracket is not None and bracket[0] == bracket[1]:
            verdict = f"GPU as fast as the CPU at batch {_count(bracket[0])}, faster above"
        elif bracket is not None:
            verdict = (
                f"GPU faster from a batch between {_count(bracket[0])} and {_count(bracket[1])} "
                f"(about {_count(crossing)} interpolated in log batch; only the two ends were measured)"
            )
        elif (both["cuda"] < both["cpu"]).all():
            verdict = f"GPU faster at every measured batch ({batches[0]}-{batches[-1]})"
        elif (both["cuda"] >= both["cpu"]).all():
            verdict = f"CPU as fast or faster at every measured batch ({batches[0]}-{batches[-1]})"
        else:
            verdict = "GPU faster at small batches only"
        rows.append(
            {
                "workload": workload,
                "seq_len": seq,
                "batches": batches,
                "bracket": bracket[:2] if bracket else None,
                "crossover_batch": crossing,
                "verdict": verdict,
            }
        )
    columns = ["workload", "seq_len", "batches", "bracket", "crossover_batch", "verdict"]
    return pd.DataFrame(rows, columns=columns)


#: a cell within a shape (with the shape's columns, a cell's key among the measured inference cells)
CELL = ("engine", "precision", "device", "threads")
SHAPE = ("workload", "batch_size", "seq_len")


def row_of(frame: pd.DataFrame, cell: Any) -> pd.Series:
    """The row of ``frame`` that is ``cell`` (anything with the ``SHAPE`` and ``CELL`` entries: a row of
    ``best_cells``, another frame's row)."""
    match = np.logical_and.reduce([frame[c] == cell[c] for c in (*SHAPE, *CELL)])
    return frame[match].iloc[0]


def best_cells(summary: pd.DataFrame, floors: SpreadFloors | None = None) -> pd.DataFrame:
    """The fastest cell per workload x batch x sequence length, compared like with like (p50 at the
    group's common boundary), with its margin over the runner-up and how that margin holds
    (inferbench.analysis.verdicts). ``floors``: the run's spread per class (by default, of ``summary``)."""
    ok = measured(summary)
    floors = floors if floors is not None else SpreadFloors.of(ok)
    rows = []
    for (workload, batch, seq), cells in ok.groupby(["workload", "batch_size", "seq_len"], sort=True):
        boundary = boundary_of(cells)
        ranked = cells.assign(p50_ms=p50_at(cells, boundary)).sort_values("p50_ms")
        best = ranked.iloc[0]
        row = {
            "workload": workload,
            "batch_size": batch,
            "seq_len": seq,
            "boundary": boundary,
            "engine": best["engine"],
            "precision": best["precision"],
            "device": best["device"],
            "threads": best["threads"],
            "p50_ms": best["p50_ms"],
            "bound": best.get("bound"),
            "runner_up": None,
            "margin": None,
            "margin_low": None,
            "margin_high": None,
            "verdict": "the only cell",
            "claim": None,
        }
        if len(ranked) > 1:
            second = ranked.iloc[1]
            margin = claim(best, second, floors, boundary)
            row |= {"runner_up": f"{second['engine']} {second['precision']} {second['device']}"}
            row |= {f"runner_up_{c}": second[c] for c in CELL}
            row |= claim_columns(margin, "margin") | {"claim": margin}
        rows.append(row)
    return pd.DataFrame(rows)


def pareto_front(
    points: pd.DataFrame, latency: str = "latency_p50_ms", throughput: str = "throughput_per_s"
) -> pd.DataFrame:
    """Rows no other row beats on both lower latency and higher throughput, by latency."""
    points = points.dropna(subset=[latency, throughput])
    ordered = points.sort_values([latency, throughput], ascending=[True, False])
    front, best_throughput = [], -math.inf
    for index, row in ordered.iterrows():
        if row[throughput] > best_throughput:
            front.append(index)
            best_throughput = row[throughput]
    return ordered.loc[front]


def workload_front(cells: pd.DataFrame) -> tuple[str, pd.DataFrame]:
    """The latency/throughput Pareto front of one workload's cells at their common boundary: p50 and
    items/s end to end unless every cell ran on one device at its device boundary."""
    boundary = boundary_of(cells)
    e2e = cells.assign(e2e_p50=p50_at(cells, boundary), e2e_items_per_s=rate_at(cells, boundary))
    return boundary, pareto_front(e2e, latency="e2e_p50", throughput="e2e_items_per_s")


def speedups(summary: pd.DataFrame, floors: SpreadFloors | None = None) -> pd.DataFrame:
    """Each cell's p50 speed-up over FP32 eager PyTorch at the same workload, device, batch, sequence
    length and threads, as a claim (inferbench.analysis.verdicts): at the pair's common boundary, with a
    95% interval that counts the spread between processes (None where either cell ran in one process)."""
    ok = measured(summary)
    floors = floors if floors is not None else SpreadFloors.of(ok)
    key = ["workload", "device", "batch_size", "seq_len", "threads"]
    is_base = (ok["engine"] == BASELINE_ENGINE) & (ok["precision"] == BASELINE_PRECISION)
    base = {tuple(r[c] for c in key): r for r in ok[is_base].to_dict("records")}
    rows = []
    for row in ok[~is_base].to_dict("records"):  # plain records: a Series per row cost ~1 ms a cell
        b = base.get(tuple(row[c] for c in key))
        if b is None:
            continue
        result = claim(row, b, floors)
        if result is None:
            continue
        rows.append(
            {
                **{c: row[c] for c in key},
                "engine": row["engine"],
                "precision": row["precision"],
                **claim_columns(result, "speedup"),
                "processes": f"{result.ratio.processes[0]} / {result.ratio.processes[1]}",
                "claim": result,
            }
        )
    columns = [*key, "engine", "precision", "boundary", "speedup", "speedup_low", "speedup_high", "significant",
               "verdict", "processes", "claim"]  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


#: a power law fitted to two points always fits: an exponent needs at least three lengths
MIN_SCALING_LENGTHS = 3


@dataclass(frozen=True)
class PowerLaw:
    """p50 ∝ length^k fitted in log-log over every process's p50 (one point per process and length), with
    the 95% interval of k from the fit's residuals: the spread between processes widens it."""

    exponent: float
    low: float | None
    high: float | None
    r2: float

    @property
    def significant(self) -> bool:
        """The interval of k excludes 0: latency measurably changes with the length."""
        return self.low is not None and self.high is not None and (self.low > 0 or self.high < 0)


def power_law(lengths: list[float], p50s: list[float]) -> PowerLaw:
    """``PowerLaw`` of points (length, p50 ms); no interval from fewer than three points."""
    x, y = np.log(np.asarray(lengths, dtype=float)), np.log(np.asarray(p50s, dtype=float))
    slope, intercept = np.polyfit(x, y, 1)
    residual = y - (slope * x + intercept)
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1 - float((residual**2).sum()) / total if total > 0 else 1.0
    sxx, df = float(((x - x.mean()) ** 2).sum()), len(x) - 2
    if df < 1 or sxx == 0:
        return PowerLaw(float(slope), None, None, r2)
    half = float(stats.t.ppf(0.975, df)) * math.sqrt(float((residual**2).sum()) / df / sxx)
    return PowerLaw(float(slope), float(slope - half), float(slope + half), r2)


def _series_points(series: pd.DataFrame, boundary: str) -> tuple[list[float], list[float]]:
    rows = series.itertuples(index=False)
    points = [(float(row.seq_len), p50) for row in rows for p50 in process_p50s(row, boundary)]
    return [x for x, _ in points], [y for _, y in points]


def series_class(series: pd.DataFrame) -> str:
    """``cpu``, ``host`` (a GPU series with a host-bound cell: its time follows the host, not the length's
    compute) or ``device``."""
    if (series["device"] != "cuda").all():
        return "cpu"
    bound = series["bound"] if "bound" in series else pd.Series("host", index=series.index)
    return "device" if bound.eq("device").all() else "host"


def seq_scaling(summary: pd.DataFrame) -> pd.DataFrame:
    """The exponent k of latency ∝ seq_len^k per text cell series (``power_law`` over every process's p50 at
    the engine's own boundary, with its 95% interval and R²), the same fit end to end (``exponent_e2e``):
    where the two have opposite signs, neither is the series' answer (``boundaries_disagree``); and the
    series' class (``series_class``). Series measured at fewer than ``MIN_SCALING_LENGTHS`` lengths are
    listed with no exponent; single lengths are left out."""
    ok = measured(summary)
    ok = ok[ok["seq_len"] > 0]
    names = ["workload", "engine", "precision", "device", "batch_size", "threads"]
    rows = []
    for key, series in ok.groupby(names):
        lengths = series["seq_len"].nunique()
        if lengths < 2:
            continue
        fit = fit_e2e = None
        if lengths >= MIN_SCALING_LENGTHS:
            boundary = boundary_of(series)
            fit = power_law(*_series_points(series, boundary))
            fit_e2e = power_law(*_series_points(series, "end_to_end"))
        disagree = fit is not None and fit_e2e is not None and fit.exponent * fit_e2e.exponent < 0
        rows.append({**dict(zip(names, key, strict=True)), "points": lengths, "bound": series_class(series),
                     "exponent": fit.exponent if fit else None, "exponent_low": fit.low if fit else None,
                     "exponent_high": fit.high if fit else None, "significant": fit.significant if fit else None,
                     "r2": fit.r2 if fit else None, "exponent_e2e": fit_e2e.exponent if fit_e2e else None,
                     "boundaries_disagree": disagree})  # fmt: skip
    columns = [*names, "points", "bound", "exponent", "exponent_low", "exponent_high", "significant", "r2",
               "exponent_e2e", "boundaries_disagree"]  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def cold_start_total_s(row: Any) -> float | None:
    """Seconds before a cell's first answer: its preparation and first call, plus the one-off costs
    paid in other jobs (ONNX export, simplification, conversion; TensorRT build). Not the library
    imports (``import_s``): every engine pays those, and their time varies by process."""
    row = row if isinstance(row, dict | pd.Series) else row._asdict()
    values = [row.get("prepare_s"), row.get("first_call_s")]
    if any(v is None or pd.isna(v) for v in values):
        return None
    extra = [row.get(name) for name in EXTERNAL_COLD_START]
    return float(sum(values) + sum(v for v in extra if v is not None and not pd.isna(v)))


def break_even(summary: pd.DataFrame, floors: SpreadFloors | None = None) -> pd.DataFrame:
    """After how many inferences an engine's extra cold start (compile, capture, build, export...)
    is paid back by its faster calls, against FP32 eager at the same workload, device, batch,
    sequence length and threads: extra cold-start seconds / seconds saved per call, per call at the
    pair's common boundary. Library imports are timed apart (``import_s``) and count for no engine;
    summaries whose cold start still includes them (no ``import_s`` column) give no rows. ``None``
    where the engine is not faster beyond the spread between processes (it never pays back) or
    starts no slower (it pays from the first call)."""
    ok = measured(summary)
    if "import_s" not in ok:
        return pd.DataFrame()
    floors = floors if floors is not None else SpreadFloors.of(ok)
    key = ["workload", "device", "batch_size", "seq_len", "threads"]
    is_base = (ok["engine"] == BASELINE_ENGINE) & (ok["precision"] == BASELINE_PRECISION)
    base = {tuple(r[c] for c in key): r for r in ok[is_base].to_dict("records")}
    rows = []
    for row in ok[~is_base].to_dict("records"):  # plain records: a Series per row cost ~1 ms a cell
        b = base.get(tuple(row[c] for c in key))
        cold, base_cold = cold_start_total_s(row), (cold_start_total_s(b) if b is not None else None)
        if b is None or cold is None or base_cold is None or pd.isna(row["import_s"]) or pd.isna(b["import_s"]):
            continue  # a cold start with the imports in it (a record from before they were timed apart)
        faster = claim(row, b, floors)
        if faster is None:
            continue
        boundary = faster.boundary
        extra_s, saved_s = cold - base_cold, (p50_of(b, boundary) - p50_of(row, boundary)) / 1e3
        if faster.boundaries_disagree:
            inferences, verdict = None, f"unknown: {faster.verdict}"
        elif saved_s <= 0 or faster.significant is False:
            inferences, verdict = None, "never: not faster per call beyond the spread between processes"
        elif extra_s <= 0:
            inferences, verdict = 0.0, "from the first call: no extra start-up"
        else:
            inferences = extra_s / saved_s
            verdict = f"after {math.ceil(inferences):,} calls"
        rows.append(
            {
                **{c: row[c] for c in key},
                "engine": row["engine"],
                "precision": row["precision"],
                "boundary": boundary,
                "extra_cold_start_s": extra_s,
                "saved_per_call_ms": saved_s * 1e3,
                "break_even_calls": inferences,
                "verdict": verdict,
            }
        )
    return pd.DataFrame(rows)


#: the knobs a speed-up is decomposed by, each a group of summary columns that move together (TF32
#: is fp32's math, so part of the precision)
KNOBS: dict[str, tuple[str, ...]] = {
    "precision": ("precision", "precision_mode", "tf32"),
    "graph": ("graph", "compile_mode", "cuda_graph"),
    "channels_last": ("channels_last",),
    "io_binding": ("io_binding",),
    "host_input": ("host_input",),
}
#: knobs that change only what happens before the device computes: judged end to end, where they act
END_TO_END_KNOBS = ("host_input",)


def _spelled(value: object) -> str:
    """A summary value as ``_knob_value`` spells it (None as empty, booleans as their names)."""
    return "" if value is None else str(value)


#: each knob's plain setting (as ``_knob_value`` spells it): a step goes from it to the other one
_PLAIN = {
    knob: tuple(_spelled({"precision": PLAIN_PRECISION, **PLAIN_COMPUTATION}[column]) for column in columns)
    for knob, columns in KNOBS.items()
}


def _knob_value(row: pd.Series, columns: tuple[str, ...]) -> tuple[str, ...]:
    return tuple("" if pd.isna(v := row.get(c)) or v is None else str(v) for c in columns)


def option_steps(summary: pd.DataFrame, floors: SpreadFloors | None = None) -> pd.DataFrame:
    """Speed-ups that can be attributed: every pair of measured cells at the same workload, device,
    batch, sequence length and threads that differ in exactly one knob (``KNOBS``: precision, how the
    model runs, channels-last, IO binding), from the plainer setting to the other, at the pair's
    common boundary with its interval. Needs the summary's computation columns (records since they
    were added); otherwise empty."""
    ok = measured(summary)
    if "graph" not in ok or ok.empty:
        return pd.DataFrame()
    floors = floors if floors is not None else SpreadFloors.of(ok)
    shape = ["workload", "device", "batch_size", "seq_len", "threads"]
    rows = []
    # plain records, made once (a Series per row, or records per group, cost ~1 ms a cell or a group)
    every = ok.to_dict("records")
    for positions in ok.groupby(shape, sort=True).indices.values():
        records = [every[i] for i in positions]
        for i, a in enumerate(records):
            for b in records[i + 1 :]:
                differing = [k for k, cols in KNOBS.items() if _knob_value(a, cols) != _knob_value(b, cols)]
                if len(differing) != 1:
                    continue
                knob = differing[0]
                plain, other = _orient(a, b, knob)
                result = claim(other, plain, floors, "end_to_end" if knob in END_TO_END_KNOBS else None)
                if result is None:
                    continue
                rows.append(
                    {
                        **{c: plain[c] for c in shape},
                        "knob": knob,
                        "from_engine": plain["engine"],
                        "from_precision": plain["precision"],
                        "to_engine": other["engine"],
                        "to_precision": other["precision"],
                        "change": _describe_change(plain, other, knob),
                        **claim_columns(result, "speedup"),
                    }
                )
    return pd.DataFrame(rows)


def _orient(a: pd.Series, b: pd.Series, knob: str) -> tuple[pd.Series, pd.Series]:
    """(plainer, other): the cell whose knob is the plain setting (or whose first column is) first,
    else in name order."""
    plain = _PLAIN[knob]
    value_a, value_b = _knob_value(a, KNOBS[knob]), _knob_value(b, KNOBS[knob])
    for same in (lambda v: v == plain, lambda v: v[0] == plain[0]):
        if same(value_b) and not same(value_a):
            return b, a
        if same(value_a) and not same(value_b):
            return a, b
    return (a, b) if value_a <= value_b else (b, a)


#: a knob's plain setting in words, where its columns are empty for it
_PLAIN_WORDS = {"host_input": "pageable fp32"}


def _describe_change(plain: pd.Series, other: pd.Series, knob: str) -> str:
    def text(row: pd.Series) -> str:
        return " ".join(v for v in _knob_value(row, KNOBS[knob]) if v and v not in ("False", "True")) or (
            "on" if _knob_value(row, KNOBS[knob])[0] == "True" else _PLAIN_WORDS.get(knob, "off")
        )

    return f"{knob}: {text(plain)} → {text(other)}"


@dataclass(frozen=True)
class ClaimBasis:
    """What every claim about one run rests on, computed once so that every study of its report judges
    alike: the spread of each class over the run's measured cells (with the spread between leases where
    it was measured)."""

    floors: SpreadFloors

    @classmethod
    def of(cls, summary: pd.DataFrame, leases: LeaseSpread | None = None) -> ClaimBasis:
        return cls(SpreadFloors.of(measured(summary), leases))
