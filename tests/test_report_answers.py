"""The report's first page on summaries built to tempt each defect a real report once showed (issue 52): a
study answered by cells that cannot answer it, the sequence plot at the wrong batch, a pair that only one
boundary separates, two processes far apart behind a narrow interval, int8 without its parity, two
throughputs for one cell, units that do not match their header, the committed reports' length."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from inferbench.analysis.summary import read_summary_csv
from inferbench.plan.config import validate_config
from inferbench.plan.grid import left_out, resolved_studies
from inferbench.report.answers import time_unit
from inferbench.report.markdown import build_details, build_report
from inferbench.report.plots import engine_colour, seq_plot_batch
from inferbench.report.studies import study_rows
from tests.test_decisions import cell, processes

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)

REPO = Path(__file__).resolve().parents[1]
GPU = {"device": "cuda", "threads": 0}


def section(report: str, study: str) -> str:
    """The answer of one study: from its heading's ``Study `name`.`` line to the next heading."""
    start = report.index(f"Study `{study}`.")
    end = min(i for i in (report.find("\n### ", start), report.find("\n## ", start)) if i != -1)
    return report[start:end]


def table_rows(text: str) -> list[list[str]]:
    """Each row of the Markdown tables in ``text``, its cells stripped (header and rule lines left out)."""
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows if not row.startswith("|---")]


def test_a_study_never_answers_a_cpu_question_with_the_cpu_cells_of_another_study():
    """On a GPU machine `devices: [auto]` is cuda: the CPU study's engines have no cell, while another study of
    the run measured ONNX Runtime on the CPU. The CPU study says it cannot answer, and why."""
    rows = pd.DataFrame([
        cell(workload="mlp_lendingclub", engine="torch_eager", latency_p50_ms=0.2, **GPU),
        cell(workload="mlp_lendingclub", engine="ort_cpu", engine_impl="ort_cpu", latency_p50_ms=0.01),
        cell(workload="mlp_lendingclub", engine="ort_cpu", engine_impl="ort_cpu", precision="int8",
             latency_p50_ms=0.02),
    ]).assign(scenario="single")  # fmt: skip
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    config = validate_config(config | {
        "run": ["cpu_engines", "cpu_int8"],
        "studies": {
            "cpu_engines": {"question": "which CPU runtime is fastest?", "workloads": ["mlp_lendingclub"],
                            "engines": ["torch_eager", "ort_cpu", "openvino"], "devices": ["auto"],
                            "batch_sizes": [1], "threads": [2]},
            "cpu_int8": {"question": "what does int8 buy on the CPU?", "workloads": ["mlp_lendingclub"],
                         "engines": ["ort_cpu"], "precisions": ["fp32", "int8"], "devices": ["cpu"],
                         "batch_sizes": [1], "threads": [2]},
        },
    })  # fmt: skip
    studies = resolved_studies(config, has_cuda=True)
    report = build_report(rows, studies=studies)
    answer = section(report, "cpu_engines")
    assert "Not answered here: it compares engines, and only `torch_eager` ran here" in answer
    assert "`ort_cpu` cpu-only, and the study runs on cuda here" in answer
    assert "ort_cpu fp32" not in answer and "|" not in answer, "no table of cells that cannot answer it"
    # the other study answers from its own cells: ONNX Runtime fp32 against int8 on the CPU
    assert "**ort_cpu fp32 cpu 2t** is fastest" in section(report, "cpu_int8")
    not_measured = report[report.index("## Not measured here, and why") :]
    assert "- `ort_cpu`, `openvino` of `cpu_engines`: cpu-only, and the study runs on cuda here" in not_measured
    # no run-wide CPU-against-GPU verdict anywhere: every answer is a study's
    assert "CPU or GPU" not in report


def test_a_study_that_needs_a_gpu_is_listed_as_such_on_a_cpu_machine():
    study = {"workloads": ["resnet50"], "engines": ["torch_eager"], "devices": ["cuda"], "requires_gpu": True}
    assert left_out(study, {"torch_eager": {"engine": "torch_eager"}}, has_cuda=False) == [
        {"what": "every cell", "why": "needs a GPU, and none is visible here"}
    ]
    spans = {"workloads": ["mlp_heart"], "engines": ["torch_eager"], "devices": ["cpu", "auto"]}
    assert left_out(spans, {"torch_eager": {"engine": "torch_eager"}}, has_cuda=False) == [
        {"what": "the GPU side", "why": "needs a GPU, and none is visible here"}
    ]
    report = build_report(
        pd.DataFrame([cell()]).assign(scenario="single"),
        studies={"gpu": {**study, "left_out": left_out(study, {"torch_eager": {"engine": "torch_eager"}}, False)}},
    )
    assert "Not answered here: every cell: needs a GPU, and none is visible here." in section(report, "gpu")


