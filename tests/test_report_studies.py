"""The report's study sections on synthetic summaries whose answers are known, and the plots' colours."""

from __future__ import annotations

import pandas as pd
import pytest

from inferbench.analysis.decisions import ClaimBasis
from inferbench.report.markdown import build_report
from inferbench.report.plots import engine_colour
from inferbench.report.studies import cpu_gpu_gap, study_rows, study_section
from tests.test_decisions import cell

LOAN = {
    "workloads": ["mlp_lendingclub"], "engines": ["ort_cpu", "ort_cuda"], "precisions": ["fp32"],
    "devices": ["cpu", "cuda"], "batch_sizes": [1, 10, 100, 1000], "threads": [4], "layout": "by_batch",
    "question": "from which batch does the GPU win?",
}  # fmt: skip


def loan_summary() -> pd.DataFrame:
    """CPU: 0.01 ms per item at every batch. GPU: 1 ms per call end to end, so 1 / batch per item:
    equal to the CPU at batch 100 exactly."""
    rows = []
    for b in (1, 10, 100, 1000):
        rows.append(
            cell(
                workload="mlp_lendingclub",
                engine="ort_cpu",
                engine_impl="ort_cpu",
                threads=4,
                batch_size=b,
                latency_p50_ms=0.01 * b,
                throughput_per_s=100_000.0,
            )
        )
        rows.append(
            cell(
                workload="mlp_lendingclub",
                engine="ort_cuda",
                engine_impl="ort_cuda",
                device="cuda",
                threads=0,
                batch_size=b,
                latency_p50_ms=0.1,
                e2e_latency_p50_ms=1.0,
                throughput_per_s=b / 1e-4,
            )
        )
    return pd.DataFrame(rows)


def test_study_rows_follow_the_grid_rules():
    rows = pd.DataFrame(
        [
            cell(workload="bert_base", seq_len=128, threads=4, engine="ort_cpu"),  # in
            cell(workload="bert_base", seq_len=64, threads=4, engine="ort_cpu"),  # seq not in the study
            cell(workload="bert_base", seq_len=128, threads=2, engine="ort_cpu"),  # threads not in the study
            cell(workload="bert_base", seq_len=128, device="cuda", threads=0, engine="ort_cuda"),  # in
            cell(workload="bert_base", seq_len=128, device="cuda", threads=0, engine="torch_eager"),  # engine
            cell(workload="resnet50", seq_len=0, threads=4, engine="ort_cpu"),  # workload
        ]
    )
    study = {"workloads": ["bert_base"], "engines": ["ort_cpu", "ort_cuda"], "devices": ["cpu", "cuda"],
             "batch_sizes": [1], "seq_lens": [128], "threads": [4]}  # fmt: skip
    assert list(study_rows(rows, study).index) == [0, 3]
    vision = {"workloads": ["resnet50"], "engines": ["ort_cpu"], "devices": ["cpu"], "batch_sizes": [1],
              "seq_lens": [128], "threads": [4]}  # fmt: skip
    assert list(study_rows(rows, vision).index) == [5]  # an image model's cells have sequence length 0


def test_by_batch_section_gives_the_crossover_and_per_item_table():
    text = "\n".join(study_section("loan", LOAN, loan_summary(), ClaimBasis.of(loan_summary())))
    assert text.startswith("## Study `loan`")
    assert "**Question:** from which batch does the GPU win?" in text
    assert "GPU as fast as the CPU at batch 100, faster above" in text
    # per item, end to end, each in its unit: CPU 10 µs everywhere; GPU 1 ms, 100 µs, 10 µs, 1 µs
    assert "| 1 | 10.0 µs | 1.00 ms |" in text
    assert "| 1,000 | 10.0 µs | 1.00 µs |" in text
    assert "b1: ort_cpu fp32 cpu" in text and "b1000: ort_cuda fp32 cuda" in text
    assert "**mlp_lendingclub: items/s, end to end**" in text and "e-0" not in text


