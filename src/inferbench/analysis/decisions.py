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

from inferbench.analysis.comparison import CellTable, ClassSpreads, boundary_of, p50_at, p50_of, process_p50s, rate_at
from inferbench.analysis.leases import LeaseSpread
from inferbench.analysis.summary import measured
from inferbench.analysis.verdicts import Claims, claims
from inferbench.catalog.engines import PLAIN_COMPUTATION, PLAIN_PRECISION, TF32_SETTINGS

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


@dataclass(frozen=True)
class ClaimedPairs:
    """Pairs of rows of one run's measured cells that its report makes claims about, as positions into them
    (the cell said to be faster, the other), with the claims (one per pair, ``present`` False where none
    could be made)."""

    faster: np.ndarray
    slower: np.ndarray
    claims: Claims


def _groups(ok: pd.DataFrame, columns: list[str]) -> np.ndarray:
    """Each row's group of ``columns`` (numbered in the groups' sorted order; -1 where a key is missing)."""
    return ok.groupby(columns, sort=True).ngroup().fillna(-1).to_numpy(dtype=np.int64)


def fastest_pairs(ok: pd.DataFrame, table: CellTable) -> tuple[pd.DataFrame, ClaimedPairs]:
    """Per workload x batch x sequence length of ``ok`` (measured cells, ``table`` theirs: floored), in that
    order: its boundary (``boundary_of`` its cells), and its fastest cell and runner-up there (``best``,
    ``second``: positions, -1 where the fastest is the only cell); and the claims of each fastest over its
    runner-up. One sort of the whole frame, not one per group."""
    group = _groups(ok, list(SHAPE))
    listed = group >= 0
    per_group = pd.DataFrame({"group": group, "device": ok["device"].to_numpy(), "timed": table.timed_at_device})
    per_group = per_group[listed].groupby("group", sort=True)
    at_device = (per_group["device"].nunique(dropna=False) <= 1) & per_group["timed"].all()
    # each group's boundary, and each row's p50 at its group's (a row in no group: at neither)
    boundary = np.where(at_device.to_numpy(), "device", "end_to_end").astype(object)
    row_at_device = np.append(at_device.to_numpy(), False)[group]
    p50 = np.where(row_at_device, table.p50["device"], table.p50["end_to_end"])
    # one sort of every row: by group, then fastest first (a missing p50 last), ties in row order
    positions = np.flatnonzero(listed)
    ranked = positions[np.lexsort((positions, p50[positions], group[positions]))]
    starts = np.flatnonzero(np.diff(group[ranked], prepend=-2) != 0)  # where each group's rows begin
    has_second = np.diff(starts, append=len(ranked)) > 1
    best = ranked[starts]
    second = np.where(has_second, ranked[np.minimum(starts + 1, len(ranked) - 1)], -1)
    groups = pd.DataFrame({"best": best, "second": second, "boundary": boundary, "p50_ms": p50[best]})
    faster, slower = best[has_second], second[has_second]
    found = claims(table.take(faster), table.take(slower), boundary[has_second])
    return groups, ClaimedPairs(faster, slower, found)


def _objects(found: Claims) -> list[Any]:
    """Each claim as a ``Claim`` (None where none was made)."""
    return [found.claim(i) for i in range(len(found))]