def seq_rows() -> pd.DataFrame:
    """A sweep at batch 1 over three lengths beside one length at batch 4; host-bound GPU cells whose p50
    barely moves (k about 0.01), and CPU cells growing as length^0.8."""
    rows = []
    for seq in (32, 64, 128):
        p50 = 0.5 * (seq / 32) ** 0.8
        rows.append(cell(workload="bert_base", engine="ort_cpu", engine_impl="ort_cpu", seq_len=seq,
                         latency_p50_ms=p50, n_iters=120, latency_p99_ms=p50 * 1.3, latency_p90_ms=p50 * 1.1,
                         p50_by_process_ms=processes(p50 * 0.99, p50 * 1.01)))  # fmt: skip
        gpu = 5.0 * (seq / 32) ** 0.01
        rows.append(cell(workload="bert_base", seq_len=seq, latency_p50_ms=gpu, bound="host", n_iters=30,
                         p50_by_process_ms=processes(gpu * 0.9, gpu * 1.1), **GPU))  # fmt: skip
    rows.append(cell(workload="bert_base", engine="ort_cpu", engine_impl="ort_cpu", seq_len=128, batch_size=4,
                     latency_p50_ms=8.0, n_iters=120))  # fmt: skip
    return pd.DataFrame(rows).assign(scenario="single")


SEQ = {"workloads": ["bert_base"], "engines": ["torch_eager", "ort_cpu"], "devices": ["cpu", "cuda"],
       "batch_sizes": [1, 4], "seq_lens": [32, 64, 128], "threads": [2], "layout": "seq",
       "percentiles": ["p50", "p90", "p99"], "spans_devices": True}  # fmt: skip


def test_the_sequence_plot_shows_the_batch_with_the_most_lengths():
    assert seq_plot_batch(seq_rows()) == 1
    assert seq_plot_batch(pd.DataFrame({"batch_size": [1, 8, 8], "seq_len": [128, 64, 128]})) == 8


def test_the_sequence_answer_labels_a_host_bound_exponent_and_words_it_by_its_interval():
    answer = section(build_report(seq_rows(), studies={"seq": SEQ}), "seq")
    cpu = next(line for line in answer.splitlines() if line.startswith("- ort_cpu fp32 cpu 2t batch 1:"))
    assert "p50 grows with the length, length^k with k = 0.800 (95% CI" in cpu and "host-bound" not in cpu
    gpu = next(line for line in answer.splitlines() if line.startswith("- torch_eager fp32 cuda batch 1:"))
    assert "grows with the length, but only within the spread" in gpu and "95% CI -" in gpu and " to " in gpu
    assert "host-bound: kernel launches set the time" in gpu
    assert not any(line.startswith("- ort_cpu fp32 cpu 2t batch 4:") and "k =" in line for line in answer.splitlines())
    # p50 / p90 / p99 where the calls are enough (120 on the CPU), p50 alone on the GPU cells (30 calls)
    rows = {row[0] + " b" + row[1]: row[2:] for row in table_rows(answer)[1:]}
    assert rows["ort_cpu fp32 cpu 2t b1"][0] == "0.500 / 0.550 / 0.650"
    assert rows["torch_eager fp32 cuda b1"][0] == "5.00 / – / –"
    assert rows["ort_cpu fp32 cpu 2t b4"] == ["–", "–", "8.00 / – / –"]
    gap = answer[answer.index("GPU over CPU end to end") :]
    header, first = table_rows(gap)[:2]
    assert header[0] == "batch" and "seq 128" in header and first[0] == "1"
    lead = first[header.index("seq 128")]
    assert lead.endswith(")") and "end to end" not in lead, "the title names the boundary"


def boundary_pair() -> pd.DataFrame:
    """BERT-base b1: the CUDA graph 1.04x ahead of torch.compile on the device, within the spread; end to end
    877 µs against 1.52 ms (1.73x), far beyond it."""
    return pd.DataFrame([
        cell(workload="bert_base", seq_len=128, engine="torch_cudagraph", engine_impl="torch_cudagraph",
             precision="fp16", latency_p50_ms=0.50, e2e_latency_p50_ms=0.877, bound="host",
             p50_by_process_ms=processes(0.48, 0.52), e2e_p50_by_process_ms=processes(0.875, 0.879), **GPU),
        cell(workload="bert_base", seq_len=128, engine="torch_compile_ro", engine_impl="torch_compile",
             precision="fp16", latency_p50_ms=0.52, e2e_latency_p50_ms=1.52, bound="host",
             p50_by_process_ms=processes(0.50, 0.54), e2e_p50_by_process_ms=processes(1.51, 1.53), **GPU),
    ]).assign(scenario="single")  # fmt: skip