def test_engines_section_gives_speedups_with_intervals_and_the_fastest():
    rows = pd.DataFrame(
        [
            cell(
                device="cuda",
                threads=0,
                batch_size=8,
                latency_p50_ms=8.0,
                latency_p50_ci95_low_ms=7.9,
                latency_p50_ci95_high_ms=8.1,
                p50_by_process_ms="7.8;8.2;8.0",
                gpu_process_peak_mb=900.0,
                bound="host",
            ),
            cell(
                device="cuda",
                threads=0,
                batch_size=8,
                precision="fp16",
                latency_p50_ms=2.0,
                latency_p50_ci95_low_ms=1.98,
                latency_p50_ci95_high_ms=2.02,
                p50_by_process_ms="2.0;2.0;2.0",
                repeats=3,
                n_iters=300,
                gpu_process_peak_mb=600.0,
                bound="device",
            ),
            cell(
                device="cuda",
                threads=0,
                batch_size=8,
                engine="torchscript",
                engine_impl="torchscript",
                precision="fp16",
                latency_p50_ms=4.0,
                status="invalid",
            ),
        ]
    )
    study = {"workloads": ["resnet50"], "engines": ["torch_eager", "torchscript"], "precisions": ["fp32", "fp16"],
             "devices": ["cuda"], "batch_sizes": [8], "layout": "engines"}  # fmt: skip
    text = "\n".join(study_section("fp16", study, rows, ClaimBasis.of(rows)))
    assert (
        "**resnet50 b8**: fastest of this study's cells torch_eager fp16 cuda (device boundary, device-bound), "
        "4.00× FP32 eager, "
        "4.00× its own fp32, 4.00× ahead of torch_eager fp32 cuda (significant)." in text
    )
    row = next(line for line in text.splitlines() if line.startswith("| torch_eager | fp16 | cuda |"))
    # recipe, boundary, bound, mean (–), p50/p95/p99, peak MB from NVML, Welch's interval over 3 processes
    assert row == (
        "| torch_eager | fp16 | cuda | fp16 | device | device | – | 2.00 ms | – | – | 2.00 ms | 100 | 600 "
        "| 4.00 | 3.79–4.23 | device boundary | 4.00 | 300 | 3 |"
    )
    assert "Percentiles: p50, p95, p99, each from at least 100 timed calls" in text
    assert "Cells without a valid measurement: 1 invalid" in text
    assert "| torchscript | fp16" not in text  # an invalid cell is no row of the answer


def test_engines_section_compares_a_precision_with_the_same_engines_fp32():
    rows = pd.DataFrame(
        [
            cell(engine="ort_cpu", engine_impl="ort_cpu", workload="distilbert", seq_len=128, latency_p50_ms=70.0),
            cell(
                engine="ort_cpu",
                engine_impl="ort_cpu",
                workload="distilbert",
                seq_len=128,
                precision="int8",
                latency_p50_ms=28.0,
            ),
        ]
    )
    study = {"workloads": ["distilbert"], "engines": ["ort_cpu"], "precisions": ["fp32", "int8"],
             "devices": ["cpu"], "batch_sizes": [1], "seq_lens": [128], "threads": [2]}  # fmt: skip
    text = "\n".join(study_section("int8", study, rows, ClaimBasis.of(rows)))
    assert (
        "**distilbert b1 s128**: fastest of this study's cells ort_cpu int8 cpu (device boundary), 2.50× its own fp32"
        in text
    )


def test_seq_section_gives_the_scaling_exponent_and_the_cpu_gpu_gap():
    rows = []
    for seq in (64, 128, 256):
        cpu_ms = 0.001 * seq**1.5  # k = 1.5 on the CPU
        rows.append(
            cell(
                workload="bert_base",
                engine="ort_cpu",
                engine_impl="ort_cpu",
                seq_len=seq,
                threads=4,
                latency_p50_ms=cpu_ms,
            )
        )
        rows.append(
            cell(
                workload="bert_base",
                engine="ort_cuda",
                engine_impl="ort_cuda",
                seq_len=seq,
                device="cuda",
                threads=0,
                latency_p50_ms=cpu_ms / 10,
                e2e_latency_p50_ms=cpu_ms / 5,
            )
        )
    summary = pd.DataFrame(rows)
    study = {"workloads": ["bert_base"], "engines": ["ort_cpu", "ort_cuda"], "devices": ["cpu", "cuda"],
             "batch_sizes": [1], "seq_lens": [64, 128, 256], "threads": [4], "layout": "seq"}  # fmt: skip
    text = "\n".join(study_section("tf", study, summary, ClaimBasis.of(summary)))
    assert "**bert_base on cpu**: p50 grows as length^k, k = 1.50" in text
    assert "the GPU is 5.00× to 5.00× faster than the CPU end to end" in text
    gap = cpu_gpu_gap(summary)
    assert list(gap["gap"]) == pytest.approx([5.0, 5.0, 5.0])


