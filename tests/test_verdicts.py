"""One verdict per claim: a report rendered from records built to tempt each contradiction a real report
once showed (issue 30) gives the same answer wherever a claim appears, and the verdict rule itself."""

from __future__ import annotations

import math
import re
import warnings

import pandas as pd
import pytest

from inferbench.analysis.comparison import ClassSpreads, inverted_boundaries
from inferbench.analysis.uncertainty import Ratio
from inferbench.analysis.verdicts import CONTENDED, Claim, claim
from inferbench.report.answers import claim_text
from inferbench.report.markdown import build_details, build_report
from tests.test_decisions import cell, processes

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)

GPU = {"device": "cuda", "threads": 0}


def tempting_summary() -> pd.DataFrame:
    rows = [
        # (a) LendingClub b1: ONNX Runtime on the CPU is the run's fastest, but it is no cell of the
        # `tabular` study, whose own fastest is ORT CUDA with host arrays
        cell(workload="mlp_lendingclub", engine="ort_cpu", engine_impl="ort_cpu", latency_p50_ms=0.005,
             p50_by_process_ms=processes(0.005, 0.0051)),
        cell(workload="mlp_lendingclub", engine="ort_cuda_host", engine_impl="ort_cuda", timing="end_to_end",
             latency_p50_ms=0.1, p50_by_process_ms=processes(0.1, 0.101, 0.099), bound="host", **GPU),
        cell(workload="mlp_lendingclub", engine="torch_eager", latency_p50_ms=0.2, e2e_latency_p50_ms=0.3,
             p50_by_process_ms=processes(0.2, 0.21, 0.19), bound="host", **GPU),
        # (c) ResNet-50 b32: TorchScript (host-bound, noisy processes) 1.47x ahead of the CUDA graph; the
        # pair appears in the decisions, the study's answer and the option steps
        cell(engine="torchscript", engine_impl="torchscript", precision="fp16", batch_size=32, graph="torchscript",
             latency_p50_ms=1.8, p50_by_process_ms=processes(1.6, 1.8, 2.4), bound="host", **GPU),
        cell(engine="torch_cudagraph", engine_impl="torch_cudagraph", precision="fp16", batch_size=32,
             graph="cuda_graph", latency_p50_ms=2.65, p50_by_process_ms=processes(2.64, 2.65, 2.66), bound="device",
             **GPU),
        cell(precision="fp32", batch_size=32, latency_p50_ms=9.0, p50_by_process_ms=processes(9.0, 9.1, 8.9),
             bound="device", **GPU),
        # (e) ResNet-50 b1: eager fp16 slower than fp32 on the device (0.51x) but faster end to end (1.14x)
        cell(precision="fp16", precision_mode="autocast", latency_p50_ms=10.0, e2e_latency_p50_ms=7.0,
             p50_by_process_ms=processes(10.0, 10.1, 9.9), e2e_p50_by_process_ms=processes(7.0, 7.05, 6.95),
             bound="host", **GPU),
        cell(precision="fp32", latency_p50_ms=5.1, e2e_latency_p50_ms=8.0, p50_by_process_ms=processes(5.1, 5.12, 5.08),
             e2e_p50_by_process_ms=processes(8.0, 8.1, 7.9), bound="host", **GPU),
    ]  # fmt: skip
    frame = pd.DataFrame(rows)
    return frame.assign(scenario="single", items_per_call=frame["batch_size"])


STUDIES = {
    "tabular": {"workloads": ["mlp_lendingclub"], "engines": ["ort_cuda_host", "torch_eager"], "precisions": ["fp32"],
                "devices": ["cuda"], "batch_sizes": [1], "layout": "by_batch"},
    "gpu_vision": {"workloads": ["resnet50"], "engines": ["torchscript", "torch_cudagraph", "torch_eager"],
                   "precisions": ["fp16", "fp32"], "devices": ["cuda"], "batch_sizes": [1, 32], "layout": "engines"},
}  # fmt: skip


@pytest.fixture(scope="module")
def report() -> str:
    return build_report(tempting_summary(), studies=STUDIES)