def best_cells(summary: pd.DataFrame, classes: ClassSpreads | None = None) -> pd.DataFrame:
    """The fastest cell per workload x batch x sequence length, compared like with like (p50 at the
    group's common boundary), with its margin over the runner-up and how that margin holds
    (inferbench.analysis.verdicts). ``classes``: the run's spread per class (by default, of ``summary``)."""
    ok = measured(summary)
    classes = classes if classes is not None else ClassSpreads.of(ok)
    groups, pairs = fastest_pairs(ok, CellTable.of(ok).moderated(classes))
    if groups.empty:
        return pd.DataFrame()
    best, second = groups["best"].to_numpy(), groups["second"].to_numpy()
    has_second = second >= 0

    def column(name: str, positions: np.ndarray) -> list[Any]:
        return ok[name].iloc[positions].tolist() if name in ok else [None] * len(positions)

    def runner_ups(values: list[Any], missing: Any) -> list[Any]:
        """``values`` (one per group with a runner-up) at their groups, ``missing`` at the others."""
        out = [missing] * len(groups)
        for i, value in zip(np.flatnonzero(has_second).tolist(), values, strict=True):
            out[i] = value
        return out

    names = [f"{e} {p} {d}" for e, p, d in zip(*(column(c, second[has_second]) for c in CELL[:3]), strict=True)]
    margins = pairs.claims.columns("margin")
    frame = {c: column(c, best) for c in SHAPE}
    frame |= {"boundary": groups["boundary"].tolist()}
    frame |= {c: column(c, best) for c in CELL}
    frame |= {"p50_ms": groups["p50_ms"].tolist(), "bound": column("bound", best), "runner_up": runner_ups(names, None)}
    frame |= {c: runner_ups(margins[c], None) for c in ("margin", "margin_low", "margin_high")}
    frame |= {"verdict": runner_ups(margins["verdict"], "the only cell")}
    frame |= {"claim": runner_ups(_objects(pairs.claims), None)}
    if has_second.any():  # as each group's row names them: only where a group has a runner-up
        frame |= {f"runner_up_{c}": runner_ups(column(c, second[has_second]), math.nan) for c in CELL}
        frame |= {"significant": runner_ups(margins["significant"], math.nan)}
    return pd.DataFrame(frame)


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


#: the cells a speed-up is measured between: same workload, device, batch, sequence length and threads
SPEEDUP_KEY = ["workload", "device", "batch_size", "seq_len", "threads"]


def baseline_mask(frame: pd.DataFrame) -> np.ndarray:
    """Which rows of ``frame`` are FP32 eager cells, the baseline of every speed-up."""
    return ((frame["engine"] == BASELINE_ENGINE) & (frame["precision"] == BASELINE_PRECISION)).to_numpy()


def baseline_pairs(ok: pd.DataFrame, table: CellTable) -> ClaimedPairs:
    """Each cell of ``ok`` (measured cells, ``table`` theirs: floored) but FP32 eager against the FP32 eager
    cell of its ``SPEEDUP_KEY`` (the last where there are several), in ``ok``'s order, with its claim at
    the pair's common boundary; cells without such a baseline left out. One join, not a look-up per cell."""
    is_base = baseline_mask(ok)
    keys = ok[SPEEDUP_KEY].reset_index(drop=True).assign(position=np.arange(len(ok)))
    base = keys[is_base].dropna(subset=SPEEDUP_KEY).drop_duplicates(SPEEDUP_KEY, keep="last")
    cells = keys[~is_base].dropna(subset=SPEEDUP_KEY)  # a missing key matches nothing
    joined = cells.merge(base, on=SPEEDUP_KEY, suffixes=("", "_base")).sort_values("position")
    faster, slower = joined["position"].to_numpy(), joined["position_base"].to_numpy()
    return ClaimedPairs(faster, slower, claims(table.take(faster), table.take(slower)))


def speedups(summary: pd.DataFrame, classes: ClassSpreads | None = None) -> pd.DataFrame:
    """Each cell's p50 speed-up over FP32 eager PyTorch at the same workload, device, batch, sequence
    length and threads, as a claim (inferbench.analysis.verdicts): at the pair's common boundary, with a
    95% interval that counts the spread between processes (None where either cell ran in one process)."""
    ok = measured(summary)
    classes = classes if classes is not None else ClassSpreads.of(ok)
    columns = [*SPEEDUP_KEY, "engine", "precision", "boundary", "speedup", "speedup_low", "speedup_high",
               "significant", "verdict", "processes", "claim"]  # fmt: skip
    pairs = baseline_pairs(ok, CellTable.of(ok).moderated(classes))
    made = pairs.claims.present
    if not made.any():
        return pd.DataFrame([], columns=columns)
    found = pairs.claims.take(made)
    cells = pairs.faster[made]
    frame = {c: ok[c].iloc[cells].tolist() for c in (*SPEEDUP_KEY, "engine", "precision")}
    frame |= found.columns("speedup")
    n_a, n_b = found.ratio.n_a.tolist(), found.ratio.n_b.tolist()
    frame |= {"processes": [f"{a} / {b}" for a, b in zip(n_a, n_b, strict=True)], "claim": _objects(found)}
    return pd.DataFrame(frame, columns=columns)


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


