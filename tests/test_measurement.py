"""Measurement beyond one timed loop: input rotation, GPU telemetry (against a fake NVML), repeats in
fresh processes, training cells and operator profiles, all on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pytest

from inferbench import cell_runner
from inferbench.cell_runner import CellInputs, MeasureSettings, profile_cell, run_cell, samples_path
from inferbench.cells import CellKey, CellRecord
from inferbench.engines.base import Engine
from inferbench.engines.registry import EngineInfo
from inferbench.lock import MachineLock
from inferbench.measure.gpu_telemetry import GpuTelemetry
from inferbench.measure.host_telemetry import HostWindow, parse_proc_stat, window_summary
from inferbench.measure.profiling import event_totals, ort_top_ops, top_ops
from inferbench.models import create_model
from inferbench.models.registry import save_checkpoint
from inferbench.repeats import merge_repeats, spread_pct

FAST = MeasureSettings(warmup_s=0.0, min_time_s=0.0, min_iters=3)


@pytest.fixture
def lock(tmp_path):
    machine_lock = MachineLock(tmp_path / "lock")
    machine_lock.shared()
    yield machine_lock
    machine_lock.close()


# --- input rotation ---------------------------------------------------------------------------


class RecordingEngine(Engine):
    """Remembers which staged batch every run() got."""

    impl = "recording"
    computes = False
    seen: ClassVar[list[int]] = []

    def prepare(self, artifact: Path | None, inputs: tuple, example: dict[str, np.ndarray]) -> None:
        pass

    def stage(self, batch: dict[str, np.ndarray]) -> Any:
        return batch

    def run(self, staged: Any) -> Any:
        RecordingEngine.seen.append(int(staged["x"][0, 0] * 1e6))
        return staged["x"]

    def to_numpy(self, output: Any) -> np.ndarray:
        return np.asarray(output)


def test_timed_calls_rotate_through_distinct_seeded_batches(tmp_path, monkeypatch, lock):
    monkeypatch.setattr(cell_runner, "load_engine_class", lambda impl: RecordingEngine)
    monkeypatch.setattr(cell_runner, "engine_info", lambda impl: EngineInfo("x:y", ("cpu",), ("fp32",), "none", "r"))
    meta = tmp_path / "m.json"
    meta.write_text(json.dumps({"inputs": [{"name": "x", "shape": ["batch", 4], "dtype": "float32"}]}))
    RecordingEngine.seen = []
    settings = MeasureSettings(warmup_s=0.0, min_time_s=0.0, min_iters=9, input_batches=3)
    record = run_cell(
        CellKey("mlp_heart", "rec", "fp32", "cpu", 2, 0, 1), {"engine": "rec"}, CellInputs(meta), settings,
        tmp_path / "r.json", lock,
    )  # fmt: skip
    assert record.status == "ok" and record.input_batches == 3
    timed = RecordingEngine.seen[-9:]  # the end-to-end loop's calls (same rotation) come last
    assert len(set(timed)) == 3, "three different batches"
    assert timed[:3] == timed[3:6] == timed[6:9], "in a fixed cycle"


# --- GPU telemetry ---------------------------------------------------------------------------------


class FakeNvml:
    """Counters with known values: the energy counter advances 2,000 mJ per read."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 0, 1, 0

    def __init__(self, energy: bool = True) -> None:
        self.energy_mj = 10_000
        self.has_energy = energy

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if not self.has_energy:
            raise RuntimeError("NVMLError_NotSupported")
        self.energy_mj += 2_000
        return self.energy_mj

    def nvmlDeviceGetClockInfo(self, handle, kind):
        return 1980 if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return 41

    def nvmlDeviceGetPowerUsage(self, handle):
        return 350_000  # mW

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        mine = SimpleNamespace(pid=os.getpid(), usedGpuMemory=512 * 2**20)
        return [SimpleNamespace(pid=1, usedGpuMemory=2**30), mine]


def test_gpu_telemetry_summarises_known_counters():
    telemetry = GpuTelemetry(FakeNvml(), handle=None, interval_s=0.01)
    with telemetry:
        time.sleep(0.05)
    summary = telemetry.summary(items=400)
    assert summary["energy_j"] == pytest.approx(2.0)  # one read at each end of the window
    assert summary["energy_per_item_mj"] == pytest.approx(5.0)
    assert summary["sm_clock_mhz"] == {"min": 1980.0, "mean": 1980.0, "max": 1980.0}
    assert summary["power_w"]["mean"] == pytest.approx(350.0) and summary["temperature_c"]["max"] == 41
    assert summary["process_peak_mb"] == pytest.approx(512.0), "this process's memory, not another's"
    assert summary["n_samples"] >= 2


