"""`inferbench compare` is linear in cells (issue 56): every summary field is read once per run and every
claim is judged in arrays, never one claim at a time in Python; and the arrays give exactly what the one-pair
calls the report makes give (``verdicts.claim``, ``comparison.compare``, ``comparison.spread_at``).

Linearity is counted, not timed (a busy machine times anything): the fields parsed, the tables read and the
array evaluations made for N and 4N rows. The seconds are benchmarks/tools/compare_scale.py's to report.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from inferbench.analysis import comparison, decisions, verdicts
from inferbench.analysis.compare_runs import Run, compare_cells
from inferbench.analysis.comparison import CellTable, ClassSpreads, compare, spread_at
from inferbench.analysis.leases import LeaseSpread
from inferbench.analysis.summary import measured
from inferbench.analysis.uncertainty import Ratios, Spreads, ratio
from inferbench.analysis.verdicts import Claims, claim
from inferbench.report.compare import column_wise_table, compare_runs
from inferbench.report.tables import markdown_table
from tests.conftest import REPO

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)

spec = importlib.util.spec_from_file_location("compare_scale", REPO / "benchmarks" / "tools" / "compare_scale.py")
compare_scale = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare_scale)


def counting(monkeypatch: pytest.MonkeyPatch, counts: Counter, owner: Any, name: str) -> None:
    """Count the calls of ``owner.name`` (a module's function, or a class's classmethod) as
    ``counts["<owner>.<name>"]``."""
    label = f"{owner.__name__.rsplit('.', 1)[-1]}.{name}"
    is_classmethod = isinstance(owner, type)
    function = getattr(owner, name).__func__ if is_classmethod else getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        counts[label] += 1
        return function(*args, **kwargs)

    monkeypatch.setattr(owner, name, classmethod(counted) if is_classmethod else counted)


def work_of_compare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: int) -> tuple[Counter, int]:
    """What one `inferbench compare` of two synthetic runs of ``rows`` rows each (option steps claimed too)
    does: the calls counted, and how many claims it judged."""
    tmp_path.mkdir()
    path_a, path_b = compare_scale.write_runs(tmp_path, rows, knobs=True)
    counts: Counter = Counter()
    with monkeypatch.context() as patch:
        counting(patch, counts, comparison, "_split")  # one summary field of process p50s parsed
        counting(patch, counts, CellTable, "of")  # a run's rows read
        counting(patch, counts, verdicts, "pair_ratios")  # claims judged: every pair at once
        counting(patch, counts, verdicts, "_verdict")  # a claim's verdict put in words
        for scalar in (Spreads, Ratios, Claims):  # one pair's spread, ratio or claim made into arrays
            counting(patch, counts, scalar, "of")
        _, agreement, _, _ = compare_runs(path_a, path_b)
    return counts, len(agreement)


def test_compare_reads_each_field_once_and_judges_every_claim_at_once(tmp_path, monkeypatch):
    small, small_claims = work_of_compare(tmp_path / "small", monkeypatch, 200)
    large, large_claims = work_of_compare(tmp_path / "large", monkeypatch, 800)
    assert large_claims >= 3 * small_claims > 300, "claims grow with the cells: fastest, speed-ups, option steps"
    # each run's two fields of process p50s a row, parsed once: 4x the rows, 4x the parsing
    assert small["comparison._split"] == 2 * 2 * 200 and large["comparison._split"] == 2 * 2 * 800
    # one table per run, and a fixed number of array evaluations, whatever the rows
    assert small["CellTable.of"] == large["CellTable.of"] == 2
    assert small["verdicts.pair_ratios"] == large["verdicts.pair_ratios"] <= 20
    # the one thing done claim by claim: its words in each run's column (a string each)
    assert small["verdicts._verdict"] == 2 * small_claims and large["verdicts._verdict"] == 2 * large_claims
    # and no claim made one pair at a time: no single spread, ratio or claim turned into arrays
    assert small["Spreads.of"] == small["Ratios.of"] == small["Claims.of"] == 0
    assert large["Spreads.of"] == large["Ratios.of"] == large["Claims.of"] == 0


# --- the arrays give what the one-pair calls give --------------------------------------------------------

ENGINES = [  # engine, precision, graph, precision_mode, channels_last, host_input
    ("torch_eager", "fp32", "eager", None, False, None),
    ("torch_eager", "fp16", "eager", "cast", False, None),
    ("torch_compile", "fp32", "inductor", None, False, None),
    ("torch_eager_cl", "fp32", "eager", None, True, None),
    ("ort_cuda", "fp32", "onnx", None, False, None),
    ("torch_staged", "fp32", "eager", None, False, "pinned fp16"),
]


def random_summary(rng: np.random.Generator, workloads: int = 4) -> pd.DataFrame:
    """Cells of every kind a claim meets: CPU and GPU, device- and host-bound and unclassified, timed at the
    device or end to end only, 1 to 5 processes or none recorded, with and without intervals, a few failed."""
    rows = []
    for workload, (engine, precision, graph, mode, channels_last, host), device, batch in itertools.product(
        range(workloads), ENGINES, ("cpu", "cuda"), (1, 8, 64)
    ):
        p50 = float(np.sqrt(batch) * (3 if device == "cpu" else 1) * rng.lognormal(0, 0.2))
        processes = p50 * rng.lognormal(0, rng.choice([0.001, 0.03, 0.2]), rng.choice([1, 2, 3, 5]))
        timing = "end_to_end" if engine == "ort_cuda" and rng.random() < 0.5 else "device"
        e2e = p50 * (1 + 0.3 * rng.random()) if timing == "device" and rng.random() < 0.85 else math.nan
        e2e_processes = e2e * rng.lognormal(0, 0.05, len(processes)) if rng.random() < 0.8 else None
        interval = rng.random() < 0.7
        rows.append({
            "workload": f"w{workload}", "engine": engine, "precision": precision, "device": device,
            "batch_size": batch, "seq_len": 0, "threads": 2 if device == "cpu" else 0, "scenario": "single",
            "status": "failed" if rng.random() < 0.05 else "ok", "engine_impl": engine, "mode": "inference",
            "timing": timing, "bound": rng.choice(["device", "host", None]) if device == "cuda" else None,
            "graph": graph, "precision_mode": mode, "channels_last": channels_last, "host_input": host,
            "latency_p50_ms": p50, "latency_p50_ci95_low_ms": p50 * 0.97 if interval else math.nan,
            "latency_p50_ci95_high_ms": p50 * 1.04 if interval else math.nan, "e2e_latency_p50_ms": e2e,
            "e2e_latency_p50_ci95_low_ms": e2e * 0.95 if interval else math.nan,
            "e2e_latency_p50_ci95_high_ms": e2e * 1.02 if interval else math.nan,
            "p50_by_process_ms": ";".join(f"{v:.6g}" for v in processes) if rng.random() < 0.9 else None,
            "e2e_p50_by_process_ms": ";".join(f"{v:.6g}" for v in e2e_processes)
            if e2e_processes is not None and not math.isnan(e2e) else None,
        })  # fmt: skip
    return pd.DataFrame(rows)


def floors_of(ok: pd.DataFrame, leases: bool) -> ClassSpreads:
    spread = LeaseSpread({"host": 0.08, "cpu": 0.05}, {"host": 10, "cpu": 10}, 3) if leases else None
    return ClassSpreads.of(ok, spread)


def same_numbers(found: tuple, expected: tuple) -> bool:
    """Equal, where a table's NaN is a claim's None (unknown)."""
    return np.array_equal(np.array(found, dtype=float), np.array(expected, dtype=float), equal_nan=True)


def same_claim(found: Any, expected: Any) -> None:
    """A claim (or ratio) of the arrays against the one-pair call's, field by field."""
    assert (found is None) == (expected is None)
    if expected is None:
        return
    assert found == expected  # every number, the other boundary's ratio and the leases
    for name in ("significant", "verdict", "boundaries_disagree", "known", "p_value"):
        if hasattr(expected, name):
            assert getattr(found, name) == getattr(expected, name), name


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("leases", [False, True], ids=["one lease", "three leases"])
def test_claims_of_every_pair_at_once_are_the_one_pair_claims(seed, leases):
    rng = np.random.default_rng(seed)
    ok = measured(random_summary(rng))
    floors = floors_of(ok, leases)
    table = CellTable.of(ok).moderated(floors)
    rows = ok.to_dict("records")
    faster, slower = rng.integers(0, len(ok), 300), rng.integers(0, len(ok), 300)
    boundaries = rng.choice(np.array([None, "device", "end_to_end"], dtype=object), 300)
    found = verdicts.claims(table.take(faster), table.take(slower), boundaries)
    columns = found.columns("x")
    for k, (i, j, boundary) in enumerate(zip(faster, slower, boundaries, strict=True)):
        expected = claim(rows[i], rows[j], floors, boundary)
        same_claim(found.claim(k), expected)
        same_claim(compare(ok.iloc[i], ok.iloc[j], boundary, floors), expected.ratio if expected else None)
        assert columns["verdict"][k] == (expected.verdict if expected else "unknown")
        assert columns["significant"][k] == (expected.significant if expected else None)
    assert len(ok) > 100 and found.present.sum() > 250 and found.significant().tolist().count(True) > 20