def break_even(summary: pd.DataFrame, classes: ClassSpreads | None = None) -> pd.DataFrame:
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
    classes = classes if classes is not None else ClassSpreads.of(ok)
    pairs = baseline_pairs(ok, CellTable.of(ok).moderated(classes))
    records = ok.to_dict("records")  # plain records: a Series per row cost ~1 ms a cell
    rows = []
    for i, (position, base_position) in enumerate(zip(pairs.faster.tolist(), pairs.slower.tolist(), strict=True)):
        row, b = records[position], records[base_position]
        cold, base_cold = cold_start_total_s(row), cold_start_total_s(b)
        if cold is None or base_cold is None or pd.isna(row["import_s"]) or pd.isna(b["import_s"]):
            continue  # a cold start with the imports in it (a record from before they were timed apart)
        faster = pairs.claims.claim(i)
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
                **{c: row[c] for c in SPEEDUP_KEY},
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
    """A summary value as ``_settings`` spells it (None as empty, booleans as their names)."""
    return "" if value is None else str(value)


#: each knob's plain setting (as ``_settings`` spells it): a step goes from it to the other one
_PLAIN = {
    knob: tuple(_spelled({"precision": PLAIN_PRECISION, **PLAIN_COMPUTATION}[column]) for column in columns)
    for knob, columns in KNOBS.items()
}