def test_gpu_telemetry_without_an_energy_counter_reports_none():
    telemetry = GpuTelemetry(FakeNvml(energy=False), handle=None, interval_s=0.01)
    with telemetry:
        pass
    assert telemetry.summary(items=10)["energy_per_item_mj"] is None


def test_host_window_reports_steal_and_busy_shares():
    before = parse_proc_stat("cpu  100 0 50 800 10 0 0 40 0 0\ncpu0 1 2 3\n")
    after = parse_proc_stat("cpu  160 0 70 900 10 0 0 60 0 0\n")  # +60 user +20 sys +100 idle +20 steal
    usage = [SimpleNamespace(ru_nvcsw=5, ru_nivcsw=1, ru_utime=1.0, ru_stime=0.5),
             SimpleNamespace(ru_nvcsw=9, ru_nivcsw=4, ru_utime=1.5, ru_stime=0.5)]  # fmt: skip
    summary = window_summary(before, after, *usage)
    assert summary["steal_pct"] == pytest.approx(10.0) and summary["busy_pct"] == pytest.approx(50.0)
    assert summary["involuntary_switches"] == 3 and summary["voluntary_switches"] == 4
    assert summary["process_cpu_s"] == pytest.approx(0.5)
    assert window_summary(None, after, *usage)["steal_pct"] is None  # no /proc/stat (not Linux)
    with pytest.raises(ValueError, match="cpu"):
        parse_proc_stat("intr 1 2 3")
    with HostWindow() as window:
        sum(range(100_000))
    assert window.summary["process_cpu_s"] >= 0


# --- repeats in fresh processes ----------------------------------------------------------------


def _record(p50_samples: np.ndarray, status: str = "ok") -> tuple[CellRecord, dict[str, np.ndarray]]:
    from inferbench.measure.stats import latency_stats

    stats = latency_stats(p50_samples, 1) if p50_samples.size else {}
    record = CellRecord(
        key=CellKey("mlp_heart", "torch_eager", "fp32", "cpu", 1, 0, 1),
        status=status,
        engine_impl="torch_eager",
        reason=None if status == "ok" else "broke",
        latency_ms=stats["latency_ms"] if status == "ok" else None,
        end_to_end={"latency_ms": {"p50": stats["latency_ms"]["p50"] * 2}} if status == "ok" else None,
        memory_mb={"host_peak_rss": float(p50_samples.size)},
        cold_start_s={"prepare": 1.0},
    )
    return record, {"device": p50_samples, "end_to_end": p50_samples * 2}


def test_merge_repeats_pools_samples_and_reports_the_spread_of_medians():
    first, second = _record(np.full(50, 0.010)), _record(np.full(150, 0.011))
    merged, pooled = merge_repeats([first[0], second[0]], [first[1], second[1]])
    assert merged.status == "ok" and merged.n_iters == 200 and pooled["device"].size == 200
    assert merged.latency_ms["p50"] == pytest.approx(11.0)  # pooled: 150 of 200 samples are 11 ms
    assert merged.repeats["n"] == 2
    assert [r["p50_ms"] for r in merged.repeats["per_repeat"]] == pytest.approx([10.0, 11.0])
    assert merged.repeats["p50_spread_pct"] == pytest.approx(100 * 1.0 / 10.5)
    assert merged.memory_mb["host_peak_rss"] == 150.0  # the largest peak
    assert merged.flatten()["repeat_p50_spread_pct"] == pytest.approx(9.5238, rel=1e-3)


def test_merge_repeats_keeps_a_failed_repeat_visible():
    ok, failed = _record(np.full(10, 0.01)), _record(np.empty(0), status="failed")
    merged, _ = merge_repeats([ok[0], failed[0]], [ok[1], failed[1]])
    assert merged.status == "failed" and merged.reason == "repeat 2 of 2: broke"
    assert spread_pct([1.0]) is None and spread_pct([1.0, None]) is None


def test_run_cell_with_repeats_measures_in_fresh_processes(tmp_path):
    done, out = _noop_cell(tmp_path, {"repeats": 3})
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("fresh process") == 3
    record = CellRecord.load(out)
    assert record.status == "ok" and record.repeats["n"] == 3
    hosts = {r["hostname"] for r in record.repeats["per_repeat"]}
    assert len(hosts) == 1 and all(r["status"] == "ok" for r in record.repeats["per_repeat"])
    assert np.load(samples_path(out)).size == record.n_iters
    assert not list(out.parent.glob("repeats-*")), "the repeats' scratch folder is removed"


