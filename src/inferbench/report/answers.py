"""The report's first page: each study's question answered in the study's own units, from the study's own
cells only; then what was not measured here and why; then where the numbers come from.

Every figure here comes from one computation (inferbench.analysis: ``rate_at`` for items/s, ``claim`` for
every ratio, ``seq_scaling`` for exponents, ``training_speedups`` for training ratios), and each is shown
once. A table holds one unit per column, named in its header. A ratio carries its 95% interval across
processes, and where the two timing boundaries tell different stories both are given.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from inferbench.analysis import decisions
from inferbench.analysis.comparison import BOUNDARY_LABELS, boundary_of, is_true, p50_at, process_p50s, rate_at
from inferbench.analysis.decisions import ClaimBasis
from inferbench.analysis.summary import measured, split_scenarios, with_scenario
from inferbench.analysis.uncertainty import Ratio
from inferbench.analysis.verdicts import CONTENDED, OTHER_BOUNDARY, Claim, claim
from inferbench.catalog.engines import tf32_setting
from inferbench.catalog.layouts import LAYOUTS, study_percentiles
from inferbench.core.percentiles import samples_needed
from inferbench.engines.registry import HARNESS_ENGINES
from inferbench.report.observations import host_bound_lines, int8_lines, memory_line, physics_flags
from inferbench.report.studies import records_beside, row_key, study_rows, training_speedups
from inferbench.report.tables import cell_name, fmt, recipe
from inferbench.report.text import escape_markdown, inline_code, prose_with_code

#: a column's time unit, by the median of its values in ms: (name, factor from ms)
_UNITS = (("s", 1e-3, 1e3), ("ms", 1.0, 1.0), ("µs", 1e3, 1e-3), ("ns", 1e6, 0.0))


def time_unit(values_ms: Iterable[Any]) -> tuple[str, float]:
    """(unit, factor from ms) that puts the median of ``values_ms`` between 1 and 999."""
    finite = [float(v) for v in values_ms if v is not None and not pd.isna(v) and float(v) > 0]
    median = float(np.median(finite)) if finite else 1.0
    for name, factor, least in _UNITS:
        if median >= least:
            return name, factor
    return _UNITS[-1][:2]


def in_unit(value_ms: Any, factor: float) -> str:
    return "–" if value_ms is None or pd.isna(value_ms) else fmt(float(value_ms) * factor)


def interval_text(
    low: Any, high: Any, significant: Any, spread: tuple[Any, Any] | None = None, contended: bool = False
) -> str:
    """``95% CI 2.40–5.37`` (with ``, within the spread`` where it holds 1); ``1 process`` where unknown;
    ``processes 1.9–3.1`` where a cell's processes disagree beyond its class or landed in several modes
    (``spread``: the ratio's range over every pair of processes, which decides then); undecided where a cell
    was timed only while other work held the host's cores (``contended``)."""
    if contended:
        return f"undecided: {CONTENDED}"
    if spread is not None:
        verdict = "" if significant else ", undecided"
        return f"processes {fmt(float(spread[0]))}–{fmt(float(spread[1]))}{verdict}"
    if low is None or high is None or pd.isna(low) or pd.isna(high):
        return "1 process: no interval"
    dash = " to " if float(low) < 0 else "–"  # -0.4–1.8 reads as a subtraction
    return f"95% CI {fmt(float(low))}{dash}{fmt(float(high))}" + ("" if significant else ", within the spread")


def ratio_text(
    value: Any,
    low: Any,
    high: Any,
    significant: Any,
    spread: tuple[Any, Any] | None = None,
    contended: bool = False,
) -> str:
    """``3.59× (95% CI 2.40–5.37)``, or ``–``."""
    if value is None or pd.isna(value):
        return "–"
    return f"{fmt(float(value))}× ({interval_text(low, high, significant, spread, contended)})"


def _range(row: Any, prefix: str) -> tuple[float, float] | None:
    """A table row's range over the processes of an unstable pair (``claim_columns``), else None."""
    low, high = row.get(f"{prefix}_range_low"), row.get(f"{prefix}_range_high")
    return None if low is None or high is None or pd.isna(low) or pd.isna(high) else (float(low), float(high))


def process_range(ratio: Ratio) -> tuple[float, float] | None:
    """An unstable pair's range over its processes (what decides it), else None."""
    if not ratio.unstable or ratio.range_low is None or ratio.range_high is None:
        return None
    return ratio.range_low, ratio.range_high


def claim_text(result: Claim, name_boundary: bool = True) -> str:
    """A claim's ratio and interval at its boundary (named unless a table's header names it); and at the
    other boundary too where the two tell different stories beyond the spread (one holds, the other does
    not, or they point different ways)."""
    ratio = ratio_text(result.value, result.low, result.high, result.ratio.significant, process_range(result.ratio),
                       result.ratio.contended)  # fmt: skip
    text = f"{ratio} {BOUNDARY_LABELS[result.boundary]}" if name_boundary else ratio
    other = result.other
    if other is not None and (other.significant != result.ratio.significant or result.boundaries_disagree):
        boundary = BOUNDARY_LABELS[OTHER_BOUNDARY[result.boundary]]
        other_text = ratio_text(
            other.value, other.low, other.high, other.significant, process_range(other), other.contended
        )
        text += f"; {other_text} {boundary}"
    return text


def processes_text(row: Any, boundary: str, unit: tuple[str, float]) -> str:
    """Each process's p50 at ``boundary``: ``2 processes: 7.31–11.9 µs``, or ``1 process``."""
    values = sorted(process_p50s(row, boundary))
    if len(values) < 2:
        return "1 process"
    name, factor = unit
    return f"{len(values)} processes: {in_unit(values[0], factor)}–{in_unit(values[-1], factor)} {name}"


def grid_table(titles: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table (values already text; the first columns escaped by the caller)."""
    return [
        "| " + " | ".join(titles) + " |",
        "|" + "|".join("---" for _ in titles) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
    ]


def fastest_lines(cells: pd.DataFrame, basis: ClaimBasis, speedups_shown: bool = False) -> list[str]:
    """One line per shape with two or more cells: the fastest, each process's p50, and its margin over the
    runner-up (``decisions.best_cells``: at the shape's common boundary). Where the runner-up is FP32 eager
    and ``speedups_shown`` (the table above has each cell's speed-up over it) the margin is not repeated."""
    ok = measured(cells)
    baseline = f"{decisions.BASELINE_ENGINE} {decisions.BASELINE_PRECISION} "
    out = []
    for best in decisions.best_cells(ok, basis.classes).itertuples(index=False):
        if best.claim is None:
            continue
        shape = f"batch {fmt(int(best.batch_size))}" + (f", sequence {best.seq_len}" if best.seq_len else "")
        row = decisions.row_of(ok, best._asdict())
        unit = time_unit([best.p50_ms])
        line = (
            f"- {shape}: **{escape_markdown(cell_name(row))}** is fastest "
            f"({processes_text(row, best.boundary, unit)} per call)"
        )
        same_place = (best.runner_up_device, best.runner_up_threads) == (best.device, best.threads)
        if speedups_shown and str(best.runner_up).startswith(baseline) and same_place:
            out.append(line + ".")
            continue
        out.append(f"{line}; {claim_text(best.claim)} ahead of {escape_markdown(best.runner_up)}.")
    return out


def _one_side(ok: pd.DataFrame, study: dict[str, Any], what: str) -> list[str]:
    """Where a study spans devices and this run measured one: its CPU/GPU answer is not measured."""
    devices = sorted(ok["device"].unique())
    if study.get("spans_devices") and len(devices) == 1:
        return [f"- {what}: not measured here; only {devices[0]} cells ran."]
    return []


def by_batch_answer(cells: pd.DataFrame, study: dict[str, Any], basis: ClaimBasis) -> list[str]:
    """Per workload: p50 per item end to end against batch, one row per engine variant (the fastest of each
    batch in bold), the CPU/GPU crossover where both devices ran, and the fastest cell of each batch."""
    ok = measured(cells)
    out: list[str] = []
    for workload, frame in ok.groupby("workload", sort=False):
        frame = frame.assign(per_item=decisions.e2e_per_item_ms(frame))
        name, factor = time_unit(frame["per_item"])
        batches = sorted(frame["batch_size"].unique())
        fastest = frame.groupby("batch_size")["per_item"].min()
        rows = []
        lengths = frame["seq_len"].nunique() > 1
        labels = [cell_name(r) + (f" s{r['seq_len']}" if lengths else "") for _, r in frame.iterrows()]
        for label, series in frame.groupby(pd.Series(labels, index=frame.index), sort=True):
            by_batch = series.set_index("batch_size")["per_item"]
            values = [
                ("**{}**" if by_batch[b] == fastest[b] else "{}").format(in_unit(by_batch[b], factor))
                if b in by_batch
                else "–"
                for b in batches
            ]
            rows.append([escape_markdown(label), *values])
        out += [
            f"**{escape_markdown(workload)}**: p50 per item, end to end, in {name} (fastest per batch in bold):",
            "",
            *grid_table(["cell", *(f"batch {fmt(int(b))}" for b in batches)], rows),
        ]
        for cross in decisions.cpu_gpu_crossovers(frame).itertuples():
            out.append(f"- CPU or GPU: {cross.verdict}.")
        out += _one_side(frame, study, "CPU/GPU crossover")
        out += auc_line(frame)
        out += fastest_lines(frame, basis)
        out += physics_flags(frame, basis, claim_text)
        out.append("")
    return out


def auc_line(frame: pd.DataFrame) -> list[str]:
    """The held-out AUC of each engine variant as it ran (the parity gate scores the rows training held out),
    where the model was trained; the lowest over its batches."""
    if "parity_auc" not in frame or frame["parity_auc"].isna().all():
        return []
    aucs = frame.dropna(subset=["parity_auc"]).groupby(frame.apply(cell_name, axis=1))["parity_auc"].min()
    listed = ", ".join(f"{escape_markdown(name)} {fmt(float(auc))}" for name, auc in aucs.items())
    return [f"- Held-out AUC as each cell ran: {listed}."]


def _memory(frame: pd.DataFrame) -> tuple[str, pd.Series] | None:
    """The memory column of a table: the process's GPU memory (NVML; the allocator's peak where NVML has
    none) for GPU cells, resident host memory for CPU cells; never both in one column."""
    empty = pd.Series(index=frame.index, dtype=float)
    if (frame["device"] == "cuda").all():
        gpu = frame.get("gpu_process_peak_mb", empty).fillna(frame.get("gpu_peak_allocated_mb", empty))
        return ("GPU MB", gpu) if gpu.notna().any() else None
    if (frame["device"] == "cpu").all():
        host = frame.get("host_peak_rss_mb", empty)
        return ("host RSS MB", host) if host.notna().any() else None
    return None


def _tail(study: dict[str, Any], frame: pd.DataFrame, boundary: str) -> tuple[str, pd.Series] | None:
    """The study's highest percentile above p50 at ``boundary``, blank where a cell has too few calls."""
    tails = [p for p in study_percentiles(study) if p != "p50"]
    if not tails:
        return None
    percentile = tails[-1]
    own = frame.get(f"latency_{percentile}_ms")
    calls = frame.get("n_iters", pd.Series(index=frame.index, dtype=float))
    if own is None:
        return None
    values = own
    if boundary == "end_to_end":  # as p50_at: the engine's own figures where its own boundary is end to end
        values = frame.get(f"e2e_latency_{percentile}_ms", pd.Series(index=frame.index, dtype=float)).fillna(own)
        calls = frame.get("e2e_n_iters", pd.Series(index=frame.index, dtype=float)).fillna(calls)
    enough = pd.to_numeric(calls, errors="coerce").fillna(0) >= samples_needed([percentile])
    return percentile, values.where(enough)


def _known(value: Any) -> bool:
    return value is not None and not pd.isna(value)


def _parity(value: Any) -> str:
    return "–" if value is None or pd.isna(value) else f"{float(value):.1e}"


def _is_baseline(row: Any) -> bool:
    return (row["engine"], row["precision"]) == (decisions.BASELINE_ENGINE, decisions.BASELINE_PRECISION)


def speedups_possible(frame: pd.DataFrame) -> bool:
    """Whether ``frame`` has an FP32 eager cell (the baseline of its speed-ups) beside other cells."""
    return bool(decisions.baseline_mask(frame).any()) and len(frame) > 1


def baseline_changes(frame: pd.DataFrame) -> dict[Any, str] | None:
    """Per row of ``frame``: what its recipe adds to FP32 eager's at the same device and shape (engine,
    precision, layout, graph capture, TF32: inferbench.report.tables.recipe), so that a label names every
    change behind its speed-up; the baseline's own row says what its fp32 is. None where no cell changes
    more than its engine and precision, which its name says."""
    shape = ["device", "batch_size", "seq_len", "threads"]
    bases = {tuple(r[c] for c in shape): r for _, r in frame.iterrows() if _is_baseline(r)}
    out, beyond_name = {}, False
    for index, row in frame.iterrows():
        parts = recipe(row).split(" · ")
        if _is_baseline(row):
            out[index] = " · ".join(p for p in parts if p != "fp32") or "PyTorch's defaults"
            beyond_name |= out[index] != "PyTorch's defaults"
            continue
        base = bases.get(tuple(row[c] for c in shape))
        ours = set(recipe(base).split(" · ")) if base is not None else set()
        added = [p for p in parts if p not in ours]
        out[index] = " · ".join(added) or "–"
        graph = parts[0] if row.get("graph") not in (None, "eager", "none") and not pd.isna(row.get("graph")) else None
        beyond_name |= any(p != graph and not p.startswith(str(row["precision"])) for p in added)
    return out if beyond_name else None


def baseline_math_line(frame: pd.DataFrame) -> list[str]:
    """One sentence on the fp32 math of the table's FP32 eager cells on a GPU, where it is not what PyTorch
    users run by default (TF32 in convolutions only): an older summary's strict baseline, or a variant's."""
    base = frame[decisions.baseline_mask(frame)]
    settings = set(base["tf32"].dropna().map(tf32_setting)) if "tf32" in base else set()
    if settings in (set(), {"conv"}):
        return []
    if settings == {"strict"}:
        return [
            "- FP32 eager here is strict fp32, with TF32 off. PyTorch's default uses TF32 in convolutions. "
            "A speed-up over this baseline can overstate the gain over PyTorch's default FP32."
        ]
    return [f"- FP32 eager here runs with TF32 {', '.join(sorted(map(str, settings)))}, not PyTorch's default."]


def engines_answer(cells: pd.DataFrame, study: dict[str, Any], basis: ClaimBasis) -> list[str]:
    """Per workload, one table of its cells at one boundary: p50 and the study's tail percentile, items/s,
    memory, the speed-up over FP32 eager with its interval, parity against FP32 eager; then the fastest
    cell of each shape with its margin."""
    ok = measured(cells)
    speed = decisions.speedups(ok, basis.classes)
    key = ["workload", "device", "batch_size", "seq_len", "threads", "engine", "precision"]
    if not speed.empty:
        ok = ok.merge(speed[[*key, "speedup", "claim"]], on=key, how="left")
    out: list[str] = []
    for workload, frame in ok.groupby("workload", sort=False):
        boundary = boundary_of(frame)
        frame = frame.assign(p50=p50_at(frame, boundary), rate=rate_at(frame, boundary))
        frame = frame.sort_values(["batch_size", "seq_len", "p50"])
        name, factor = time_unit(frame["p50"])
        tail, memory = _tail(study, frame, boundary), _memory(frame)
        text = (frame["seq_len"] > 0).any()
        changes = baseline_changes(frame) if speedups_possible(frame) else None
        titles = ["batch", *(["seq"] if text else []), "cell", *(["changed from FP32 eager"] if changes else [])]
        titles += [f"p50 ({name})"]
        titles += [f"{tail[0]} ({name})"] if tail else []
        speedups = "speedup" in frame and frame["speedup"].notna().any()
        titles += ["items/s", *([memory[0]] if memory else []), *(["× FP32 eager"] if speedups else [])]
        titles += ["rel. L2 to FP32 eager"]
        aucs = "parity_auc" in frame and frame["parity_auc"].notna().any()
        titles += ["held-out AUC"] if aucs else []
        rows = []
        for index, row in frame.iterrows():
            values = [fmt(int(row["batch_size"])), *([fmt(int(row["seq_len"]))] if text else [])]
            values += [escape_markdown(cell_name(row)), *([escape_markdown(changes[index])] if changes else [])]
            values += [in_unit(row["p50"], factor)]
            values += [in_unit(tail[1][index], factor)] if tail else []
            values += [fmt(row["rate"]), *([fmt(memory[1][index])] if memory else [])]
            is_base = _is_baseline(row)
            found = row.get("claim")
            named = isinstance(found, Claim) and found.boundary != boundary  # the table's boundary goes unsaid
            speedup = "baseline" if is_base else claim_text(found, named) if isinstance(found, Claim) else "–"
            values += [speedup] if speedups else []
            values += ["reference" if is_base else _parity(row.get("parity_rel_l2"))]
            rows.append([*values, *([fmt(row.get("parity_auc"))] if aucs else [])])
        out += [
            f"**{escape_markdown(workload)}** at the {BOUNDARY_LABELS[boundary].replace('device boundary', 'device')} "
            "boundary; items/s = items per call / p50:".replace("end to end boundary", "end-to-end boundary"),
            "",
            *grid_table(titles, rows),
            *baseline_math_line(frame),
            *fastest_lines(frame, basis, speedups_shown=bool(speedups)),
            *(host_bound_lines(frame, basis, claim_text) if "bound" in frame else []),
            *memory_line(frame),
            *int8_lines(frame, basis, claim_text),
            *physics_flags(frame, basis, claim_text),
            "",
        ]
    return out


def _scaling_line(row: Any) -> str:
    series = escape_markdown(f"{cell_name(row._asdict() | {'threads': row.threads})} batch {row.batch_size}")
    if row.exponent is None or pd.isna(row.exponent):
        return f"- {series}: {row.points} lengths, too few for an exponent."
    if row.boundaries_disagree:
        return (f"- {series}: the boundaries disagree (k = {fmt(row.exponent)} at its own, "
                f"{fmt(row.exponent_e2e)} end to end); no exponent.")  # fmt: skip
    ci = interval_text(row.exponent_low, row.exponent_high, True).replace(", within the spread", "")
    verb = "grows with the length" if row.exponent > 0 else "falls with the length"
    verb += "" if row.significant else ", but only within the spread"
    host = "; host-bound: kernel launches set the time" if row.bound == "host" else ""
    return f"- {series}: p50 {verb}, length^k with k = {fmt(row.exponent)} ({ci}){host}."


def seq_answer(cells: pd.DataFrame, study: dict[str, Any], basis: ClaimBasis) -> list[str]:
    """Per workload: the study's percentiles against sequence length (one row per cell and batch, one unit),
    how p50 scales with length per series (an exponent with its interval, labelled host-bound where it
    is), and the CPU/GPU gap where both devices ran."""
    percentiles = study_percentiles(study)
    ok = measured(cells)
    out: list[str] = []
    for workload, frame in ok.groupby("workload", sort=False):
        name, factor = time_unit(frame["latency_p50_ms"])
        lengths = sorted(frame["seq_len"].unique())
        rows = []
        for (label, batch), series in frame.groupby([frame.apply(cell_name, axis=1), "batch_size"], sort=True):
            by_length = series.set_index("seq_len")
            values = []
            for length in lengths:
                if length not in by_length.index:
                    values.append("–")
                    continue
                row = by_length.loc[length]
                calls = row.get("n_iters")
                counted = [p == "p50" or (_known(calls) and calls >= samples_needed([p])) for p in percentiles]
                pairs = zip(percentiles, counted, strict=True)
                enough = [row.get(f"latency_{p}_ms") if ok else None for p, ok in pairs]
                values.append(" / ".join(in_unit(v, factor) for v in enough))
            rows.append([escape_markdown(label), fmt(int(batch)), *values])
        calls = pd.to_numeric(frame.get("n_iters", pd.Series(dtype=float)), errors="coerce").dropna()
        calls_text = ""
        if len(calls):
            low, high = int(calls.min()), int(calls.max())
            calls_text = f" ({fmt(low)}{f'–{fmt(high)}' if high != low else ''} calls per cell)"
        out += [
            f"**{escape_markdown(workload)}**: {' / '.join(percentiles)} in {name} at each engine's own "
            f"boundary{calls_text}:",
            "",
            *grid_table(["cell", "batch", *(f"seq {fmt(int(s))}" for s in lengths)], rows),
        ]
        out += [_scaling_line(r) for r in decisions.seq_scaling(frame).itertuples(index=False)]
        gap = _gap_lines(frame, basis)
        out += gap or _one_side(frame, study, "CPU/GPU gap")
        out += physics_flags(frame, basis, claim_text)
        out.append("")
    return out


def _gap_lines(frame: pd.DataFrame, basis: ClaimBasis) -> list[str]:
    """The GPU's lead over the CPU end to end as a claim, each device's fastest cell per batch and length:
    a table of batches by lengths."""
    leads: dict[int, dict[int, str]] = {}
    for (batch, length), shape in frame.groupby(["batch_size", "seq_len"], sort=True):
        best = {d: group.loc[decisions.e2e_p50_ms(group).idxmin()] for d, group in shape.groupby("device")}
        if {"cpu", "cuda"} <= set(best):
            lead = claim(best["cuda"], best["cpu"], basis.classes, "end_to_end")
            if lead is not None:
                leads.setdefault(int(batch), {})[int(length)] = claim_text(lead, name_boundary=False)
    if not leads:
        return []
    lengths = sorted({length for row in leads.values() for length in row})
    rows = [[fmt(b), *(row.get(n, "–") for n in lengths)] for b, row in leads.items()]
    return [
        "",
        "GPU over CPU end to end, each device's fastest cell:",
        "",
        *grid_table(["batch", *(f"seq {fmt(n)}" for n in lengths)], rows),
    ]


def training_answer(cells: pd.DataFrame, study: dict[str, Any], basis: ClaimBasis) -> list[str]:
    """Per workload: time per training call (an iteration or an epoch), items/s, the speed-up over the
    plain fp32 baseline and the GPU's over the CPU's, each with its interval across processes."""
    training = split_scenarios(cells).training
    rated = training_speedups(training[training["status"] == "ok"], study.get("engines", ()), basis.classes)
    out: list[str] = []
    for workload, frame in rated.groupby("workload", sort=False):
        boundary = boundary_of(frame)
        p50, rate = p50_at(frame, boundary), rate_at(frame, boundary)
        name, factor = time_unit(p50)
        ratios = [name for name in ("baseline", "cpu") if frame[f"speedup_vs_{name}"].notna().any()]
        rows = []
        for index, row in frame.sort_values(["batch_size", "device", "engine"]).iterrows():
            call = "epoch" if "epoch" in str(row["engine"]) else "iteration"
            rows.append([
                escape_markdown(cell_name(row)), escape_markdown(recipe(row)), fmt(int(row["batch_size"])), call,
                in_unit(p50[index], factor), fmt(rate[index]),
                *(ratio_text(*(row[f"speedup_vs_{name}{part}"] for part in ("", "_low", "_high", "_significant")),
                             _range(row, f"speedup_vs_{name}"), is_true(row.get(f"speedup_vs_{name}_contended")))
                  for name in ratios),
            ])  # fmt: skip
        baselines = sorted({str(b).split(" (")[0] for b in frame["baseline"].dropna()})
        over = f"; × baseline: over {escape_markdown(' or '.join(baselines))} on the same device" if baselines else ""
        titles = {"baseline": "× baseline", "cpu": "GPU speed-up over CPU"}
        out += [
            f"**{escape_markdown(workload)}**: p50 per call in {name}, {BOUNDARY_LABELS[boundary]}; items/s = "
            f"samples per call / p50{over}:",
            "",
            *grid_table(
                ["cell", "computes with", "batch", "call", f"p50 ({name})", "items/s", *(titles[r] for r in ratios)],
                rows,
            ),
        ]
        out += [*_one_side(frame, study, "GPU/CPU speed-up"), ""] if _one_side(frame, study, "x") else []
    return out


def plot_lines(study: dict[str, Any], plots: Sequence[Path], report_dir: Path, shown: set[Path]) -> list[str]:
    """The plots of a study's layout for its workloads, each plot once in the report."""
    out = []
    layout = LAYOUTS[study.get("layout", "engines")]
    sweeps = {"latency_vs_seq.png": "seq_lens", "latency_per_item.png": "batch_sizes", "throughput.png": "batch_sizes"}
    for path in plots:
        if path.name in sweeps and len(study.get(sweeps[path.name]) or []) < 2:
            continue  # a curve needs two points of the study's own axis
        if path.parent.name in study["workloads"] and path.name in layout.plots and path not in shown:
            shown.add(path)
            out += [f"![{escape_markdown(path.parent.name)} {path.stem}]({os.path.relpath(path, report_dir)})", ""]
    return out


def cannot_answer(study: dict[str, Any], cells: pd.DataFrame) -> str | None:
    """Why a study's cells here cannot answer its question, or None: none ran, none is valid, or a
    comparison of engines left with one engine (the others run on no device this study has here)."""
    left = {entry["what"]: entry["why"] for entry in study.get("left_out", [])}
    if cells.empty:
        return "; ".join(f"{what}: {why}" for what, why in left.items()) or "no cell of this study is in the run"
    valid = cells[(cells["status"] == "ok") & ~cells["engine_impl"].isin(HARNESS_ENGINES)]
    if valid.empty:
        return "no cell produced a valid measurement (see below)"
    ok = measured(cells)
    engines_left = [e for e in study.get("engines", []) if e in left]
    compares = study.get("layout", "engines") in ("engines", "by_batch", "seq")
    # a study that spans devices answers its CPU half without the GPU (its missing half named below it)
    if engines_left and compares and not study.get("spans_devices") and ok["engine"].nunique() < 2:
        missing = "; ".join(f"{inline_code(e)} {left[e]}" for e in engines_left)
        return f"it compares engines, and only {inline_code(ok['engine'].iloc[0])} ran here ({missing})"
    return None


def answers_section(
    everything: pd.DataFrame,
    studies: dict[str, dict[str, Any]],
    basis: ClaimBasis,
    plots: Sequence[Path] = (),
    report_dir: Path = Path("."),
) -> list[str]:
    """``## Answers``: per study of the run, its question and the answer its layout computes from the
    study's own cells (or one line on why this run cannot answer it), with its plots."""
    out = ["## Answers", ""]
    shown: set[Path] = set()
    for name, study in studies.items():
        cells = study_rows(everything, study)
        question = escape_markdown(study.get("question") or study.get("description") or name)
        # cells measured in turn (docs/measuring.md): a reader comparing them should know they met the host alike
        in_turn = ". Its cells took turns, one fresh process of each a round" if study.get("interleave") else ""
        out += [f"### {question[:1].upper() + question[1:]}", "", f"Study {inline_code(name)}{in_turn}.", ""]
        why = cannot_answer(study, cells)
        if why is not None:
            out += [f"Not answered here: {why}.", ""]
            continue
        layout = LAYOUTS[study.get("layout", "engines")]
        # a layout whose answer needs what no summary column holds reads the records beside the report
        extra = {"records": records_beside(cells, report_dir)} if layout.records else {}
        out += layout.first_page_function()(cells, study, basis, **extra)
        if study.get("layout", "engines") != "training" and not split_scenarios(cells).training.empty:
            out += training_answer(cells, study, basis)
        out += plot_lines(study, plots, report_dir, shown)
    return out


def _cell_list(rows: pd.DataFrame, limit: int = 3) -> str:
    names = [
        f"{r.workload} {cell_name(r)} b{r.batch_size}" + (f" s{r.seq_len}" if r.seq_len else "")
        for r in rows.itertuples(index=False)
    ]
    shown = ", ".join(names[:limit])
    return escape_markdown(shown + (f" and {len(names) - limit} more" if len(names) > limit else ""))


def not_measured_section(everything: pd.DataFrame, studies: dict[str, dict[str, Any]]) -> list[str]:
    """``## Not measured here, and why``: what each study names that has no cell on this machine, and the
    cells that ran without a valid measurement, grouped by status and reason."""
    out = ["## Not measured here, and why", ""]
    by_reason: dict[str, dict[str, list[str]]] = {}
    for name, study in studies.items():
        for entry in study.get("left_out", []):
            by_reason.setdefault(entry["why"], {}).setdefault(entry["what"], []).append(name)
    engines = {engine for study in studies.values() for engine in study.get("engines", [])}
    for why, whats in by_reason.items():
        by_studies: dict[tuple[str, ...], list[str]] = {}
        for what, names in whats.items():
            by_studies.setdefault(tuple(names), []).append(
                inline_code(what) if what in engines else escape_markdown(what)
            )
        parts = [
            f"{', '.join(named)} of {', '.join(inline_code(n) for n in names)}" for names, named in by_studies.items()
        ]
        text = "; ".join(parts)
        out.append(f"- {text[:1].upper() + text[1:]}: {escape_markdown(why)}.")
    out += own_grid_lines(studies)
    out += thread_budget_lines(everything)
    named = {cell for study in studies.values() for cell in study.get("cells", [])}
    rows = {row_key(row).cell_id for row in with_scenario(everything).itertuples(index=False)}
    missing = sorted(named - rows)
    if missing:
        shown = ", ".join(inline_code(cell) for cell in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        out.append(
            f"- {len(missing)} cell(s) the studies name have no row in the summary: {shown}{more}. A record removed, "
            "or the run stopped before them: the same command measures them."
        )
    not_ok = everything[everything["status"] != "ok"]
    if not not_ok.empty:
        reasons = not_ok.assign(first=not_ok["reason"].fillna("no reason recorded").astype(str).map(_first_line))
        for (status, reason), rows in reasons.groupby(["status", "first"], sort=True):
            out.append(f"- {len(rows)} {escape_markdown(status)}: {prose_with_code(reason)} ({_cell_list(rows)}).")
    if len(out) == 2:  # claimed of the studies only where the run said which cells they name
        out.append("Nothing: every cell the studies name ran and is `ok`." if named
                   else "Nothing: every cell of the summary is `ok`.")  # fmt: skip
    return [*out, ""]


#: how an axis of a seed's own grid reads in a list of what the run cut
_AXIS_WORDS = {"engines": "engines", "precisions": "precisions", "batch_sizes": "batch", "seq_lens": "sequence",
               "threads": "threads", "percentiles": "percentiles"}  # fmt: skip


def own_grid_lines(studies: dict[str, dict[str, Any]]) -> list[str]:
    """What the run's studies cut from their seeds' own grids (``cut_from_own_grid``), and what measures it."""
    parts = []
    for name, study in studies.items():
        cut = study.get("cut_from_own_grid") or {}
        if cut:
            values = "; ".join(
                f"{_AXIS_WORDS[axis]} {', '.join(inline_code(v) if axis == 'engines' else fmt(v) for v in found)}"
                for axis, found in cut.items()
            )
            parts.append(f"{inline_code(name)}: {values}")
    if not parts:
        return []
    return [
        "- Cut from the seeds' own grids, for time: " + ". ".join(parts) + ". The study's preset measures its own "
        "grid (`config/studies/<study>.yaml`; `full.yaml`: all)."
    ]


def thread_budget_lines(everything: pd.DataFrame) -> list[str]:
    """The CPU cells' thread budget against the host's CPUs: every GPU-over-CPU ratio is against it."""
    cpu = everything[everything["device"] == "cpu"]
    if cpu.empty or "host_cpus" not in cpu or cpu["host_cpus"].isna().all():
        return []
    threads = sorted({int(t) for t in cpu["threads"].dropna()})
    host = int(pd.to_numeric(cpu["host_cpus"], errors="coerce").max())
    used = " or ".join(str(t) for t in threads)
    return [f"- CPU cells use {used} threads of this host's {host} CPUs: every GPU-over-CPU ratio is against that."]


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "no reason recorded"
    return line if len(line) <= 200 else line[:197] + "..."


def summary_line(everything: pd.DataFrame) -> str:
    counts = everything["status"].value_counts()
    return f"{len(everything)} cells: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + "."