@pytest.mark.parametrize("leases", [False, True], ids=["one lease", "three leases"])
def test_each_rows_spread_in_the_table_is_its_own_spread(leases):
    ok = measured(random_summary(np.random.default_rng(11)))
    floors = floors_of(ok, leases)
    table = CellTable.of(ok).moderated(floors)
    for i, row in enumerate(ok.itertuples(index=False)):
        for boundary in ("device", "end_to_end"):
            assert table.spreads[boundary].row(i) == spread_at(row, boundary, floors)


#: a cell's key among the measured cells of one run (scenario aside: all single)
CELL_KEY = ["workload", "engine", "precision", "device", "batch_size", "seq_len", "threads"]


def rows_of(ok: pd.DataFrame, frame: pd.DataFrame, **renamed: str) -> list[dict]:
    """Each row of ``frame`` (a decisions table) as its cell's row of ``ok``, ``renamed`` naming the columns
    of ``frame`` that hold the key's (e.g. ``engine="to_engine"``)."""
    index = {tuple(row[c] for c in CELL_KEY): row for row in ok.to_dict("records")}
    columns = [renamed.get(c, c) for c in CELL_KEY]
    return [index[tuple(row[c] for c in columns)] for row in frame.to_dict("records")]


@pytest.mark.parametrize("seed", range(2))
def test_every_table_of_claims_is_its_rows_one_pair_claims(seed):
    ok = measured(random_summary(np.random.default_rng(100 + seed), workloads=6))
    floors = floors_of(ok, leases=seed == 1)
    best = decisions.best_cells(ok, floors)
    ranked = best[best["runner_up"].notna()]
    runner_up = {c: f"runner_up_{c}" for c in ("engine", "precision", "device", "threads")}
    for fastest, second, row in zip(rows_of(ok, ranked), rows_of(ok, ranked, **runner_up), ranked.to_dict("records"),
                                    strict=True):  # fmt: skip
        expected = claim(fastest, second, floors, row["boundary"])
        same_claim(row["claim"], expected)
        assert same_numbers((row["margin"], row["margin_low"], row["margin_high"]), (expected.value, expected.low,
                                                                                       expected.high))  # fmt: skip
        assert (row["verdict"], row["significant"]) == (expected.verdict, expected.significant)
    speedups = decisions.speedups(ok, floors)
    base = speedups.assign(engine=decisions.BASELINE_ENGINE, precision=decisions.BASELINE_PRECISION)
    for cell, baseline, row in zip(rows_of(ok, speedups), rows_of(ok, base), speedups.to_dict("records"), strict=True):
        expected = claim(cell, baseline, floors)
        same_claim(row["claim"], expected)
        assert same_numbers((row["speedup"], row["speedup_low"]), (expected.value, expected.low))
        assert row["verdict"] == expected.verdict
    steps = decisions.option_steps(ok, floors)
    to_rows, from_rows = (rows_of(ok, steps, engine=f"{e}_engine", precision=f"{e}_precision") for e in ("to", "from"))
    for after, before, row in zip(to_rows, from_rows, steps.to_dict("records"), strict=True):
        expected = claim(after, before, floors, "end_to_end" if row["knob"] == "host_input" else None)
        found = (row["speedup"], row["speedup_low"], row["speedup_high"])
        assert same_numbers(found, (expected.value, expected.low, expected.high))
        assert row["boundary"] == expected.boundary
        assert (row["verdict"], row["significant"]) == (expected.verdict, expected.significant)
    assert len(ranked) >= 15 and len(speedups) > 100 and set(steps["knob"]) >= {"precision", "graph", "host_input"}