def _lines(text: str, *words: str) -> list[str]:
    return [line for line in text.splitlines() if all(w in line for w in words)]


def _answer(report: str, study: str) -> str:
    start = report.index(f"Study `{study}`.")
    return report[start : report.index("\n##", start)]


def test_a_study_answers_from_its_own_cells_only(report):
    """ONNX Runtime on the CPU is the run's fastest at LendingClub b1, but no cell of `tabular`: the study's
    answer names its own fastest and nothing of a cell it does not have."""
    answer = _answer(report, "tabular")
    fastest = _lines(answer, "batch 1:", "is fastest")
    assert len(fastest) == 1 and "**ort_cuda_host fp32 cuda** is fastest" in fastest[0]
    assert "ort_cpu" not in answer


def test_a_pair_has_one_verdict_wherever_it_appears(report):
    lines = _lines(report, "torchscript", "torch_cudagraph")
    intervals = {re.search(r"1\.47× \(([^)]*)\)", line).group(1) for line in lines}
    assert lines and len(intervals) == 1, lines  # one interval and one verdict wherever the pair appears


def test_a_claim_that_the_boundaries_contradict_gives_both(report):
    row = _lines(report, "| 1 | torch_eager fp16 cuda |")[0]
    assert re.search(r"0\.51\d× \(95% CI [\d.]+–[\d.]+\); 1\.14× \(95% CI [\d.]+–[\d.]+\) end to end", row), row


def test_significant_only_when_the_interval_excludes_one_and_the_boundaries_agree():
    assert Claim("device", Ratio(1.3, 1.1, 1.5)).significant is True
    assert Claim("device", Ratio(1.3, 0.9, 1.5)).significant is False
    assert Claim("device", Ratio(1.3)).significant is None  # one process: the spread is unknown
    flipped = Claim("device", Ratio(1.3, 1.1, 1.5), Ratio(0.8, 0.7, 0.9))
    assert flipped.boundaries_disagree and flipped.significant is False
    assert flipped.verdict.startswith("the boundaries disagree: 1.3× at the device boundary, 0.8× end to end")
    # the other boundary within the noise the other way: no disagreement to speak of
    assert not Claim("device", Ratio(1.3, 1.1, 1.5), Ratio(0.98, 0.9, 1.06)).boundaries_disagree


def test_a_claim_across_devices_is_made_end_to_end_and_only_there():
    cpu = cell(engine="ort_cpu", latency_p50_ms=2.0, p50_by_process_ms=processes(2.0, 2.02))
    gpu = cell(engine="ort_cuda", latency_p50_ms=0.5, e2e_latency_p50_ms=1.0, bound="device",
               p50_by_process_ms=processes(0.5, 0.51), e2e_p50_by_process_ms=processes(1.0, 1.01), **GPU)  # fmt: skip
    result = claim(gpu, cpu, ClassSpreads.of(pd.DataFrame([cpu, gpu])))
    assert result.boundary == "end_to_end" and result.other is None
    expected = 2.0 / math.sqrt(1.0 * 1.01)  # the GPU's end-to-end figure: its processes' geometric mean
    assert result.value == pytest.approx(expected) and math.isclose(result.ratio.value, result.value)


def test_a_scaling_exponent_the_boundaries_contradict_is_nobodys_answer():
    """The published case: BERT eager's exponent +0.22 at one boundary and -0.21 at the other."""
    rows = [
        cell(workload="bert_base", seq_len=seq, latency_p50_ms=5.0 * (seq / 32) ** 0.22,
             e2e_latency_p50_ms=9.0 * (seq / 32) ** -0.21, bound="host", **GPU)
        for seq in (32, 64, 128)
    ]  # fmt: skip
    study = {"workloads": ["bert_base"], "engines": ["torch_eager"], "devices": ["cuda"], "batch_sizes": [1],
             "seq_lens": [32, 64, 128], "layout": "seq"}  # fmt: skip
    text = build_report(pd.DataFrame(rows).assign(scenario="single"), studies={"seq": study})
    line = _lines(text, "- torch_eager fp32 cuda batch 1:")[0]
    assert "the boundaries disagree (k = 0.220 at its own, -0.210 end to end); no exponent" in line
    assert "grows" not in line


