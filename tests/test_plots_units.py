"""The sweep plots on summaries built to tempt each defect committed plots once showed (issue 69): a workload
trained only read "no ok cells", a one-batch sweep drawn as lines over one x value, a log axis labelled only
0.5 and 1, a latency axis in ms beside a table in ns, and a throughput from the mean or end to end where the
page prints items per call / p50 at the device boundary."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.patches import Rectangle

from inferbench.analysis.comparison import boundary_of, p50_at, rate_at
from inferbench.report.answers import time_unit
from inferbench.report.plot_axes import log_axis
from inferbench.report.plots import plot_workload, workload_figures
from tests.test_decisions import cell

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)

GPU = {"device": "cuda", "threads": 0}


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def bar_heights(ax: plt.Axes) -> list[float]:
    return [p.get_height() for p in ax.patches if isinstance(p, Rectangle)]


def tick_labels(ax: plt.Axes, which: str = "y") -> list[str]:
    """The labels of the major ticks in view, as drawn."""
    ax.figure.canvas.draw()
    axis = ax.yaxis if which == "y" else ax.xaxis
    low, high = sorted(ax.get_ylim() if which == "y" else ax.get_xlim())
    shown = [t for t in axis.get_major_ticks() if low * 0.999 <= t.get_loc() <= high * 1.001]
    return [t.label1.get_text() for t in shown if t.label1.get_text()]


def texts(ax: plt.Axes) -> list[str]:
    return [t.get_text() for t in ax.texts]


# --- "no ok cells" beside ok cells ------------------------------------------------------------------------


def training_cells() -> list[dict]:
    """mlp_heart as the committed runs measured it: two ok training epochs (303 samples, batches of 32)."""
    epoch = {"workload": "mlp_heart", "engine": "train_epoch", "engine_impl": "torch_train_epoch",
             "mode": "train", "batch_size": 32, "items_per_call": 303.0, "timing": "end_to_end"}  # fmt: skip
    return [
        cell(**epoch, latency_p50_ms=7.8, throughput_per_s=33_336.0),
        cell(**epoch, latency_p50_ms=18.6, throughput_per_s=12_693.0, **GPU),
        cell(**epoch, status="failed", latency_p50_ms=None, **GPU, precision="bf16"),  # not ok: not drawn
    ]


def test_a_workload_measured_only_in_training_gets_its_ok_cells_plotted(tmp_path):
    summary = pd.DataFrame([*training_cells(), cell(workload="resnet50")])
    figures = workload_figures(summary, "mlp_heart")
    assert set(figures) == {"latency_per_item.png", "throughput.png"}
    for fig in figures.values():
        ax = fig.axes[0]
        assert "no ok cells" not in texts(ax)
        assert len(bar_heights(ax)) == 2  # the two ok epochs, the failed one left out
        assert "training" in ax.get_title()
    throughput = figures["throughput.png"].axes[0]
    assert bar_heights(throughput) == pytest.approx([303 / 7.8e-3, 303 / 18.6e-3])  # samples per epoch / p50
    assert [t.get_text() for t in throughput.get_xticklabels()] == ["train_epoch fp32 cpu 2t", "train_epoch fp32 cuda"]
    written = plot_workload(summary, "mlp_heart", tmp_path)
    assert [p.name for p in written] == ["latency_per_item.png", "throughput.png"]
    assert all(p.stat().st_size > 10_000 for p in written)


def test_training_cells_are_not_drawn_beside_a_workloads_inference_cells():
    summary = pd.DataFrame([*training_cells(), cell(workload="mlp_heart", batch_size=1, latency_p50_ms=0.05)])
    ax = workload_figures(summary, "mlp_heart")["throughput.png"].axes[0]
    assert bar_heights(ax) == pytest.approx([1 / 0.05e-3])  # the inference cell alone
    assert "training" not in ax.get_title()


def test_a_workload_without_ok_cells_says_so():
    summary = pd.DataFrame([cell(status="failed", latency_p50_ms=None), cell(workload="vit_b16")])
    for fig in workload_figures(summary, "resnet50").values():
        assert texts(fig.axes[0]) == ["no ok cells"]


# --- one x value: bars, not a one-point line ---------------------------------------------------------------


def test_a_sweep_of_one_batch_is_drawn_as_one_labelled_bar_per_cell():
    engines = ["torch_eager", "torchscript", "torch_compile"]
    summary = pd.DataFrame([
        cell(engine=e, engine_impl=e, batch_size=32, latency_p50_ms=p50, **GPU)
        for e, p50 in zip(engines, [11.7, 1.75, 5.1], strict=True)
    ])  # fmt: skip
    for fig in workload_figures(summary, "resnet50").values():
        ax = fig.axes[0]
        assert not ax.get_lines() and len(bar_heights(ax)) == 3
        assert sorted(t.get_text() for t in ax.get_xticklabels()) == sorted(f"{e} fp32 cuda" for e in engines)
        assert "batch size 32" in ax.get_xlabel()
        assert len(texts(ax)) == 3  # each bar carries its value
    swept = pd.DataFrame([cell(batch_size=b, latency_p50_ms=b * 1.0) for b in (1, 8, 32)])
    ax = workload_figures(swept, "resnet50")["throughput.png"].axes[0]
    assert len(ax.get_lines()) == 1 and not bar_heights(ax)  # several batches: a line


# --- log axes: 1-2-5 of each decade, several labels ---------------------------------------------------------


def test_a_log_axis_over_less_than_a_decade_still_shows_several_labelled_ticks():
    _, ax = plt.subplots()
    ax.plot([1, 2], [0.4, 1.2])
    ax.set_ylim(0.4, 1.2)
    log_axis(ax, "y")
    labels = tick_labels(ax)
    assert {"0.5", "1"} <= set(labels) and len(labels) >= 3  # not 0.5 and 1 alone
    assert all("e" not in label for label in labels)  # plain numbers


def test_a_log_axis_over_decades_is_ticked_at_1_2_5():
    _, ax = plt.subplots()
    ax.plot([1, 2], [0.4, 40])
    ax.set_ylim(0.4, 40)
    log_axis(ax, "y")
    assert tick_labels(ax) == ["0.5", "1", "2", "5", "10", "20"]


def test_a_latency_sweep_between_0_4_and_1_2_ms_is_labelled_at_several_ticks():
    summary = pd.DataFrame([cell(batch_size=b, latency_p50_ms=p50 * b) for b, p50 in ((1, 1.2), (4, 0.7), (16, 0.4))])
    ax = workload_figures(summary, "resnet50")["latency_per_item.png"].axes[0]
    labels = tick_labels(ax)
    assert {"500", "1,000"} <= set(labels) and len(labels) >= 3  # in µs: the tables' unit for a median of 0.7 ms
    assert tick_labels(ax, "x") == ["1", "4", "16"]  # the measured batches


# --- the tables' time unit ------------------------------------------------------------------------------


def test_an_mlp_latency_axis_is_in_the_unit_the_tables_print():
    rows = [cell(workload="mlp_lendingclub", engine="ort_cpu", engine_impl="ort_cpu", timing="end_to_end",
                 batch_size=b, latency_p50_ms=1e-4 * b) for b in (1_000, 10_000)]  # fmt: skip
    summary = pd.DataFrame(rows)
    ax = workload_figures(summary, "mlp_lendingclub")["latency_per_item.png"].axes[0]
    unit, factor = time_unit([1e-4, 1e-4])
    assert unit == "ns" and ax.get_ylabel().endswith(f"({unit})")
    (line,) = ax.get_lines()
    assert list(line.get_ydata()) == pytest.approx([1e-4 * factor] * 2)  # 100 ns, not 0.0001 ms
    assert "0.0001" not in tick_labels(ax)


def test_a_sequence_plot_is_in_the_unit_of_its_own_latencies():
    rows = [cell(workload="bert_base", seq_len=s, latency_p50_ms=2000.0 * s) for s in (8, 16, 32)]
    ax = workload_figures(pd.DataFrame(rows), "bert_base", kind="seq")["latency_vs_seq.png"].axes[0]
    assert ax.get_ylabel().endswith("(s)")  # a median of 32 s
    assert list(ax.get_lines()[0].get_ydata()) == pytest.approx([16.0, 32.0, 64.0])


# --- one throughput: items per call / p50 at the boundary of the plotted cells ------------------------------


def test_a_gpu_throughput_is_items_over_the_device_p50_not_the_mean_nor_end_to_end():
    # ResNet-50 as committed: torchscript fp16 1.75 ms on the device, 5.0 ms end to end, 16,508/s over the mean
    rows = [
        cell(engine="torchscript", engine_impl="torchscript", precision="fp16", batch_size=32, latency_p50_ms=1.7528,
             e2e_latency_p50_ms=5.0068, throughput_per_s=16_508.0, **GPU),
        cell(engine="torch_eager", batch_size=32, latency_p50_ms=11.7, e2e_latency_p50_ms=14.7,
             throughput_per_s=2_735.0, **GPU),
    ]  # fmt: skip
    summary = pd.DataFrame(rows)
    assert boundary_of(summary) == "device"
    ax = workload_figures(summary, "resnet50")["throughput.png"].axes[0]
    heights = sorted(bar_heights(ax))
    assert heights == pytest.approx(sorted(rate_at(summary, "device")))
    assert max(heights) == pytest.approx(32 / 1.7528e-3)  # 18,257/s, as the page prints
    assert "device boundary" in ax.get_ylabel()
    latency = workload_figures(summary, "resnet50")["latency_per_item.png"].axes[0]
    assert "device boundary" in latency.get_ylabel()
    assert min(bar_heights(latency)) == pytest.approx(1.7528 / 32 * 1e3)  # µs per item, at the device


def test_cpu_and_gpu_cells_are_plotted_end_to_end_and_say_so():
    rows = [cell(batch_size=b, latency_p50_ms=2.0 * b, throughput_per_s=1.0) for b in (1, 8)]
    rows += [cell(batch_size=b, latency_p50_ms=0.5, e2e_latency_p50_ms=3.0, throughput_per_s=1.0, **GPU)
             for b in (1, 8)]  # fmt: skip
    summary = pd.DataFrame(rows)
    figures = workload_figures(summary, "resnet50")
    ax = figures["throughput.png"].axes[0]
    assert "end to end" in ax.get_ylabel()
    plotted = sorted(y for line in ax.get_lines() for y in line.get_ydata())
    assert plotted == pytest.approx(sorted(rate_at(summary, "end_to_end")))
    assert 8 / 0.5e-3 not in plotted  # the GPU's device-boundary rate is not on an end-to-end plot
    latency = figures["latency_per_item.png"].axes[0]
    per_item = sorted(y for line in latency.get_lines()[:2] for y in line.get_ydata())
    unit, factor = time_unit(p50_at(summary, "end_to_end") / summary["batch_size"])
    assert f"end to end ({unit})" in latency.get_ylabel()
    assert per_item == pytest.approx(sorted(p50_at(summary, "end_to_end") / summary["batch_size"] * factor))