def scaled(summary: pd.DataFrame, factors: np.ndarray) -> pd.DataFrame:
    """The summary with each cell's p50s (its figure and its processes', both boundaries) times its factor."""
    out = summary.copy()
    for p50, by_process in (("latency_p50_ms", "p50_by_process_ms"), ("e2e_latency_p50_ms", "e2e_p50_by_process_ms")):
        out[p50] = out[p50] * factors
        out[by_process] = [
            ";".join(f"{float(v) * f:.6g}" for v in str(text).split(";")) if isinstance(text, str) else text
            for text, f in zip(out[by_process], factors, strict=True)
        ]
    return out


def test_compare_judges_each_cell_as_the_one_pair_calls_do(tmp_path):
    """Each cell's interval across processes in compare's table, against the one-pair calls on its two rows."""
    rng = np.random.default_rng(5)
    a = random_summary(rng)
    b = scaled(a, rng.lognormal(0, 0.1, len(a)))
    for frame, name in ((a, "a.csv"), (b, "b.csv")):
        frame.to_csv(tmp_path / name, index=False)
    runs = [Run.load(tmp_path / name) for name in ("a.csv", "b.csv")]
    cells = compare_cells(*runs).set_index(CELL_KEY)
    ok = [run.summary[run.summary["status"] == "ok"] for run in runs]
    floors = [ClassSpreads.of(frame) for frame in ok]
    rows_b = {tuple(row[c] for c in CELL_KEY): row for row in ok[1].to_dict("records")}
    checked = 0
    for row_a in ok[0].to_dict("records"):
        if (row_b := rows_b.get(tuple(row_a[c] for c in CELL_KEY))) is None:
            continue
        row = cells.loc[tuple(row_a[c] for c in CELL_KEY)]
        for boundary, prefix in (("device", ""), ("end_to_end", "e2e_")):
            p50 = comparison.COLUMNS[boundary][0]
            if pd.isna(row_a[p50]) or pd.isna(row_b[p50]):
                assert pd.isna(row[f"{prefix}ratio"])
                continue
            spread_a, spread_b = spread_at(row_a, boundary, floors[0]), spread_at(row_b, boundary, floors[1])
            if not (spread_a.known and spread_b.known):
                assert row[f"{prefix}interval_from"] == "none" and pd.isna(row[f"{prefix}ratio_low"])
                continue
            # centred on the figures as their processes make them (the fast modes': CellTable)
            figures = [comparison.CellTable.of([row_x]).p50[boundary][0] for row_x in (row_a, row_b)]
            expected = ratio(spread_a, spread_b, figures[1] / figures[0])
            found = (row[f"{prefix}ratio_low"], row[f"{prefix}ratio_high"], row[f"{prefix}p_value"])
            assert same_numbers(found, (expected.low, expected.high, expected.p_value))
            checked += 1
    assert checked > 100