def test_where_the_boundaries_tell_different_stories_the_answer_gives_both():
    study = {"workloads": ["bert_base"], "engines": ["torch_cudagraph", "torch_compile_ro"], "precisions": ["fp16"],
             "devices": ["cuda"], "batch_sizes": [1], "seq_lens": [128], "layout": "engines"}  # fmt: skip
    answer = section(build_report(boundary_pair(), studies={"text": study}), "text")
    line = next(line for line in answer.splitlines() if "is fastest" in line)
    assert "**torch_cudagraph fp16 cuda** is fastest" in line
    assert re.search(r"1\.04× \(95% CI [\d.]+–[\d.]+, within the spread\) device boundary; 1\.73× \(95% CI", line)
    assert line.rstrip(".").endswith("end to end ahead of torch_compile_ro fp16 cuda")


def test_a_cell_whose_processes_disagree_shows_their_range_and_a_wide_interval():
    """Two processes at 7.31 and 11.9 µs: the answer shows both, and its margin's interval is wide, never the
    pooled calls' 11.5–11.5 µs."""
    rows = pd.DataFrame([
        cell(workload="mlp_heart", engine="ort_cpu", engine_impl="ort_cpu", latency_p50_ms=0.0115,
             latency_p50_ci95_low_ms=0.01149, latency_p50_ci95_high_ms=0.01151,
             p50_by_process_ms=processes(0.00731, 0.0119)),
        cell(workload="mlp_heart", latency_p50_ms=0.0120, p50_by_process_ms=processes(0.0119, 0.0121)),
    ]).assign(scenario="single")  # fmt: skip
    report = build_report(rows)
    line = next(line for line in report.splitlines() if "is fastest" in line)
    assert "(2 processes: 7.31–11.9 µs per call)" in line
    assert "11.5 µs – 11.5 µs" not in report
    # its processes landed in two modes and the run has no twins: every pair of processes decides
    low, high = (float(v) for v in re.search(r"processes ([\d.]+)–([\d.]+), undecided", report).groups())
    assert low <= 1 < high and high / low > 1.5, "the range counts how far the two processes are apart"


def test_an_int8_cell_shows_its_parity_beside_its_speed_and_every_table_names_one_unit():
    rows = pd.DataFrame([
        cell(workload="distilbert", seq_len=128, engine="ort_cpu", engine_impl="ort_cpu", precision="int8",
             latency_p50_ms=56.4, parity_rel_l2=0.019, p50_by_process_ms=processes(55.6, 57.1), host_peak_rss_mb=899),
        cell(workload="distilbert", seq_len=128, engine="ort_cpu", engine_impl="ort_cpu", latency_p50_ms=96.2,
             parity_rel_l2=5.4e-7, p50_by_process_ms=processes(94.8, 98.1), host_peak_rss_mb=1277),
        cell(workload="distilbert", seq_len=128, latency_p50_ms=1210.0, p50_by_process_ms=processes(1200, 1220),
             host_peak_rss_mb=801),
    ]).assign(scenario="single")  # fmt: skip
    report = build_report(rows)
    header, *cells = table_rows(report)
    assert header[:4] == ["batch", "seq", "cell", "p50 (ms)"], "no change beyond what the names say: no column"
    assert "rel. L2 to FP32 eager" in header and "host RSS MB" in header and "GPU MB" not in header
    by_cell = {row[2]: dict(zip(header, row, strict=True)) for row in cells}
    assert by_cell["ort_cpu int8 cpu 2t"]["rel. L2 to FP32 eager"] == "1.9e-02"
    assert by_cell["torch_eager fp32 cpu 2t"]["rel. L2 to FP32 eager"] == "reference"
    # one unit for the column, the one its header names: 1,210 ms, not 1.21 s beside 56.4 ms
    assert by_cell["torch_eager fp32 cpu 2t"]["p50 (ms)"] == "1,210"
    # one throughput: items per call over the p50 shown beside it
    for row in by_cell.values():
        assert float(row["items/s"].replace(",", "")) == pytest.approx(1e3 / float(row["p50 (ms)"].replace(",", "")),
                                                                       rel=0.01)  # fmt: skip
    assert by_cell["ort_cpu int8 cpu 2t"]["× FP32 eager"].startswith("21.5× (95% CI")