def _settings(ok: pd.DataFrame, columns: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Each row's setting of a knob (its ``columns``), spelled: None and NaN as empty, the rest as text."""
    spelled = [_spelled_column(ok[c]) if c in ok else [""] * len(ok) for c in columns]
    return list(zip(*spelled, strict=True))


def _spelled_column(values: pd.Series) -> list[str]:
    present = values.notna().tolist()  # one test of the column, not pd.isna per field
    return [_spelled(v) if known else "" for v, known in zip(values.tolist(), present, strict=True)]


def option_step_pairs(ok: pd.DataFrame, table: CellTable) -> tuple[pd.DataFrame, ClaimedPairs]:
    """Every pair of cells of ``ok`` (measured cells, ``table`` theirs: floored) at the same workload, device,
    batch, sequence length and threads that differ in exactly one knob, in ``option_steps``' order: the knob
    and the change (``knob``, ``change``), and the claim that the other setting is faster than the plainer
    one (``faster``: the other, ``slower``: the plainer), at the end-to-end boundary for knobs that act
    before the device computes. The pairs come from one join on the shape; each knob's settings are coded
    once, and the plainer side and the change are worked out once per distinct pair of settings. No pair
    where the summary lacks the computation columns (records from before they were added)."""
    group = _groups(ok, SPEEDUP_KEY) if "graph" in ok else np.full(len(ok), -1)
    rows = pd.DataFrame({"group": group, "i": np.arange(len(ok))})[group >= 0]
    pairs = rows.merge(rows.rename(columns={"i": "j"}), on="group")
    pairs = pairs[pairs["i"] < pairs["j"]]
    pairs = pairs.iloc[np.lexsort((pairs["j"], pairs["i"], pairs["group"]))]
    first, second = pairs["i"].to_numpy(), pairs["j"].to_numpy()
    codes, settings = {}, {}
    for knob, columns in KNOBS.items():
        index: dict[tuple[str, ...], int] = {}
        codes[knob] = np.array([index.setdefault(v, len(index)) for v in _settings(ok, columns)], dtype=np.int64)
        settings[knob] = list(index)
    differs = np.stack([codes[knob][first] != codes[knob][second] for knob in KNOBS])
    step = differs.sum(axis=0) == 1
    first, second, knob_index = first[step], second[step], differs[:, step].argmax(axis=0)
    knobs = np.array(list(KNOBS), dtype=object)[knob_index]
    steps: dict[tuple[str, int, int], tuple[bool, str]] = {}  # per knob and pair of settings

    def oriented(knob: str, a: int, b: int) -> tuple[bool, str]:
        if (knob, a, b) not in steps:
            value_a, value_b = settings[knob][a], settings[knob][b]
            a_plain = _plain_first(value_a, value_b, knob)
            plain, other = (value_a, value_b) if a_plain else (value_b, value_a)
            steps[(knob, a, b)] = a_plain, _describe_change(plain, other, knob)
        return steps[(knob, a, b)]

    found = [oriented(k, codes[k][a], codes[k][b]) for k, a, b in zip(knobs.tolist(), first, second, strict=True)]
    a_plain = np.array([plain for plain, _ in found], dtype=bool)
    plain, other = np.where(a_plain, first, second), np.where(a_plain, second, first)
    boundary = np.where(np.isin(knobs, END_TO_END_KNOBS), "end_to_end", None).astype(object)
    details = pd.DataFrame({"knob": knobs, "change": [change for _, change in found]})
    return details, ClaimedPairs(other, plain, claims(table.take(other), table.take(plain), boundary))


def option_steps(summary: pd.DataFrame, classes: ClassSpreads | None = None) -> pd.DataFrame:
    """Speed-ups that can be attributed: every pair of measured cells at the same workload, device,
    batch, sequence length and threads that differ in exactly one knob (``KNOBS``: precision, how the
    model runs, channels-last, IO binding), from the plainer setting to the other, at the pair's
    common boundary with its interval. Needs the summary's computation columns (records since they
    were added); otherwise empty."""
    ok = measured(summary)
    if "graph" not in ok or ok.empty:
        return pd.DataFrame()
    classes = classes if classes is not None else ClassSpreads.of(ok)
    details, pairs = option_step_pairs(ok, CellTable.of(ok).moderated(classes))
    made = pairs.claims.present
    if not made.any():
        return pd.DataFrame()
    plain, other = pairs.slower[made], pairs.faster[made]
    frame = {c: ok[c].iloc[plain].tolist() for c in SPEEDUP_KEY}
    frame |= {"knob": details["knob"][made].tolist()}
    frame |= {"from_engine": ok["engine"].iloc[plain].tolist(), "from_precision": ok["precision"].iloc[plain].tolist()}
    frame |= {"to_engine": ok["engine"].iloc[other].tolist(), "to_precision": ok["precision"].iloc[other].tolist()}
    frame |= {"change": details["change"][made].tolist()}
    return pd.DataFrame(frame | pairs.claims.take(made).columns("speedup"))


def _plain_first(value_a: tuple[str, ...], value_b: tuple[str, ...], knob: str) -> bool:
    """Whether ``value_a`` is the plainer of two settings of ``knob``: the plain setting (or the one whose first
    column is plain) first, else in name order (TF32's settings in theirs: less TF32 first)."""
    plain = _PLAIN[knob]
    for same in (lambda v: v == plain, lambda v: v[0] == plain[0]):
        if same(value_b) and not same(value_a):
            return False
        if same(value_a) and not same(value_b):
            return True

    def order(value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(str(TF32_SETTINGS.index(v)) if v in TF32_SETTINGS else v for v in value)

    return order(value_a) <= order(value_b)


#: a knob's plain setting in words, where its columns are empty for it
_PLAIN_WORDS = {"host_input": "pageable fp32"}
#: fp32's TF32 settings in words
_TF32_WORDS = {"strict": "TF32 off", "conv": "TF32 in convolutions", "all": "TF32 everywhere"}


def _describe_change(plain: tuple[str, ...], other: tuple[str, ...], knob: str) -> str:
    def text(value: tuple[str, ...]) -> str:
        return " ".join(_TF32_WORDS.get(v, v) for v in value if v and v not in ("False", "True")) or (
            "on" if value[0] == "True" else _PLAIN_WORDS.get(knob, "off")
        )

    return f"{knob}: {text(plain)} → {text(other)}"


@dataclass(frozen=True)
class ClaimBasis:
    """What every claim about one run rests on, computed once so that every study of its report judges
    alike: the spread of each class over the run's measured cells (with the spread between leases where
    it was measured)."""

    classes: ClassSpreads

    @classmethod
    def of(cls, summary: pd.DataFrame, leases: LeaseSpread | None = None) -> ClaimBasis:
        return cls(ClassSpreads.of(measured(summary), leases))