# --- the table compare prints --------------------------------------------------------------------------


def test_the_tables_made_a_column_at_a_time_are_markdown_tables(tmp_path):
    """compare prints its tables a column at a time (each distinct value formatted once): the same text as
    markdown_table's, for the cells' table and the claims' of random runs, and for fields of every kind."""
    rng = np.random.default_rng(9)
    a = random_summary(rng)
    b = scaled(a, rng.lognormal(0, 0.2, len(a))).assign(bound="host")
    paths = [tmp_path / "a.csv", tmp_path / "b.csv"]
    for frame, path in zip((a, b), paths, strict=True):
        frame.to_csv(path, index=False)
    cells, agreement, _, _ = compare_runs(*paths)
    mixed = pd.DataFrame({"mixed": [1, 1.0, True, "1", None, math.nan, "a|b", 2.5e-7, np.int64(3), 1],
                          "latency_ms": [0.5, None, 2.0, 2.0, 1e-5, math.nan, 3.0, 3.0, 0.5, 1e3]})  # fmt: skip
    tables: list[tuple[pd.DataFrame, list[tuple[str, str]]]] = [
        (cells, [(c, c) for c in cells.columns] + [("absent", "absent")]),
        (agreement, [(c, c) for c in agreement.columns]),
        (mixed, [("mixed", "mixed"), ("latency_ms", "latency"), ("absent", "absent")]),
        (cells.iloc[0:0], [("ratio", "B / A")]),
    ]
    for frame, columns in tables:
        assert column_wise_table(frame, columns) == markdown_table(frame, columns)
    assert len(cells) > 100 and agreement["problem"].any()