def _noop_cell(tmp_path: Path, measure: dict[str, Any], threads: int = 1) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "cells" / "r.json"
    cmd = [
        sys.executable, "-m", "inferbench", "run-cell", "--workload", "mlp_heart", "--engine", "noop",
        "--engine-options", '{"engine": "noop"}', "--precision", "fp32", "--device", "cpu", "--batch", "1",
        "--threads", str(threads), "--measure", json.dumps({"warmup_s": 0, "min_time_s": 0.05, **measure}),
        "--out", str(out),
    ]  # fmt: skip
    env = {**os.environ, "INFERBENCH_LOCK_FILE": str(tmp_path / "lock")}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False), out


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux-only")
def test_cpu_affinity_pins_the_measuring_process(tmp_path):
    cpu = min(os.sched_getaffinity(0))
    done, out = _noop_cell(tmp_path, {"cpu_affinity": [cpu]})
    assert done.returncode == 0, done.stderr
    record = CellRecord.load(out)
    assert record.status == "ok" and record.environment["affinity"] == [cpu]
    done, out = _noop_cell(tmp_path, {"cpu_affinity": [cpu]}, threads=2)
    record = CellRecord.load(out)
    assert record.status == "failed" and "at least as many CPUs" in record.reason
    done, out = _noop_cell(tmp_path, {"cpu_affinity": [100_000]})
    assert CellRecord.load(out).status == "failed" and "may not use" in CellRecord.load(out).reason


# --- training cells ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def heart(tmp_path_factory):
    root = tmp_path_factory.mktemp("heart")
    rng = np.random.default_rng(0)
    table = pd.DataFrame(rng.standard_normal((100, 13)).astype(np.float32), columns=[f"f{i}" for i in range(13)])
    table["target"] = rng.integers(0, 2, 100)
    table.to_parquet(root / "heart.parquet")
    spec = create_model("mlp_heart", in_features=13, hidden=[8])
    save_checkpoint(spec, root / "m.pt", seed=0)
    (root / "m.json").write_text(json.dumps({"inputs": [asdict(i) for i in spec.inputs]}))
    return root


def test_epoch_training_cell_counts_dataset_rows_per_call(heart, tmp_path, lock):
    key = CellKey("mlp_heart", "train_epoch", "fp32", "cpu", 32, 0, 1)
    inputs = CellInputs(heart / "m.json", heart / "m.pt", dataset=heart / "heart.parquet")
    variant = {"engine": "torch_train_epoch", "workers": 0}
    record = run_cell(key, variant, inputs, FAST, tmp_path / "r.json", lock)
    assert record.status == "ok", record.reason
    assert record.mode == "train" and record.timing == "end_to_end" and record.items_per_call == 100
    assert record.parity is None  # training changes the weights: no output to compare
    epoch_s = np.load(samples_path(tmp_path / "r.json")).astype(np.float64)
    assert record.throughput_per_s == pytest.approx(100 * epoch_s.size / epoch_s.sum(), rel=1e-3)
    row = record.flatten()
    assert row["mode"] == "train" and row["latency_per_item_p50_ms"] == pytest.approx(row["latency_p50_ms"] / 100)


def test_epoch_training_without_a_dataset_is_unavailable(heart, tmp_path, lock):
    key = CellKey("resnet50", "train_epoch", "fp32", "cpu", 32, 0, 1)
    variant, inputs = {"engine": "torch_train_epoch"}, CellInputs(heart / "m.json")
    record = run_cell(key, variant, inputs, FAST, tmp_path / "r.json", lock)
    assert record.status == "unavailable" and "dataset" in record.reason


def test_training_step_learns_and_times_iterations(heart, tmp_path, lock):
    from inferbench.engines.torch_train import TorchTrainStep
    from inferbench.models.registry import make_inputs

    spec = create_model("mlp_heart", in_features=13, hidden=[8])
    engine = TorchTrainStep("cpu", "fp32", 1, {"engine": "torch_train", "lr": 0.5})
    batch = make_inputs(spec.inputs, 16, 0, 0)
    engine.prepare(heart / "m.pt", spec.inputs, batch)
    staged = engine.stage(batch)
    losses = [float(engine.run(staged)) for _ in range(30)]
    assert losses[-1] < losses[0], "SGD on a fixed batch must lower its loss"
    assert engine.describe()["amp"] is False and engine.n_classes == 2

    key = CellKey("mlp_heart", "train", "bf16", "cpu", 16, 0, 1)
    inputs = CellInputs(heart / "m.json", heart / "m.pt")
    record = run_cell(key, {"engine": "torch_train"}, inputs, FAST, tmp_path / "r.json", lock)
    assert record.status == "ok" and record.mode == "train" and record.timing == "device"
    assert record.engine["amp"] is True and record.engine["grad_scaler"] is False  # bf16 needs no scaler