def test_time_units_follow_the_median_of_a_column():
    assert time_unit([0.0124, 0.093]) == ("µs", 1e3)
    assert time_unit([65.8, 1199.0, 95.1]) == ("ms", 1.0)
    assert time_unit([1500.0, 2500.0]) == ("s", 1e-3)
    assert time_unit([0.00005]) == ("ns", 1e6)


def epoch_cell(engine: str, device: str, p50: float, spread: float = 0.01) -> dict:
    """A training epoch, timed end to end: a record fills both boundaries' columns alike."""
    by_process = processes(p50 * (1 - spread), p50 * (1 + spread))
    return cell(workload="mlp_heart", engine=engine, engine_impl="torch_train_epoch", mode="train", batch_size=32,
                device=device, threads=2 if device == "cpu" else 0, latency_p50_ms=p50, timing="end_to_end",
                items_per_call=1000, p50_by_process_ms=by_process, e2e_p50_by_process_ms=by_process)  # fmt: skip


def test_training_speedups_carry_intervals_across_processes():
    rows = pd.DataFrame([
        epoch_cell("train_epoch", "cpu", 10.0), epoch_cell("train_epoch", "cuda", 20.0),
        epoch_cell("train_epoch_loader", "cpu", 40.0, spread=0.3),
    ]).assign(scenario="single")  # fmt: skip
    study = {"workloads": ["mlp_heart"], "engines": ["train_epoch", "train_epoch_loader"], "devices": ["cpu", "cuda"],
             "batch_sizes": [32], "threads": [2], "layout": "training"}  # fmt: skip
    answer = section(build_report(rows, studies={"heart": study}), "heart")
    header, *cells = table_rows(answer)
    by_cell = {row[0]: dict(zip(header, row, strict=True)) for row in cells}
    assert by_cell["train_epoch fp32 cuda"]["GPU speed-up over CPU"].startswith("0.500× (95% CI 0.")
    # its processes 30% apart, no twins: judged by every pair of them
    assert by_cell["train_epoch_loader fp32 cpu 2t"]["× baseline"].startswith("0.357× (processes ")
    assert by_cell["train_epoch fp32 cpu 2t"]["× baseline"] == "–", "the baseline is not compared with itself"
    assert by_cell["train_epoch fp32 cpu 2t"]["items/s"] == "100,000"  # 1,000 samples per 10 ms epoch
    assert "× baseline: over train_epoch fp32 on the same device" in answer


def test_provenance_names_the_code_and_whether_its_tree_was_dirty():
    rows = pd.DataFrame([cell(git_commit="0123456789abcdef", git_dirty=True, cpu="Xeon", gpu=None,
                              created_at="2026-11-27T10:00:00+00:00")]).assign(scenario="single")  # fmt: skip
    report = build_report(rows)
    provenance = report[report.index("## Where these numbers come from") :]
    assert "- Code: inferbench 0123456789ab, with uncommitted changes." in provenance
    assert "Measured: 2026-11-27 10:00–10:00 UTC" in provenance and "Xeon" in provenance


def test_an_unavailable_cell_is_named_with_its_reason_on_the_first_page_and_in_full_in_the_appendix():
    rows = pd.DataFrame([
        cell(), cell(engine="tensorrt", engine_impl="tensorrt", status="unavailable", latency_p50_ms=None,
                     reason="the `tensorrt` Python package is not installed\nsecond line", **GPU),
    ]).assign(scenario="single")  # fmt: skip
    report, details = build_report(rows), build_details(rows)
    assert "- 1 unavailable: the `tensorrt` Python package is not installed (resnet50 tensorrt" in report
    assert "second line" not in report and "## Cells without a valid measurement" in details