def test_a_report_given_the_spread_between_leases_counts_it_in_every_claim():
    from inferbench.analysis.leases import LeaseSpread

    summary = tempting_summary()
    alone = build_report(summary, studies=STUDIES)
    assert "The intervals rest on this lease alone" in alone
    leases = LeaseSpread({"device": math.log(1.02), "host": math.log(1.25), "cpu": math.log(1.05)},
                         {"device": 10, "host": 12, "cpu": 8}, 2)  # fmt: skip
    across = build_report(summary, studies=STUDIES, leases=leases)
    assert "measured over 2 leases: device-bound GPU cells 2.0% (10 cells)" in across
    # the CUDA graph's speed-up over eager fp32 at b32 (both device-bound, 3.4x) holds across leases too, and
    # its interval is wider for them
    graph, graph_alone = (_lines(text, "| 32 | torch_cudagraph fp16 cuda |")[0] for text in (across, alone))
    width = [float(h) / float(lo) for lo, h in (re.search(r"95% CI ([\d.]+)–([\d.]+)\)", g).groups()
                                                for g in (graph, graph_alone))]  # fmt: skip
    assert "within the spread" not in graph and width[0] > width[1]


def test_a_cell_whose_end_to_end_p50_is_below_its_device_p50_is_listed_and_judged_against_its_intervals():
    rows = [
        # end to end 0.86x the device p50, the intervals apart: beyond them
        cell(latency_p50_ms=4.72, latency_p50_ci95_low_ms=4.63, latency_p50_ci95_high_ms=4.80,
             e2e_latency_p50_ms=4.05, e2e_latency_p50_ci95_low_ms=3.95, e2e_latency_p50_ci95_high_ms=4.20, **GPU),
        # 0.99x, the intervals overlap: within them
        cell(batch_size=4, latency_p50_ms=6.0, latency_p50_ci95_low_ms=5.8, latency_p50_ci95_high_ms=6.2,
             e2e_latency_p50_ms=5.94, e2e_latency_p50_ci95_low_ms=5.7, e2e_latency_p50_ci95_high_ms=6.1, **GPU),
        # 0.72x in a record without intervals: nothing says it is noise
        cell(batch_size=2, latency_p50_ms=6.8, e2e_latency_p50_ms=4.9, **GPU),
        # end to end above the device p50, as it must be; and a cell timed end to end only
        cell(batch_size=8, latency_p50_ms=6.0, e2e_latency_p50_ms=6.5, **GPU),
        cell(batch_size=16, timing="end_to_end", latency_p50_ms=6.0, **GPU),
    ]  # fmt: skip
    summary = pd.DataFrame(rows).assign(scenario="single")
    inverted = inverted_boundaries(summary)
    assert list(inverted["batch_size"]) == [1, 4, 2]
    assert list(inverted["beyond_intervals"]) == [True, False, None]
    assert inverted["e2e_over_device"].iloc[0] == pytest.approx(4.05 / 4.72)
    text = build_details(summary)
    section = text[text.index("## Cells timed faster end to end than on the device") :].split("\n## ")[0]
    assert "In 2 cells the end-to-end p50" in section and "In 1 more cell the" in section and "is noise" in section
    assert "| resnet50 torch_eager fp32 cuda b1 s0 t0 | – | 4.72 ms | 4.05 ms | 0.858 | yes |" in section
    assert "| resnet50 torch_eager fp32 cuda b2 s0 t0 | – | 6.80 ms | 4.90 ms | 0.721 | no intervals |" in section
    assert "b4 s0" not in section and "b8 s0" not in section, "only the cells beyond the intervals are listed"