def epoch_cell(engine: str, device: str, items_per_s: float) -> dict:
    return cell(workload="mlp_heart", engine=engine, engine_impl="torch_train_epoch", mode="train", batch_size=32,
                device=device, threads=2 if device == "cpu" else 0, throughput_per_s=items_per_s)  # fmt: skip


def test_training_section_gives_gpu_over_cpu_and_names_the_baseline():
    rows = pd.DataFrame(
        [
            epoch_cell("train_epoch", "cpu", 1000.0),
            epoch_cell("train_epoch", "cuda", 500.0),
            epoch_cell("train_epoch_loader", "cpu", 250.0),
        ]
    )
    # the study lists its plain baseline first: the plain loop, not the slowest variant
    study = {"workloads": ["mlp_heart"], "engines": ["train_epoch", "train_epoch_loader"],
             "devices": ["cpu", "cuda"], "batch_sizes": [32], "layout": "training"}  # fmt: skip
    text = "\n".join(study_section("heart", study, rows, ClaimBasis.of(rows)))
    assert "mlp_heart train_epoch fp32 b32: the GPU trains 0.500× the items/s of the CPU." in text
    assert "b32 on cpu: train_epoch_loader fp32 trains 0.250× the items/s of the baseline train_epoch fp32" in text
    assert "train_epoch fp32 trains" not in text  # the baseline is not compared with itself
    assert "| 32 | fp32 | ok | device | 10.0 ms | – | – | 500 | 0.500 | 1.00 | train_epoch fp32 (fp32) |" in text


def test_report_has_one_section_per_study_in_run_order_and_says_why_one_is_empty():
    gpu_only = {**LOAN, "engines": ["ort_cuda"], "devices": ["cuda"], "workloads": ["resnet50"],
                "requires_gpu": True, "layout": "engines"}  # fmt: skip
    cpu_only = loan_summary().query("device == 'cpu'").assign(timing="device")
    text = build_report(cpu_only, studies={"loan": LOAN, "vision_gpu": gpu_only})
    assert text.index("## Study `loan`") < text.index("## Study `vision_gpu`") < text.index("## What was measured")
    assert "No cell of this study ran on this machine (it needs a GPU)." in text
    assert "Only cpu cells were measured in this run: the CPU/GPU crossover needs both devices." in text


def test_an_engine_keeps_its_colour_whatever_else_is_plotted():
    variants = ["torch_eager", "ort_cpu", "ort_cuda", "tensorrt", "torchscript", "my_new_variant"]
    assert engine_colour("ort_cuda", variants) == engine_colour("ort_cuda", variants)
    assert len({engine_colour(e, variants) for e in variants}) == 6  # the config's variants: one colour each
    assert engine_colour("my_variant") == engine_colour("my_variant")  # not in the config: a stable hash


def test_rows_split_by_scenario_even_when_a_part_is_empty(tmp_path):
    """A summary read back from CSV holds strings: a study whose rows are all served (or none are) still
    splits into single-call, training and serving rows."""
    from inferbench.analysis.decisions import measured
    from inferbench.analysis.summary import split_scenarios

    rows = pd.DataFrame(
        {
            "scenario": ["server", "offline"],
            "mode": ["inference"] * 2,
            "status": ["ok"] * 2,
            "engine_impl": ["noop"] * 2,
        }
    )
    rows.to_csv(tmp_path / "s.csv", index=False)
    summary = pd.read_csv(tmp_path / "s.csv")
    frames = split_scenarios(summary)
    assert len(frames.serving) == 2 and frames.single.empty and frames.training.empty
    assert measured(frames.single).empty and measured(summary).empty


def test_a_latency_budget_is_never_answered_by_a_pipelined_loop_s_time_per_call():
    """With host_overlap the end-to-end figure is the loop's time per call, shorter than any request's
    latency: the budgets table leaves such cells out."""
    from inferbench.report.headline import latency_budgets

    same = {"precision": "fp16", "device": "cuda", "threads": 0, "batch_size": 256, "latency_p50_ms": 10.6}
    cells = pd.DataFrame([
        cell(**same, engine="staged", host_input="pinned fp16", e2e_latency_p50_ms=13.0, e2e_latency_p99_ms=14.0),
        cell(**same, engine="overlapped", host_input="pinned fp16 overlapped", e2e_latency_p50_ms=10.8,
             e2e_latency_p99_ms=11.0),
    ])  # fmt: skip
    answers = latency_budgets(cells)
    assert not answers.empty and not answers["cell"].str.contains("overlapped").any()
    assert answers["cell"].str.contains("staged").all()