# --- profiles ----------------------------------------------------------------------------------


def test_top_ops_ranks_and_shares():
    rows = top_ops({"conv": (20, 600.0), "relu": (20, 300.0), "add": (10, 100.0)}, n_calls=10, top=2)
    assert [r["name"] for r in rows] == ["conv", "relu"]
    assert rows[0]["ms_per_run"] == pytest.approx(0.06) and rows[0]["calls_per_run"] == 2
    assert rows[0]["share"] == pytest.approx(0.6)


def test_cuda_profiles_count_kernels_once():
    from torch.autograd import DeviceType

    def event(key, device_type, self_device, self_cpu=5.0):
        return SimpleNamespace(
            key=key, count=2, device_type=device_type, self_device_time_total=self_device, self_cpu_time_total=self_cpu
        )

    events = [
        event("aten::conv2d", DeviceType.CPU, 90.0),  # the operator repeats its kernel's device time
        event("sm90_xmma_fprop", DeviceType.CUDA, 90.0, 0.0),
        event("bn_kernel", DeviceType.CUDA, 10.0, 0.0),
        event("aten::empty", DeviceType.CPU, 0.0),
    ]
    assert event_totals(events, "cuda") == {"sm90_xmma_fprop": (2, 90.0), "bn_kernel": (2, 10.0)}
    assert set(event_totals(events, "cpu")) == {"aten::conv2d", "aten::empty"}


def test_ort_profile_parsing_keeps_only_the_last_runs(tmp_path):
    events = [
        {"cat": "Session", "name": "model_run", "ts": 0, "dur": 100},  # warm-up: left out
        {"cat": "Node", "name": "conv_kernel_time", "ts": 10, "dur": 90, "args": {"op_name": "Conv"}},
        {"cat": "Session", "name": "model_run", "ts": 200, "dur": 100},
        {"cat": "Node", "name": "conv_kernel_time", "ts": 210, "dur": 30, "args": {"op_name": "Conv"}},
        {"cat": "Node", "name": "relu_kernel_time", "ts": 250, "dur": 10, "args": {"op_name": "Relu"}},
        {"cat": "Node", "name": "relu_fence_before", "ts": 260, "dur": 5, "args": {"op_name": "Relu"}},
    ]
    path = tmp_path / "ort_profile.json"
    path.write_text(json.dumps(events))
    result = ort_top_ops(path, n_calls=1, top=5)
    assert [(op["name"], op["ms_per_run"]) for op in result["top_ops"]] == [("Conv", 0.03), ("Relu", 0.01)]
    assert result["top_ops"][0]["share"] == pytest.approx(0.75)


@pytest.mark.parametrize(("impl", "tool"), [("torch_eager", "torch.profiler"), ("ort_cpu", "onnxruntime")])
def test_profile_cell_writes_a_trace_and_top_operators(heart, tmp_path, lock, impl, tool):
    artifact = heart / "m.pt"
    if impl == "ort_cpu":
        from inferbench.models.export import export_onnx
        from inferbench.models.registry import load_checkpoint

        artifact = tmp_path / "m.onnx"
        export_onnx(load_checkpoint(heart / "m.pt")[0], artifact)
    key = CellKey("mlp_heart", impl, "fp32", "cpu", 4, 0, 1)
    out = tmp_path / "profiles" / key.cell_id / "top_ops.json"
    result = profile_cell(key, {"engine": impl}, CellInputs(heart / "m.json", artifact), FAST, out, lock, n_calls=5)
    assert result["status"] == "ok", result.get("reason")
    assert result["tool"] == tool and (out.parent / result["trace"]).exists()
    names = " ".join(op["name"] for op in result["top_ops"]).lower()
    assert ("linear" in names or "addmm" in names) if impl == "torch_eager" else "gemm" in names
    assert sum(op["share"] for op in result["top_ops"]) <= 1.0 + 1e-9
    assert json.loads(out.read_text())["cell_id"] == key.cell_id