@pytest.mark.parametrize(
    ("summary", "gpu", "configfile"),
    [
        ("docs/results/cpu-2core/readme_default/2026-11-27/summary.csv", False, None),
        ("docs/results/h100/readme_default/2026-11-27/summary.csv", True, None),
        ("docs/results/h100/full/2026-11-25/summary.csv", True, "config/studies/full.yaml"),
    ],
)
def test_the_committed_runs_first_pages_are_short(summary, gpu, configfile):
    """The default's report read 12,205 words on the GPU and 14,391 on the CPU; its first page answers in at
    most ~3,000, every study present with a question."""
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    if configfile:
        from snakemake.utils import update_config

        update_config(config, yaml.safe_load((REPO / configfile).read_text()))
    studies = resolved_studies(validate_config(config), has_cuda=gpu)
    report = build_report(read_summary_csv(REPO / summary), studies=studies)
    # what a reader needs to act (host-bound answers, data and weights, provenance) is on it too
    assert len(report.split()) <= (3000 if configfile is None else 4400)
    assert report.count("\nStudy `") == len(studies)
    assert report.count("## Not measured here, and why") == 1 and report.count("## Where these numbers come from") == 1


def test_study_rows_follow_the_grid_rules():
    rows = pd.DataFrame([
        cell(workload="bert_base", seq_len=128, threads=4, engine="ort_cpu"),  # in
        cell(workload="bert_base", seq_len=64, threads=4, engine="ort_cpu"),  # seq not in the study
        cell(workload="bert_base", seq_len=128, threads=2, engine="ort_cpu"),  # threads not in the study
        cell(workload="bert_base", seq_len=128, device="cuda", threads=0, engine="ort_cuda"),  # in
        cell(workload="bert_base", seq_len=128, device="cuda", threads=0, engine="torch_eager"),  # engine
        cell(workload="resnet50", seq_len=0, threads=4, engine="ort_cpu"),  # workload
    ])  # fmt: skip
    study = {"workloads": ["bert_base"], "engines": ["ort_cpu", "ort_cuda"], "devices": ["cpu", "cuda"],
             "batch_sizes": [1], "seq_lens": [128], "threads": [4]}  # fmt: skip
    assert list(study_rows(rows, study).index) == [0, 3]
    vision = {"workloads": ["resnet50"], "engines": ["ort_cpu"], "devices": ["cpu"], "batch_sizes": [1],
              "seq_lens": [128], "threads": [4]}  # fmt: skip
    assert list(study_rows(rows, vision).index) == [5]  # an image model's cells have sequence length 0


def test_an_engine_keeps_its_colour_whatever_else_is_plotted():
    variants = ["torch_eager", "ort_cpu", "ort_cuda", "tensorrt", "torchscript", "my_new_variant"]
    assert engine_colour("ort_cuda", variants) == engine_colour("ort_cuda", variants)
    assert len({engine_colour(e, variants) for e in variants}) == 6  # the config's variants: one colour each
    assert engine_colour("my_variant") == engine_colour("my_variant")  # not in the config: a stable hash


def test_an_mlp_cell_scores_the_held_out_rows_as_it_runs_and_the_answer_shows_that_auc(tmp_path):
    """The parity gate runs the engine on the rows training held out, in calls of the cell's batch: an int8
    model that scores worse shows a lower AUC than fp32, beside its relative L2."""
    import numpy as np

    from inferbench.core.cells import CellKey
    from inferbench.models.parity import heldout_batches, save_heldout
    from inferbench.scenarios.prepare import CellInputs, CellRequest, heldout_auc

    rows = np.arange(10, dtype=np.float32).reshape(5, 2)
    batches = heldout_batches(rows, 2)
    assert [len(b) for b in batches] == [2, 2, 2] and (batches[-1][1] == rows[0]).all()  # filled from the start

    labels = np.array([0, 0, 1, 1, 1])
    save_heldout({"x": rows, "labels": labels}, tmp_path / "heldout.npz")
    np.savez(tmp_path / "ref.npz", output=np.zeros((1, 2)), input_x=rows[:1],
             heldout_x=rows, heldout_labels=labels)  # fmt: skip

    class Engine:  # scores each row by its first feature: the positive rows have the larger ones
        run_gives_log_probabilities = False

        def __init__(self) -> None:
            self.calls: list[int] = []

        def stage(self, feed):
            return feed["x"]

        def run(self, staged):
            self.calls.append(len(staged))
            return np.stack([np.zeros(len(staged)), staged[:, 0]], axis=1)

        def synchronize(self):
            pass

        def to_numpy(self, output):
            return output

    request = CellRequest(CellKey("mlp_heart", "ort_cpu", "fp32", "cpu", 2, 0, 2), {},
                          CellInputs(reference=tmp_path / "ref.npz"))  # fmt: skip
    engine = Engine()
    assert heldout_auc(engine, request, "x") == 1.0 and engine.calls == [2, 2, 2]

    report = build_report(pd.DataFrame([
        cell(workload="mlp_heart", engine="ort_cpu", engine_impl="ort_cpu", latency_p50_ms=0.01, parity_auc=0.91),
        cell(workload="mlp_heart", engine="ort_cpu", engine_impl="ort_cpu", precision="int8", latency_p50_ms=0.02,
             parity_rel_l2=7e-3, parity_auc=0.88),
    ]).assign(scenario="single"))  # fmt: skip
    header, *cells = table_rows(report)
    by_cell = {row[1]: dict(zip(header, row, strict=True)) for row in cells}
    assert by_cell["ort_cpu int8 cpu 2t"]["held-out AUC"] == "0.880"
    assert by_cell["ort_cpu int8 cpu 2t"]["rel. L2 to FP32 eager"] == "7.0e-03"


