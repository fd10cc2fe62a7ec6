"""`inferbench compare` on two synthetic runs whose differences are known."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from inferbench.core.cells import CellKey, CellRecord
from inferbench.core.stats import latency_stats
from inferbench.core.storage import save_samples
from inferbench.launch.processes import merge_repeats
from inferbench.report.compare import compare_runs

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)


def write_cell(cells_dir: Path, key: CellKey, process_p50s_ms: list[float], seed: int) -> None:
    """A record measured in one process per entry of ``process_p50s_ms``: 400 calls each, spread 2%;
    GPU cells device-bound."""
    rng = np.random.default_rng(seed)
    records, samples = [], []
    for p50 in process_p50s_ms:
        calls = rng.normal(p50, 0.02 * p50, 400) * 1e-3
        stats = latency_stats(calls, key.batch_size)
        end_to_end = {"latency_ms": stats["latency_ms"], "latency_ci95_ms": stats["latency_ci95_ms"],
                      "n_iters": stats["n_iters"], "throughput_per_s": stats["throughput_per_s"]}  # fmt: skip
        records.append(
            CellRecord(
                key=key,
                status="ok",
                engine_impl=key.engine,
                timing="device",
                end_to_end=end_to_end,
                bound={"class": "device"} if key.device == "cuda" else None,
                latency_ms=stats["latency_ms"],
                latency_ci95_ms=stats["latency_ci95_ms"],
                n_iters=stats["n_iters"],
                throughput_per_s=stats["throughput_per_s"],
            )
        )
        samples.append({"device": calls, "end_to_end": calls})
    record, pooled = merge_repeats(records, samples)
    out = cells_dir / key.relpath
    save_samples(out, pooled)
    record.save(out)


def make_runs(tmp_path: Path) -> tuple[Path, Path]:
    eager = CellKey("resnet50", "torch_eager", "fp32", "cuda", 32, 0, 0)
    graph = CellKey("resnet50", "torch_cudagraph", "fp16", "cuda", 32, 0, 0)
    single = CellKey("mlp_heart", "ort_cpu", "fp32", "cpu", 1, 0, 2)
    runs = []
    for name, eager_p50s, graph_p50s, single_p50 in (
        ("a", [10.0, 10.1, 9.9], [5.0, 5.05, 4.95], [1.0]),
        ("b", [12.0, 12.1, 11.9], [5.02, 4.98, 5.0], [1.1]),  # eager 20% slower; the graph as it was
    ):
        cells = tmp_path / name / "cells"
        write_cell(cells, eager, eager_p50s, seed=1)
        write_cell(cells, graph, graph_p50s, seed=2)
        write_cell(cells, single, single_p50, seed=3)
        runs.append(tmp_path / name)
    return runs[0], runs[1]


def test_compare_flags_the_known_change_and_only_it(tmp_path):
    run_a, run_b = make_runs(tmp_path)
    cells, agreement, text, _ = compare_runs(run_a, run_b)
    by_engine = cells.set_index("engine")
    assert by_engine.loc["torch_eager", "change"] == "slower"
    assert 1.15 < by_engine.loc["torch_eager", "ratio"] < 1.25
    assert by_engine.loc["torch_eager", "interval_from"].startswith("processes (3 / 3)")
    assert by_engine.loc["torch_cudagraph", "change"] == "within noise"
    # one process each, and no other CPU cell to borrow a spread from: the interval comes from the
    # calls, and says it cannot see between processes
    assert by_engine.loc["ort_cpu", "change"] == "slower"
    assert by_engine.loc["ort_cpu", "interval_from"].startswith("calls within one process")
    # far beyond its processes' 1%: it holds over the whole comparison too; the calls' interval has no
    # p-value to judge it over all cells by
    assert by_engine.loc["torch_eager", "holds_over_all_cells"] is True
    assert by_engine.loc["ort_cpu", "holds_over_all_cells"] is None
    assert "3 cells ok in both runs: 1 faster" not in text and "2 slower, 1 within noise" in text
    # the CUDA graph is fastest at resnet50 b32 in both runs, significantly; its margin grew by the 20% eager
    # lost, beyond the processes' 1%, and with too few cells per class to measure how far the runs' cells
    # move in general, that counts
    fastest = agreement[agreement["claim"].str.startswith("fastest") & (agreement["workload"] == "resnet50")].iloc[0]
    assert not fastest["winner_changed"] and fastest["significant"]
    assert fastest["margin_change"] == pytest.approx(1.2, rel=0.03) and fastest["margin_moved"]


def test_compare_reports_a_significant_claim_that_reverses(tmp_path):
    run_a, run_b = make_runs(tmp_path)
    # in run B the CUDA graph cell becomes clearly slower than eager: the fastest cell changes
    write_cell(run_b / "cells", CellKey("resnet50", "torch_cudagraph", "fp16", "cuda", 32, 0, 0), [20.0, 20.2, 19.8], 4)
    _, agreement, text, _ = compare_runs(run_a, run_b)
    fastest = agreement[agreement["claim"].str.startswith("fastest") & (agreement["workload"] == "resnet50")].iloc[0]
    assert fastest["winner_changed"] and not fastest["agree"] and fastest["problem"]
    assert "called significant in a run" in text
    assert len(agreement[agreement["claim"].str.startswith("fastest")]) == 1, "one claim per pair, either way round"


def test_compare_flags_a_margin_that_moves_beyond_the_noise_with_the_same_winner(tmp_path):
    """The published case: the same cell fastest in both runs, 2× ahead in one and 1.2× in the other.
    Which cell wins agrees; by how much does not, and that is flagged."""
    run_a, run_b = make_runs(tmp_path)
    write_cell(run_b / "cells", CellKey("resnet50", "torch_eager", "fp32", "cuda", 32, 0, 0), [6.0, 6.05, 5.95], 5)
    for i, run in enumerate((run_a, run_b)):  # other device-bound cells, steady from one run to the other
        for batch in (64, 128, 256):
            key = CellKey("resnet50", "torch_cudagraph", "fp16", "cuda", batch, 0, 0)
            write_cell(run / "cells", key, [batch / 6.4 * f for f in (1.0, 1.01, 0.99)], 10 + i)
    _, agreement, text, leases = compare_runs(run_a, run_b)
    fastest = agreement[agreement["claim"].str.startswith("fastest") & (agreement["workload"] == "resnet50")].iloc[0]
    assert not fastest["winner_changed"] and fastest["margin_moved"] and fastest["problem"]
    assert fastest["margin_change"] == pytest.approx(0.6, rel=0.05)
    assert fastest["margin_change_high"] < 1 and "0 change their winner, " in text
    # the two runs' cells moved apart: the spread between them is measured per class and counted
    assert leases is not None and leases.leases == 2 and set(leases.sd_log) <= {"device", "host", "cpu"}


def test_the_spread_between_runs_widens_every_claim_and_says_on_how_many_leases(tmp_path):
    """Two cells 10% apart with tight processes: significant within one lease; with a class that moves
    30% between leases, the same claim is within the noise, and the verdict says it rests on 2 leases."""
    from inferbench.analysis.comparison import ClassSpreads
    from inferbench.analysis.leases import LeaseSpread
    from inferbench.analysis.verdicts import claim

    a = {
        "device": "cuda",
        "bound": "host",
        "timing": "device",
        "latency_p50_ms": 1.0,
        "p50_by_process_ms": "0.99;1.01;1.0",
    }
    b = {**a, "latency_p50_ms": 1.1, "p50_by_process_ms": "1.09;1.11;1.1"}
    frame = pd.DataFrame([a, b]).assign(status="ok")
    alone = claim(a, b, ClassSpreads.of(frame))
    assert alone.significant and alone.leases == 1 and alone.verdict == "significant"
    leases = LeaseSpread({"host": math.log(1.3)}, {"host": 20}, 2)
    spread = claim(a, b, ClassSpreads.of(frame, leases))
    assert spread.significant is False and spread.verdict == "within the spread between processes over 2 leases"
    assert spread.low < 1 < spread.high and spread.value == pytest.approx(alone.value)
    path = tmp_path / "leases.json"
    leases.save(path)
    assert LeaseSpread.load(path) == leases


def test_compare_cli_writes_markdown_and_csv(tmp_path):
    run_a, run_b = make_runs(tmp_path)
    md, csv = tmp_path / "compare.md", tmp_path / "compare.csv"
    done = subprocess.run(
        [sys.executable, "-m", "inferbench", "compare", str(run_a), str(run_b), "--out-md", str(md), "--out-csv",
         str(csv)], capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert md.read_text().startswith("# ") and "| torch_eager |" in done.stdout
    assert len(pd.read_csv(csv)) == 3


def test_serving_cells_are_compared_by_qps_and_verdict_not_by_p50(tmp_path):
    """Two serving runs: one cell reproduces (QPS within the tolerance), one moves 30% on the CPU, one
    changes its verdict; none enters the single-call table."""
    keys = ["workload", "engine", "precision", "device", "batch_size", "seq_len", "threads", "scenario"]

    def summary(rows: list[tuple]) -> Path:
        frame = pd.DataFrame(
            [
                dict(zip(keys, key, strict=True))
                | {
                    "status": status,
                    "serving_qps": qps,
                    "engine_impl": key[1],
                    "latency_p50_ms": None,
                    "bound": None,
                    "serving_harness_p99_ms": harness,
                    "serving_lowest_invalid_qps": invalid,
                }
                for key, status, qps, harness, invalid in rows
            ]
        )
        path = tmp_path / f"summary{len(list(tmp_path.iterdir()))}.csv"
        frame.to_csv(path, index=False)
        return path

    steady = ("mlp_heart", "ort_cpu", "fp32", "cpu", 1, 0, 2, "server")
    moved = ("mlp_heart", "ort_cpu", "fp32", "cpu", 8, 0, 2, "server")
    flipped = ("resnet50", "torch_cudagraph", "fp16", "cuda", 1, 0, 0, "server")
    offline = ("mlp_heart", "ort_cpu", "fp32", "cpu", 8, 0, 2, "offline")
    a = summary([(steady, "ok", 1000.0, 0.3, 1250.0), (moved, "ok", 1000.0, 0.4, 1250.0),
                 (flipped, "ok", 500.0, 0.4, None), (offline, "ok", 5000.0, 20.0, None)])  # fmt: skip
    b = summary([(steady, "ok", 1100.0, 0.5, 1375.0), (moved, "ok", 1300.0, 2.0, 1600.0),
                 (flipped, "invalid", None, 0.5, 400.0), (offline, "ok", 5100.0, 40.0, None)])  # fmt: skip
    cells, _, text, _ = compare_runs(a, b)
    assert cells.empty, "serving cells have no single-call p50 to compare"
    assert "4 serving cells in both runs: 1 change their verdict, 1 their QPS beyond the tolerance" in text
    assert "By scenario: offline 0 of 1 beyond the tolerance, 0 verdicts changed; server 1 of 3" in text
    # the harness floor: 0.4 -> 2.0 ms moved (5x, 1.6 ms); 0.3 -> 0.5 ms did not (under 0.5 ms apart)
    assert "Harness moved: in 1 of 3 server cells" in text
    from inferbench.analysis.compare_runs import Run
    from inferbench.scenarios.serving.answer import compare_serving

    table = compare_serving(Run.load(a), Run.load(b)).set_index(["workload", "batch_size"])
    assert table.loc[("mlp_heart", 1), "qps_ratio"] == pytest.approx(1.1)
    assert not table.loc[("mlp_heart", 1), "beyond_tolerance"]
    server = table[table["scenario"] == "server"]
    assert server.loc[("mlp_heart", 8), "beyond_tolerance"], "30% on the CPU is beyond its 20%"
    assert table.loc[("resnet50", 1), "verdict_changed"]
    assert server.loc[("mlp_heart", 8), "harness_moved"] and not server.loc[("mlp_heart", 1), "harness_moved"]
    # brackets: [1000, 1250) and [1100, 1375) meet; [1000, 1250) and [1300, 1600) do not; [500, inf) and
    # the invalid run's [0, 400) do not; an offline cell has none
    assert server.loc[("mlp_heart", 1), "brackets_overlap"] and not server.loc[("mlp_heart", 8), "brackets_overlap"]
    assert not table.loc[("resnet50", 1), "brackets_overlap"]
    assert pd.isna(table[table["scenario"] == "offline"]["brackets_overlap"]).all()
    assert "Brackets: in 1 of the 3 server cells with one in both runs" in text
    # the low end is the highest valid target, not its completed QPS (~1% below it): a run valid at the
    # target the other found invalid does not overlap it
    targets = pd.read_csv(a).assign(serving_target_qps=lambda f: f["serving_qps"] * 1.01)
    targets.loc[targets["batch_size"] == 1, ["serving_qps", "serving_target_qps"]] = [1365.0, 1375.0]
    targets.to_csv(a, index=False)
    table = compare_serving(Run.load(a), Run.load(b)).set_index(["workload", "batch_size", "scenario"])
    assert not table.loc[("mlp_heart", 1, "server"), "brackets_overlap"], "[1375, 1250) is empty"
    targets.loc[targets["batch_size"] == 1, "serving_target_qps"] = 1100.0
    targets.assign(serving_lowest_invalid_qps=1500.0).to_csv(a, index=False)
    table = compare_serving(Run.load(a), Run.load(b)).set_index(["workload", "batch_size", "scenario"])
    assert table.loc[("mlp_heart", 1, "server"), "brackets_overlap"], "[1100, 1500) meets [1100, 1375)"


def test_a_ratios_p_value_is_below_five_percent_exactly_where_its_95_interval_excludes_one():
    from inferbench.analysis.uncertainty import CellSpread, ClassSpread, ratio

    rng = np.random.default_rng(7)
    for i in range(200):
        a = CellSpread.from_processes(list(rng.lognormal(0, 0.1, rng.integers(2, 6))))
        b = CellSpread.from_processes(list(rng.lognormal(rng.normal(0, 0.15), 0.1, rng.integers(2, 6))))
        if i % 2:  # as compare does: centred on the pooled p50s' ratio, spreads moderated by a class's
            a, b = a.with_shift(0.05), b.moderated(ClassSpread(0.2, 12.0, 6, 0.2, 0.2, 12.0))
        value = math.exp(b.mean_log - a.mean_log + rng.normal(0, 0.02)) if i % 2 else None
        result = ratio(a, b, value)
        assert 0 <= result.p_value <= 1
        assert (result.p_value < 0.05) == result.significant
    assert ratio(CellSpread.from_processes([1.0]), CellSpread.from_processes([2.0])).p_value is None


def test_holm_keeps_only_the_changes_beyond_what_many_cells_give_by_chance():
    from inferbench.analysis.compare_runs import holm

    p_values = pd.Series([0.04, 0.0001, None, 0.5, 0.03, 0.001], index=list("abcdef"))
    holds = holm(p_values)
    # five cells judged: 0.0001 <= 0.05/5 and 0.001 <= 0.05/4 hold; 0.03 > 0.05/3 stops the rest
    assert holds.to_dict() == {"a": False, "b": True, "c": None, "d": False, "e": False, "f": True}
    assert all(p < 0.05 for p, held in zip(p_values, holds, strict=True) if held)
    # step-down, not Bonferroni: 0.013 > 0.05/4 holds once the smallest has (0.013 < 0.05/3)
    assert holm(pd.Series([0.001, 0.013, 0.02, 0.04])).tolist() == [True, True, True, True]
    # and it stops at the first that fails: 0.04 < 0.05/1 would hold alone, not after 0.02 > 0.05/3 failed
    assert holm(pd.Series([0.001, 0.02, 0.03, 0.04])).tolist() == [True, False, False, False]
    assert holm(pd.Series([None, None], dtype=object)).tolist() == [None, None]


def test_many_cells_that_did_not_change_hold_no_flag_over_the_whole_comparison(tmp_path):
    """Forty host-bound cells measured twice with nothing changed (10% between processes) and one that
    doubled: each cell's 95% interval may flag a few of the forty, the comparison as a whole keeps only
    the one that doubled, and says how many flags the noise alone gives."""
    rng = np.random.default_rng(3)
    paths = []
    for run in ("a", "b"):
        rows = []
        for batch in range(1, 42):
            centre = 3.0 if (run == "b" and batch == 41) else 1.0
            p50s = rng.lognormal(math.log(centre), 0.1, 5)
            rows.append({"workload": "mlp_heart", "engine": "torch_eager", "precision": "fp32", "device": "cuda",
                         "batch_size": batch, "seq_len": 0, "threads": 0, "status": "ok", "bound": "host",
                         "timing": "device", "latency_p50_ms": float(np.median(p50s)),
                         "p50_by_process_ms": ";".join(f"{p:.5f}" for p in p50s)})  # fmt: skip
        paths.append(tmp_path / f"{run}.csv")
        pd.DataFrame(rows).to_csv(paths[-1], index=False)
    cells, _, text, _ = compare_runs(*paths)
    holding = cells[cells["holds_over_all_cells"].astype(bool)]
    assert holding["batch_size"].tolist() == [41]
    flagged = int(cells["change"].isin(["faster", "slower"]).sum())
    assert flagged >= 2, "some unchanged cell flagged on its own interval: what the whole comparison removes"
    chance = f"about {0.05 * 41:.1f} would be flagged by chance with nothing changed"
    assert f"Of the 41 cells with an interval across processes, {chance}: of the {flagged} flagged" in text
    assert "**1 holds over all 41 cells at once**" in text and "b41-s0-t0 (3." in text