def test_a_summary_older_than_the_interval_columns_still_lists_its_inverted_cells():
    """Committed summaries written before the end-to-end intervals existed (docs/results/h100/measurement)
    are re-rendered: their inverted cells are listed with no intervals, not dropped."""
    summary = pd.DataFrame([
        cell(latency_p50_ms=6.8, e2e_latency_p50_ms=4.9, **GPU),
        cell(batch_size=8, latency_p50_ms=6.0, e2e_latency_p50_ms=6.5, **GPU),
    ]).assign(scenario="single")  # fmt: skip
    assert "e2e_latency_p50_ci95_high_ms" not in summary and "latency_p50_ci95_low_ms" in summary
    inverted = inverted_boundaries(summary)
    assert list(inverted["batch_size"]) == [1] and list(inverted["beyond_intervals"]) == [None]
    row = "| resnet50 torch_eager fp32 cuda b1 s0 t0 | – | 6.80 ms | 4.90 ms | 0.721 | no intervals |"
    assert row in build_details(summary)


def test_a_summary_as_wide_as_a_real_one_lists_its_inverted_cells_without_a_pandas_warning(tmp_path):
    """A real summary has over 130 columns, which read_csv can leave one block each: adding columns to a slice
    of it warned (PerformanceWarning) on every report and compare of a lent machine's run."""
    wide = pd.DataFrame([cell(latency_p50_ms=6.8, e2e_latency_p50_ms=4.9, **GPU)]).assign(scenario="single")
    wide = pd.concat([wide, pd.DataFrame({f"extra_{i}": ["x"] for i in range(150)})], axis=1)
    wide.to_csv(tmp_path / "summary.csv", index=False)
    summary = pd.read_csv(tmp_path / "summary.csv")
    with warnings.catch_warnings():  # fragmenting it on purpose, as a summary's readers do
        warnings.simplefilter("ignore", pd.errors.PerformanceWarning)
        summary = summary.assign(**{f"more_{i}": 1.0 for i in range(120)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        inverted = inverted_boundaries(summary)
    assert list(inverted["batch_size"]) == [1]


def test_a_report_whose_boundaries_agree_has_no_such_section():
    summary = pd.DataFrame([cell(latency_p50_ms=5.0, e2e_latency_p50_ms=6.0, **GPU)]).assign(scenario="single")
    assert "faster end to end than on the device" not in build_details(summary)


def test_the_fastest_line_names_the_cells_thread_count_not_another_of_the_same_engine():
    rows = [
        cell(workload="mlp_lendingclub", engine="ort_cpu", engine_impl="ort_cpu", threads=1, latency_p50_ms=0.02,
             p50_by_process_ms=processes(0.02, 0.021)),
        cell(workload="mlp_lendingclub", engine="ort_cpu", engine_impl="ort_cpu", threads=4, latency_p50_ms=0.01,
             p50_by_process_ms=processes(0.0099, 0.0101)),
    ]  # fmt: skip
    text = build_report(pd.DataFrame(rows).assign(scenario="single"))
    fastest = _lines(text, "batch 1:", "is fastest")
    assert len(fastest) == 1 and "**ort_cpu fp32 cpu 4t**" in fastest[0] and "9.90–10.1 µs" in fastest[0]


def test_a_claim_about_a_cell_timed_only_while_other_work_held_the_cores_is_undecided():
    fast = cell(engine="ort_cpu", latency_p50_ms=0.1, p50_by_process_ms=processes(0.1, 0.101))
    slow = cell(latency_p50_ms=16.0, p50_by_process_ms=processes(16.0, 16.1), host_contended=True)
    steady = cell(engine="openvino", latency_p50_ms=1.0, p50_by_process_ms=processes(1.0, 1.01))
    classes = ClassSpreads.of(pd.DataFrame([fast, slow, steady]))
    result = claim(fast, slow, classes)
    assert result.significant is None and result.verdict == f"undecided: {CONTENDED}"
    assert claim_text(result).startswith(f"160× (undecided: {CONTENDED})"), "not '1 process: no interval'"
    assert claim(fast, steady, classes).significant is True, "the cells the host left alone still decide"
    # the contended cell's 160x is no spread of its class: the class's prior comes from the other two
    assert classes.priors[("cpu", "device")].cells == 2