def test_a_by_batch_study_over_several_lengths_gives_a_row_per_cell_and_length():
    rows = pd.DataFrame([
        cell(workload="bert_base", engine="ort_cpu", engine_impl="ort_cpu", seq_len=seq, batch_size=b,
             latency_p50_ms=0.1 * seq * b, timing="end_to_end")
        for seq in (32, 64) for b in (1, 8)
    ]).assign(scenario="single")  # fmt: skip
    study = {"workloads": ["bert_base"], "engines": ["ort_cpu"], "devices": ["cpu"], "batch_sizes": [1, 8],
             "seq_lens": [32, 64], "threads": [2], "layout": "by_batch"}  # fmt: skip
    header, *cells = table_rows(section(build_report(rows, studies={"b": study}), "b"))
    assert header == ["cell", "batch 1", "batch 8"]
    assert [row[0] for row in cells] == ["ort_cpu fp32 cpu 2t s32", "ort_cpu fp32 cpu 2t s64"]


def test_an_engine_timed_end_to_end_shows_its_own_tail_where_the_table_is_end_to_end():
    """ONNX Runtime on the CPU is timed end to end only: its p99 is its own, not a blank."""
    rows = pd.DataFrame([
        cell(engine="ort_cpu", engine_impl="ort_cpu", timing="end_to_end", latency_p50_ms=5.0, latency_p99_ms=7.0,
             n_iters=150),
        cell(latency_p50_ms=9.0, e2e_latency_p50_ms=9.5, latency_p99_ms=9.9, e2e_latency_p99_ms=10.5, n_iters=150,
             e2e_n_iters=150),
    ]).assign(scenario="single")  # fmt: skip
    study = {"workloads": ["resnet50"], "engines": ["ort_cpu", "torch_eager"], "devices": ["cpu"], "batch_sizes": [1],
             "threads": [2], "percentiles": ["p50", "p99"]}  # fmt: skip
    header, *cells = table_rows(section(build_report(rows, studies={"e": study}), "e"))
    by_cell = {row[1]: dict(zip(header, row, strict=True)) for row in cells}
    assert by_cell["ort_cpu fp32 cpu 2t"]["p99 (ms)"] == "7.00"
    assert by_cell["torch_eager fp32 cpu 2t"]["p99 (ms)"] == "10.5"


def test_an_answer_resting_on_host_bound_cells_says_so_with_the_gpus_busy_share_and_what_lifted_it():
    """Seed 002's "AMP alone" read 2.40x, 1.09x and 1.57x in three runs: its cells were host-bound, and the
    page did not say so."""
    gpu = {**GPU, "workload": "resnet50", "batch_size": 32}
    rows = pd.DataFrame([
        cell(**gpu, latency_p50_ms=9.0, p50_by_process_ms=processes(8.9, 9.1), bound="host", gpu_busy_pct=41.0),
        cell(**gpu, engine="torch_eager_amp", engine_impl="torch_eager", precision="fp16", latency_p50_ms=4.0,
             p50_by_process_ms=processes(3.9, 4.1), bound="host", gpu_busy_pct=63.0),
        cell(**gpu, engine="torch_cudagraph", engine_impl="torch_cudagraph", precision="fp16", latency_p50_ms=2.0,
             p50_by_process_ms=processes(1.99, 2.01), bound="device", gpu_busy_pct=98.0),
        cell(**{**gpu, "batch_size": 1}, latency_p50_ms=5.0, p50_by_process_ms=processes(4.9, 5.1), bound="host",
             gpu_busy_pct=12.0),
    ]).assign(scenario="single")  # fmt: skip
    report = build_report(rows)
    lines = [line for line in report.splitlines() if line.startswith("- Host-bound")]
    assert len(lines) == 2, "one line per shape with host-bound cells"
    one, thirty_two = lines
    assert (
        one == "- Host-bound at batch 1 (GPU busy 12%): torch_eager fp32 cuda; their ratios measure the host. "
        "No cell here lifted the limit."
    )
    assert thirty_two.startswith("- Host-bound at batch 32 (GPU busy 41–63%): torch_eager_amp fp16 cuda, torch_eager")
    assert "Lifted by torch_cudagraph fp16 cuda: 2.00× (95% CI" in thirty_two


def test_int8_memory_and_orderings_against_the_physics_are_said_in_words():
    """Seed 001 asked what the engines cost in memory and got the process's peak only; int8 was slower on
    OpenVINO and no sentence said so; BERT on ORT CUDA at sequence 16 ran faster than at 8, silently."""
    cpu = {"workload": "distilbert", "seq_len": 32}
    gpu = {**GPU, "workload": "bert_base", "engine": "ort_cuda", "engine_impl": "ort_cuda", "timing": "device"}
    rows = pd.DataFrame([
        cell(**cpu, engine="openvino", engine_impl="openvino", latency_p50_ms=30.0,
             p50_by_process_ms=processes(29.8, 30.2)),
        cell(**cpu, engine="openvino", engine_impl="openvino", precision="int8", latency_p50_ms=45.0,
             p50_by_process_ms=processes(44.7, 45.3)),
        cell(**cpu, engine="ort_cpu", engine_impl="ort_cpu", latency_p50_ms=20.0,
             p50_by_process_ms=processes(19.9, 20.1)),
        cell(**cpu, engine="ort_cpu", engine_impl="ort_cpu", precision="int8", latency_p50_ms=6.0,
             p50_by_process_ms=processes(5.97, 6.03)),
        cell(**cpu, latency_p50_ms=60.0, p50_by_process_ms=processes(59.8, 60.2)),
        cell(**gpu, seq_len=8, latency_p50_ms=3.54, p50_by_process_ms=processes(3.53, 3.55), bound="device",
             gpu_peak_allocated_mb=565.0, gpu_process_peak_mb=1390.0),
        cell(**gpu, seq_len=16, latency_p50_ms=2.21, p50_by_process_ms=processes(2.20, 2.22), bound="device",
             gpu_peak_allocated_mb=570.0, gpu_process_peak_mb=1392.0),
    ]).assign(scenario="single")  # fmt: skip
    lines = build_report(rows).splitlines()
    int8 = {line.split(":")[0]: line for line in lines if line.startswith("- int8 on")}
    assert ": slower than fp32, 1.50× (95% CI" in int8["- int8 on openvino at batch 1, sequence 32"]
    assert ": faster than fp32, 3.33× (95% CI" in int8["- int8 on ort_cpu at batch 1, sequence 32"]
    memory = next(line for line in lines if line.startswith("- GPU memory"))
    assert "allocator's peak 565–570 MB, the process's 1,390–1,392 MB" in memory
    check = next(line for line in lines if line.startswith("- Check"))
    assert check.startswith("- Check ort_cuda fp32 cuda b1 s16: sequence 16 ran faster than sequence 8, 1.60× (95% CI")
    assert sum(line.startswith("- Check") for line in lines) == 1, "the CPU cells' orderings agree with the physics"


def test_not_measured_lists_what_the_default_cut_from_each_seeds_own_grid_and_the_cpu_thread_budget():
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    studies = resolved_studies(validate_config(config), has_cuda=True)
    rows = pd.DataFrame([cell(workload="mlp_lendingclub", engine="ort_cpu", engine_impl="ort_cpu", host_cpus=16)])
    report = build_report(rows.assign(scenario="single"), studies=studies)
    cut = next(line for line in report.splitlines() if line.startswith("- Cut from the seeds' own grids"))
    assert "`vision_fp16`: batch 1, 8, 16." in cut
    assert "`gpu_efficiency`: engines `torch_eager_strict`, `torch_eager_tf32`; batch 128; percentiles p99." in cut
    assert "`transformers`: engines `ort_cpu_fused`; sequence 64, 128, 384; threads 4." in cut
    assert "- CPU cells use 2 threads of this host's 16 CPUs" in report
    # a run at the seeds' own grids cuts nothing
    full = yaml.safe_load((REPO / "config/config.yaml").read_text())
    full["own_grids"] = [
        "vision_fp16",
        "gpu_efficiency",
        "transformers",
        "loan_default",
        "gpu_training",
        "heart_training",
    ]
    studies = resolved_studies(validate_config(full), has_cuda=True)
    assert "Cut from the seeds' own grids" not in build_report(rows.assign(scenario="single"), studies=studies)


def test_the_fp32_baseline_is_pytorchs_default_and_each_label_names_what_it_changes():
    """FP32 eager disabled TF32 where PyTorch's default uses it in convolutions, and "torchscript fp16" ran
    channels-last against an NCHW baseline under one label: three changes, one name."""
    from inferbench.engines.pytorch.eager import tf32_switches

    assert tf32_switches("fp32", "conv") == (True, False), "PyTorch's default: TF32 in convolutions only"
    assert tf32_switches("fp32", "strict") == (False, False) and tf32_switches("fp32", "all") == (True, True)
    gpu = {**GPU, "workload": "resnet50", "batch_size": 32, "bound": "device", "graph": "eager"}
    rows = pd.DataFrame([
        cell(**gpu, latency_p50_ms=10.0, p50_by_process_ms=processes(9.9, 10.1), tf32="conv"),
        cell(**gpu, engine="torch_eager_strict", latency_p50_ms=12.0, p50_by_process_ms=processes(11.9, 12.1),
             tf32="strict"),
        cell(**gpu, engine="torch_eager_tf32", latency_p50_ms=9.0, p50_by_process_ms=processes(8.9, 9.1), tf32="all"),
        cell(**{**gpu, "graph": "torchscript"}, engine="torchscript", engine_impl="torchscript", precision="fp16",
             precision_mode="cast", channels_last=True, latency_p50_ms=2.0, p50_by_process_ms=processes(1.99, 2.01)),
    ]).assign(scenario="single")  # fmt: skip
    report = build_report(rows)
    changed = {row[1]: row[2] for row in table_rows(report) if row[0] == "32"}
    assert changed == {
        "torch_eager fp32 cuda": "PyTorch's defaults",
        "torch_eager_strict fp32 cuda": "TF32 off",
        "torch_eager_tf32 fp32 cuda": "TF32 everywhere",
        "torchscript fp16 cuda": "torchscript · fp16 cast · channels-last",
    }
    assert "FP32 eager here is" not in report, "the baseline is PyTorch's default: nothing to warn of"
    # a summary from before the settings wrote booleans, and its FP32 eager was strict: the page says so
    old = build_report(rows.assign(tf32=[False, False, True, None]))
    assert "- FP32 eager here is strict fp32, with TF32 off." in old
    assert {row[1]: row[2] for row in table_rows(old) if row[0] == "32"}["torch_eager fp32 cuda"] == "TF32 off"


def test_a_tf32_setting_is_one_of_three_and_a_boolean_is_refused_naming_them():
    from inferbench.engines.registry import engine_info, option_problems

    (problem,) = option_problems("torch_eager", {"engine": "torch_eager", "tf32": True})
    assert "tf32" in problem and "strict, conv, all" in problem, problem
    assert option_problems("torch_eager", {"engine": "torch_eager", "tf32": "strict"}) == []
    assert engine_info("ort_cuda").typed_options({"engine": "ort_cuda"}).tf32 == "all", "the CUDA provider's default"


def test_every_items_per_s_on_the_page_is_the_summarys_throughput_at_the_tables_boundary():
    """One throughput: a cell's items/s on the first page is the summary's ``throughput_per_s`` (device boundary)
    or ``e2e_throughput_per_s`` (end to end), for every cell of a CPU default made by today's code."""
    from inferbench.report.tables import cell_name, fmt

    summary = read_summary_csv(REPO / "docs/results/cpu-2core/readme_default/2026-11-28/summary.csv")
    report = build_report(summary)
    checked = 0
    for block in re.split(r"\n(?=\*\*)", report):
        heading = re.match(r"\*\*(\S+)\*\* at the (device|end-to-end) boundary", block)
        if heading is None:
            continue
        column = "throughput_per_s" if heading[2] == "device" else "e2e_throughput_per_s"
        header, *rows = table_rows(block.split("\n\n- ")[0])
        for values in rows:
            row = dict(zip(header, values, strict=True))
            batch = int(row["batch"].replace(",", ""))
            same = summary[(summary["workload"] == heading[1]) & (summary["batch_size"] == batch)]
            same = same[[cell_name(r) == row["cell"] and str(r["seq_len"]) == row.get("seq", "0") for _, r in
                         same.iterrows()]]  # fmt: skip
            assert len(same) == 1, row
            assert row["items/s"] == fmt(same.iloc[0][column]), (heading[1], row["cell"])
            checked += 1
    assert checked >= 20, "every engines table of the CPU default was read"
