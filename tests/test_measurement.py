"""Measurement beyond one timed loop: input rotation, GPU telemetry (against a fake NVML), repeats in
fresh processes, training cells and operator profiles, all on the CPU."""

from __future__ import annotations

import functools
import itertools
import json
import math
import multiprocessing
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pytest

from inferbench.catalog.engines import EngineInfo
from inferbench.core.cells import CellKey, CellRecord
from inferbench.core.settings import MeasureSettings
from inferbench.core.storage import load_samples, samples_path, save_samples
from inferbench.engines import registry
from inferbench.engines.base import Engine
from inferbench.launch import cell_job
from inferbench.launch.cell_job import measure_cell
from inferbench.launch.processes import cold_start_total_s, merge_repeats, spread_pct
from inferbench.machine.cores import auto_cores
from inferbench.machine.lock import MachineLock
from inferbench.models import create_model
from inferbench.models.registry import save_checkpoint
from inferbench.report.markdown import profile_section
from inferbench.scenarios import prepare
from inferbench.scenarios.prepare import CellInputs, CellRequest
from inferbench.scenarios.profile import profile_cell
from inferbench.scenarios.run import run_cell
from inferbench.trackers.gpu_telemetry import GpuTelemetry
from inferbench.trackers.host_telemetry import (
    PROC_STAT_FIELDS,
    HostWindow,
    descendants_cpu_s,
    parse_pid_stat,
    parse_proc_stat,
    window_summary,
)
from inferbench.trackers.profiling import event_totals, ort_top_ops, per_call, top_ops

FAST = MeasureSettings(warmup_s=0.0, min_time_s=0.0, min_iters=3, repeats=1)


@pytest.fixture
def lock(tmp_path):
    machine_lock = MachineLock(tmp_path / "lock")
    machine_lock.shared()
    yield machine_lock
    machine_lock.close()


# --- input rotation ---------------------------------------------------------------------------


class RecordingEngine(Engine):
    """Remembers which staged batch every run() got."""

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

    @property
    def staged_on_device(self) -> bool:  # as a GPU engine's: both boundaries, in rounds
        return True


def test_timed_calls_rotate_through_distinct_seeded_batches(tmp_path, monkeypatch, lock):
    info = EngineInfo("tests.test_measurement:RecordingEngine", ("cpu",), ("fp32",), "none", "records its inputs")
    monkeypatch.setitem(registry.ENGINES, "rec", info)
    meta = tmp_path / "m.json"
    meta.write_text(json.dumps({"inputs": [{"name": "x", "shape": ["batch", 4], "dtype": "float32"}]}))
    RecordingEngine.seen = []
    settings = MeasureSettings(warmup_s=0.0, min_time_s=0.0, min_iters=9, input_batches=3, repeats=1)
    key = CellKey("mlp_heart", "rec", "fp32", "cpu", 2, 0, 1)
    record = run_cell(CellRequest(key, {"engine": "rec"}, CellInputs(meta), settings), tmp_path / "r.json", lock)
    assert record.status == "ok" and record.input_batches == 3
    # four rounds of each boundary, each one untimed call and 3 timed (9 calls over 4 rounds); the last two
    # rounds are a device round and an end-to-end round
    seen = RecordingEngine.seen
    device, e2e = seen[-7:-4], seen[-3:]
    assert len(set(device)) == len(set(e2e)) == 3, "three different batches in a row, at both boundaries"
    assert len(set(seen)) == 3 and record.n_iters == 12 and record.end_to_end["n_iters"] == 12


# --- GPU telemetry ---------------------------------------------------------------------------------


class FakeNvml:
    """Counters with known values: the energy counter advances 2,000 mJ per read; the driver's sample
    buffers hold what ``take_sample`` put there. Counts the NVML calls it answers."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 0, 1, 0
    NVML_TOTAL_POWER_SAMPLES, NVML_GPU_UTILIZATION_SAMPLES = 0, 1
    NVML_PROCESSOR_CLK_SAMPLES, NVML_MEMORY_CLK_SAMPLES = 5, 6

    def __init__(self, energy: bool = True, samples: bool = True) -> None:
        self.energy_mj = 10_000
        self.temperature_c = 41
        self.has_energy, self.has_samples = energy, samples
        self.calls = 0
        self.buffers: dict[int, list[tuple[int, int]]] = {kind: [] for kind in (0, 1, 5, 6)}
        self.clock_us = 1_000

    def take_sample(self, busy_pct: int, sm_mhz: int = 1980, power_mw: int = 350_000) -> None:
        """The driver samples (it does so on its own, every ~1/6 s on real GPUs)."""
        self.clock_us += 166_000
        for kind, value in ((1, busy_pct), (5, sm_mhz), (6, 2619), (0, power_mw)):
            self.buffers[kind].append((self.clock_us, value))

    def nvmlDeviceGetSamples(self, handle, kind, since_us):
        self.calls += 1
        if not self.has_samples:
            raise RuntimeError("NVMLError_NotSupported")
        found = [(t, v) for t, v in self.buffers[kind] if t > since_us]
        if not found:
            raise RuntimeError("NVMLError_NotFound")
        return 1, [SimpleNamespace(timeStamp=t, sampleValue=SimpleNamespace(uiVal=v)) for t, v in found]

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        self.calls += 1
        if not self.has_energy:
            raise RuntimeError("NVMLError_NotSupported")
        self.energy_mj += 2_000
        return self.energy_mj

    def nvmlDeviceGetClockInfo(self, handle, kind):
        self.calls += 1
        return 1980 if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetTemperature(self, handle, sensor):
        self.calls += 1
        return self.temperature_c

    def nvmlDeviceGetPowerUsage(self, handle):
        self.calls += 1
        return 300_000  # mW

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        self.calls += 1
        mine = SimpleNamespace(pid=os.getpid(), usedGpuMemory=512 * 2**20)
        return [SimpleNamespace(pid=1, usedGpuMemory=2**30), mine]


def test_gpu_telemetry_reads_only_at_the_window_ends_and_summarises_the_drivers_samples():
    nvml = FakeNvml()
    nvml.take_sample(busy_pct=0, sm_mhz=345)  # before the window: not part of it
    telemetry = GpuTelemetry(nvml, handle=None)
    threads = threading.active_count()
    with telemetry:
        calls_at_start = nvml.calls
        assert threading.active_count() == threads, "no sampling thread runs beside the timed calls"
        nvml.take_sample(busy_pct=40)
        nvml.take_sample(busy_pct=60)
        time.sleep(0.02)
        assert nvml.calls == calls_at_start, "nothing reads NVML while the calls are timed"
    summary = telemetry.summary(items=400)
    assert summary["gpu_busy_pct"] == pytest.approx(50.0) and summary["n_samples"]["gpu_busy_pct"] == 2
    assert summary["sm_clock_mhz"] == {"min": 1980.0, "mean": 1980.0, "max": 1980.0}
    assert summary["power_w"]["mean"] == pytest.approx(350.0), "the driver's samples, in watts"
    assert summary["energy_j"] == pytest.approx(2.0)  # one read at each end of the window
    assert summary["energy_per_item_mj"] == pytest.approx(5.0)
    assert summary["temperature_c"]["max"] == 41
    assert summary["process_peak_mb"] == pytest.approx(512.0), "this process's memory, not another's"


def test_gpu_telemetry_adds_up_its_rounds_and_leaves_out_what_runs_between_them():
    nvml = FakeNvml()
    nvml.take_sample(busy_pct=0)  # before the first round
    telemetry = GpuTelemetry(nvml, handle=None)
    with telemetry:
        nvml.take_sample(busy_pct=90)
        nvml.temperature_c = 50
    nvml.take_sample(busy_pct=5)  # between the rounds: the other boundary's calls
    nvml.energy_mj += 50_000
    with telemetry:
        nvml.take_sample(busy_pct=70)
        nvml.temperature_c = 45
    summary = telemetry.summary(items=400)
    assert summary["temperature_c"] == {"max": 50}, "the hottest round's end, not the last one's"
    assert summary["n_samples"]["gpu_busy_pct"] == 2 and summary["gpu_busy_pct"] == pytest.approx(80.0)
    assert summary["energy_j"] == pytest.approx(4.0), "2 J per round; the 50 J between them are not counted"


def test_gpu_telemetry_without_samples_or_energy_counter_falls_back_to_the_end_readings():
    telemetry = GpuTelemetry(FakeNvml(energy=False, samples=False), handle=None)
    with telemetry:
        pass
    summary = telemetry.summary(items=10)
    assert summary["energy_per_item_mj"] is None and summary["gpu_busy_pct"] is None
    assert summary["power_w"] == {"min": 300.0, "mean": 300.0, "max": 300.0}, "read at both ends"


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


def test_host_window_adds_the_cpu_time_of_the_processes_this_one_started_that_lived_through_it():
    # /proc/<pid>/stat: pid (comm) state ppid ... utime stime (fields 14 and 15), in clock ticks
    ticks = os.sysconf("SC_CLK_TCK")
    assert parse_pid_stat(f"42 (VLLM::Engine Core) S 7 42 7 0 -1 0 0 0 0 0 {3 * ticks} {ticks} 0 0") == (7, 4.0)
    table = {7: (1, 9.0), 42: (7, 4.0), 43: (42, 1.0), 50: (1, 2.0)}  # 42 is 7's child, 43 its grandchild
    assert descendants_cpu_s(table, 7) == {42: 4.0, 43: 1.0}
    usage = [SimpleNamespace(ru_nvcsw=0, ru_nivcsw=0, ru_utime=0.0, ru_stime=0.0)] * 2
    # 44 started and 43 ended inside the window: only a process alive at both ends is counted
    summary = window_summary(None, None, *usage, {42: 4.0, 43: 1.0}, {42: 4.75, 44: 3.0})
    assert summary["children_cpu_s"] == pytest.approx(0.75)
    assert window_summary(None, None, *usage, {}, {44: 3.0})["children_cpu_s"] is None
    # a real child that spins through the window
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 30: pass"])
    try:
        time.sleep(0.5)  # started and spinning
        with HostWindow() as window:
            time.sleep(0.5)
        assert window.summary["children_cpu_s"] > 0  # a tick at least: it spun the whole window
    finally:
        child.kill()
        child.wait()


# --- repeats in fresh processes ----------------------------------------------------------------


def _record(p50_samples: np.ndarray, status: str = "ok") -> tuple[CellRecord, dict[str, np.ndarray]]:
    from inferbench.core.stats import latency_stats

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
    assert merged.latency_ms["p50"] == pytest.approx(math.sqrt(10.0 * 11.0))  # the processes', each weighing alike
    assert merged.latency_ms["p50_pooled"] == pytest.approx(11.0)  # pooled: 150 of 200 samples are 11 ms
    assert merged.repeats["n"] == 2
    assert [r["p50_ms"] for r in merged.repeats["per_repeat"]] == pytest.approx([10.0, 11.0])
    assert merged.repeats["p50_spread_pct"] == pytest.approx(100 * 1.0 / 10.5)
    assert merged.memory_mb["host_peak_rss"] == 150.0  # the largest peak
    assert merged.flatten()["repeat_p50_spread_pct"] == pytest.approx(9.5238, rel=1e-3)


def test_a_process_cold_start_counts_the_engine_steps_inside_its_preparation_once():
    first, second = _record(np.full(5, 0.01)), _record(np.full(5, 0.01))
    # load_model and compile are parts of prepare (Engine.cold_start inside Engine.prepare)
    second[0].cold_start_s = {"import": 6.0, "prepare": 36.0, "first_call": 0.1, "load_model": 9.0, "compile": 26.0}
    merged, _ = merge_repeats([first[0], second[0]], [first[1], second[1]])
    assert [r["cold_start_s"] for r in merged.repeats["per_repeat"]] == pytest.approx([1.0, 42.1])
    assert cold_start_total_s({}) is None


def test_merge_repeats_keeps_a_failed_repeat_visible():
    ok, failed = _record(np.full(10, 0.01)), _record(np.empty(0), status="failed")
    merged, _ = merge_repeats([ok[0], failed[0]], [ok[1], failed[1]])
    assert merged.status == "failed" and merged.reason == "repeat 2 of 2: broke"
    assert spread_pct([1.0]) is None and spread_pct([1.0, None]) is None


def test_run_cell_with_repeats_measures_in_fresh_processes(tmp_path):
    done, out = _noop_cell(tmp_path, {"repeats": 3})
    assert done.returncode == 0, done.stderr
    assert done.stderr.count(": fresh (forked after the imports)") == 3
    # the job's log: timestamped lines, ending with the cell's outcome
    lines = done.stderr.strip().splitlines()
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d INFO inferbench", line) for line in lines), lines
    assert ": ok, p50 " in lines[-1]
    record = CellRecord.load(out)
    assert record.status == "ok" and len(record.repeats["per_repeat"]) == 3  # processes measured, counted or not
    per_process = record.repeats["per_repeat"]
    assert len({r["pid"] for r in per_process}) == 3, "three processes, none of them the parent"
    memory = record.memory_mb
    assert 0 < memory["host_rss_at_start"] <= memory["host_peak_rss"], "a forked process notes what it starts with"
    windows = record.measured_windows_unix
    assert len(windows) == 3 and all(start < end for start, end in windows), "one lock window per process"
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(windows)), "one after another"
    assert all(r["status"] == "ok" and r["p50_ci95_ms"] for r in per_process)
    # one p50 per counted process: a busy host may leave a process out (the contention rule)
    counted = [r for r in per_process if r.get("counted", True)]
    assert counted and len(record.flatten()["p50_by_process_ms"].split(";")) == len(counted)
    assert np.load(samples_path(out)).size == record.n_iters
    assert not list(out.parent.glob("repeats-*")), "the repeats' scratch folder is removed"


def _noop_cell(tmp_path: Path, measure: dict[str, Any], threads: int = 1) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "cells" / "r.json"
    cmd = [
        sys.executable, "-m", "inferbench", "run-cell", "--workload", "mlp_heart", "--engine", "noop",
        "--engine-options", '{"engine": "noop"}', "--precision", "fp32", "--device", "cpu", "--batch", "1",
        "--threads", str(threads),
        "--measure", json.dumps({"warmup_s": 0, "min_time_s": 0.05, "max_repeats": 1, **measure}),
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


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux-only")
def test_cpu_affinity_auto_is_the_default_and_pins_each_process_to_the_chosen_cores(tmp_path):
    available = os.sched_getaffinity(0)
    assert MeasureSettings().cpu_affinity == "auto"
    for threads in sorted({1, len(available)}):
        chosen = auto_cores(threads)
        done, out = _noop_cell(tmp_path, {}, threads=threads)  # the default: auto
        assert done.returncode == 0, done.stderr
        record = CellRecord.load(out)
        assert record.status == "ok" and record.environment["affinity"] == list(chosen.cpus)
        assert record.measuring["cpus"] == list(chosen.cpus) and record.measuring["pinning"] == chosen.note
        assert record.measuring["pinning"].startswith("auto: ")
        # every process of the cell on the same cores
        assert [r["cpus"] for r in record.repeats["per_repeat"]] == [list(chosen.cpus)] * 2
    # null: left where it was, and the record says why
    done, out = _noop_cell(tmp_path, {"cpu_affinity": None, "repeats": 1})
    record = CellRecord.load(out)
    pinning = "unpinned: measure.cpu_affinity is null"
    assert record.measuring == {"lock": "machine", "cpus": sorted(available), "pinning": pinning}


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux-only")
def test_a_cell_measured_in_the_callers_process_gives_its_cpus_back(tmp_path, lock):
    before = os.sched_getaffinity(0)
    key = CellKey("mlp_heart", "noop", "fp32", "cpu", 1, 0, 1)
    record = run_cell(CellRequest(key, {"engine": "noop"}, CellInputs(), FAST), tmp_path / "r.json", lock)
    assert record.status == "ok", record.reason
    assert record.measuring["cpus"] == list(auto_cores(1).cpus)
    assert os.sched_getaffinity(0) == before


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
    record = run_cell(CellRequest(key, variant, inputs, FAST), tmp_path / "r.json", lock)
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
    record = run_cell(CellRequest(key, variant, inputs, FAST), tmp_path / "r.json", lock)
    assert record.status == "unavailable" and "dataset" in record.reason


def test_training_step_learns_and_times_iterations(heart, tmp_path, lock):
    from inferbench.engines.pytorch.train import TorchTrainStep
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
    record = run_cell(CellRequest(key, {"engine": "torch_train"}, inputs, FAST), tmp_path / "r.json", lock)
    assert record.status == "ok" and record.mode == "train" and record.timing == "end_to_end"  # a CPU cell
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
    # every node of the profiled run, not only the top ones: how many, their time, one's mean time
    assert result["per_call"] == {"unit": "nodes", "count": 2, "ms": pytest.approx(0.04), "mean_us": 20.0}


def test_a_profile_counts_every_kernel_of_a_call_beyond_the_top_ones():
    totals = {"gemm": (40, 400.0), "layer_norm": (20, 60.0), "add": (40, 40.0)}  # 5 calls profiled
    assert [op["name"] for op in top_ops(totals, n_calls=5, top=1)] == ["gemm"]
    counts = per_call(totals, n_calls=5, unit="kernels")
    assert counts == {"unit": "kernels", "count": 20.0, "ms": pytest.approx(0.1), "mean_us": 5.0}
    text = "\n".join(profile_section([{"cell_id": "c", "status": "ok", "tool": "torch.profiler", "n_calls": 5,
                                       "time": "t", "trace": "x", "top_ops": [], "per_call": counts}]))  # fmt: skip
    assert "20.0 kernels per call, 0.100 ms in all, 5.00 µs each on average." in text


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
    request = CellRequest(key, {"engine": impl}, CellInputs(heart / "m.json", artifact), FAST)
    result = profile_cell(request, out, lock, n_calls=5)
    assert result["status"] == "ok", result.get("reason")
    assert result["tool"] == tool and (out.parent / result["trace"]).exists()
    assert result["measuring"]["lock"] == "machine"  # one GPU or none: profiled alone, as a cell measures
    names = " ".join(op["name"] for op in result["top_ops"]).lower()
    assert ("linear" in names or "addmm" in names) if impl == "torch_eager" else "gemm" in names
    assert sum(op["share"] for op in result["top_ops"]) <= 1.0 + 1e-9
    assert json.loads(out.read_text())["cell_id"] == key.cell_id


# --- who sets the pace: host or device --------------------------------------------------------


class SimulatedStream:
    """One GPU stream on the host clock: work and events run in the order queued, each starting when
    both it has been queued and the work before it has ended."""

    def __init__(self) -> None:
        self.free_at = 0.0  # when the work queued so far will have ended

    def queue(self, seconds: float) -> float:
        self.free_at = max(time.perf_counter(), self.free_at) + seconds
        return self.free_at


class SimulatedEvent:
    def __init__(self, stream: SimulatedStream) -> None:
        self.stream, self.at = stream, 0.0

    def record(self, stream: SimulatedStream) -> None:
        self.at = stream.queue(0.0)

    def synchronize(self) -> None:
        while time.perf_counter() < self.at:
            time.sleep(max(self.at - time.perf_counter(), 0.0))

    def elapsed_time(self, stop: SimulatedEvent) -> float:
        return (stop.at - self.at) * 1e3


class SimulatedGpuCall:
    """A call whose host issues it for ``issue_s`` and then queues ``device_s`` of device work."""

    def __init__(self, stream: SimulatedStream, issue_s: float, device_s: float) -> None:
        self.stream, self.issue_s, self.device_s = stream, issue_s, device_s

    def __call__(self) -> None:
        time.sleep(self.issue_s)
        self.stream.queue(self.device_s)


@pytest.mark.parametrize(("issue_s", "device_s", "expected"), [(0.001, 0.03, "device"), (0.02, 0.001, "host")])
def test_event_timer_times_the_device_span_and_the_launch_share_classifies(issue_s, device_s, expected):
    """The next call is queued while the device runs this one: a device-bound call's window holds its
    device time alone (timed one at a time it would hold the host's issuing too: issue_s + device_s),
    a host-bound call's the host's issuing."""
    from inferbench.scenarios.timing import CudaEventTimer, measure_calls
    from inferbench.trackers.bound import classify

    stream = SimulatedStream()
    timer = CudaEventTimer(stream, synchronize=lambda: None, event=lambda: SimulatedEvent(stream))
    result = measure_calls(SimulatedGpuCall(stream, issue_s, device_s), timer, warmup_s=0.0, min_time_s=0.0,
                           min_iters=8)  # fmt: skip
    assert len(result.samples_s) == 8, "every call's sample, the one in flight at the end too"
    p50 = float(np.median(result.samples_s))
    if expected == "device":
        assert p50 == pytest.approx(device_s, abs=1e-4)
    else:
        assert p50 >= issue_s
    share = result.launch_share
    assert (share < 0.3) if expected == "device" else (share > 0.8)
    assert classify(share, None, launches_async=True)[0] == expected


def test_busy_share_classifies_synchronous_engines_and_unknown_stays_unknown():
    from inferbench.trackers.bound import classify

    # ONNX Runtime's run returns when its stream is done: the launch share (1.0) says nothing there
    assert classify(1.0, 97.0, launches_async=False)[0] == "device"
    bound, signal = classify(1.0, 40.0, launches_async=False)
    assert bound == "host" and signal.startswith("GPU busy 40%")
    assert classify(None, None, launches_async=True) == (None, None)


def _bound_record(bound: str | None, status: str = "ok") -> CellRecord:
    key = CellKey("bert_base", "torch_eager", "fp32", "cuda", 1, 128, 0)
    stats = {"latency_ms": {"p50": 5.0}, "n_iters": 10} if status == "ok" else {}
    return CellRecord(key=key, status=status, engine_impl="torch_eager", reason=None if status == "ok" else "x",
                      bound={"class": bound} if bound else None, **stats)  # fmt: skip


def test_host_bound_gpu_cells_get_more_fresh_processes():
    from inferbench.launch.processes import processes_wanted

    assert processes_wanted([], repeats=2, host_bound_repeats=3) == 2
    assert processes_wanted([_bound_record("device"), _bound_record("device")], 2, 3) == 2
    assert processes_wanted([_bound_record("device"), _bound_record("host")], 2, 3) == 3, (
        "one host-bound process is enough"
    )
    assert processes_wanted([_bound_record("host", status="failed")], 2, 3) == 1, "a broken process ends the cell"


def test_fresh_processes_are_forked_until_the_cell_has_what_it_needs(tmp_path):
    from inferbench.launch.processes import run_in_fresh_processes

    def one_process(path: Path, index: int) -> CellRecord:  # the first process finds the cell host-bound
        record = _bound_record("host" if not list(tmp_path.glob("marker*")) else "device")
        (tmp_path / f"marker{os.getpid()}").touch()
        record.environment = {"pid": os.getpid()}
        save_samples(path, {"device": np.full(10, 0.005), "end_to_end": np.full(10, 0.006)})
        record.save(path)
        return record

    record, samples = run_in_fresh_processes(one_process, tmp_path / "cell.json", repeats=2, host_bound_repeats=3)
    pids = [r["pid"] for r in record.repeats["per_repeat"]]
    assert len(pids) == 3 and len(set(pids)) == 3 and os.getpid() not in pids
    assert record.bound["class"] == "host" and record.bound["per_process"] == ["host", "device", "device"]
    assert samples["device"].size == 30


def test_a_cells_processes_share_its_compiler_cache_empty_at_the_first(tmp_path, monkeypatch):
    """The first process compiles from nothing (the record's cold start is its); the later ones load the
    code it generated, and none touches the job's own cache."""
    from inferbench.launch.processes import COMPILER_CACHES, run_in_fresh_processes

    shared = str(tmp_path / "shared")
    for variable in COMPILER_CACHES:
        monkeypatch.setenv(variable, shared)

    def one_process(path: Path, index: int) -> CellRecord:
        caches = [Path(os.environ[v]) for v in COMPILER_CACHES]
        found = sorted(p.name for c in caches for p in c.iterdir())
        (caches[0] / f"kernel{index}").touch()  # what a compile leaves behind
        (tmp_path / f"seen{index}").write_text(f"{','.join(found) or '-'} {' '.join(map(str, caches))}")
        save_samples(path, {"device": np.full(10, 0.005), "end_to_end": np.full(10, 0.006)})
        record = _bound_record("device")
        record.save(path)
        return record

    out = tmp_path / "cells" / "cell.json"
    record, _ = run_in_fresh_processes(one_process, out, repeats=3)
    assert record.repeats["n"] == 3
    seen = [(tmp_path / f"seen{index}").read_text().split() for index in range(3)]
    assert [found for found, *_ in seen] == ["-", "kernel0", "kernel0,kernel1"], "empty, then the code before"
    caches = {c for _, *paths in seen for c in paths}
    assert len(caches) == len(COMPILER_CACHES) and shared not in caches
    assert [os.environ[v] for v in COMPILER_CACHES] == [shared, shared], "the job's own settings are left alone"
    assert list(out.parent.iterdir()) == [], "the caches go with the processes' folder"


def _primed(tmp_path: Path, status: str = "ok") -> Path:
    """A priming job's record and its caches, as prime-cell leaves them."""
    from inferbench.launch.processes import primed_caches

    primed = tmp_path / "primed" / "cell.json"
    primed.parent.mkdir()
    record = _bound_record("device", status=status)
    record.latency_ms, record.n_iters, record.cold_start_s = None, None, {"prepare": 6.0, "compile": 5.0}
    record.save(primed)
    (primed_caches(primed) / "torchinductor_cache_dir").mkdir(parents=True)
    (primed_caches(primed) / "torchinductor_cache_dir" / "kernel").touch()
    return primed


def test_a_cell_primed_in_a_job_of_its_own_is_measured_from_its_caches(tmp_path):
    """The priming job compiled from nothing: its record is the cell's first (prime) process and gives the
    cold start; every measuring process loads its caches and is timed."""
    from inferbench.launch.processes import run_in_fresh_processes

    def one_process(path: Path, index: int) -> CellRecord:
        cache = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
        (tmp_path / f"seen{index}").write_text(",".join(sorted(p.name for p in cache.iterdir())))
        save_samples(path, {"device": np.full(10, 0.005), "end_to_end": np.full(10, 0.006)})
        record = _bound_record("device")
        record.cold_start_s = {"prepare": 1.0}
        record.save(path)
        return record

    record, samples = run_in_fresh_processes(one_process, tmp_path / "cells" / "cell.json", 2, primed=_primed(tmp_path))
    entries = record.repeats["per_repeat"]
    assert [(e["prime"], e["counted"]) for e in entries] == [(True, False), (False, True), (False, True)]
    assert record.repeats["primed"] and record.repeats["n"] == 2
    assert record.cold_start_s == {"prepare": 6.0, "compile": 5.0}, "the cold start is the compile from nothing"
    assert [(tmp_path / f"seen{i}").read_text() for i in (1, 2)] == ["kernel", "kernel"], "the prime's caches"
    assert samples["device"].size == 20


def test_a_priming_job_that_failed_leaves_the_priming_to_the_cells_first_process(tmp_path):
    from inferbench.launch.processes import run_in_fresh_processes

    def one_process(path: Path, index: int) -> CellRecord:
        save_samples(path, {"device": np.full(10, 0.005), "end_to_end": np.full(10, 0.006)})
        record = _bound_record("device")
        record.save(path)
        return record

    primed = _primed(tmp_path, status="failed")
    record, _ = run_in_fresh_processes(one_process, tmp_path / "cells" / "cell.json", 2, primed=primed)
    assert record.status == "ok" and not record.repeats["primed"] and record.repeats["n"] == 2


def test_processes_are_spawned_when_a_library_initialised_cuda_in_the_parent(tmp_path, monkeypatch, lock, caplog):
    """A child forked after CUDA is initialised cannot use the GPU: the cell's processes are spawned."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # as torchao's import does on a GPU
    key = CellKey("mlp_heart", "noop", "fp32", "cpu", 1, 0, 1)
    settings = MeasureSettings(warmup_s=0.0, min_time_s=0.02, min_iters=3, repeats=2, max_repeats=2)
    with caplog.at_level("INFO", logger="inferbench"):
        record = measure_cell(CellRequest(key, {"engine": "noop"}, CellInputs(), settings), tmp_path / "r.json", lock)
    assert record.status == "ok" and len(record.repeats["per_repeat"]) == 2  # processes measured, counted or not
    pids = {r["pid"] for r in record.repeats["per_repeat"]}
    assert len(pids) == 2 and os.getpid() not in pids
    assert "they are spawned, not forked" in caplog.text and caplog.text.count("fresh (spawned") == 2


def test_input_batches_are_drawn_once_per_cell_and_shared_by_its_forked_processes(tmp_path, monkeypatch, lock):
    """Drawing four batches of 1,024 images takes seconds: the job draws them, its processes inherit them."""
    spec = create_model("mlp_heart", in_features=13, hidden=[8])
    save_checkpoint(spec, tmp_path / "m.pt", seed=0)
    meta = tmp_path / "m.json"
    meta.write_text(json.dumps({"name": "mlp_heart", "arch": spec.arch, "inputs": [asdict(i) for i in spec.inputs]}))
    draws = tmp_path / "draws"
    draws.mkdir()
    real = prepare.make_inputs

    def counted(*args, **kwargs):  # a file per draw: the children's draws are seen from here too
        (draws / f"{os.getpid()}-{len(list(draws.iterdir()))}").touch()
        return real(*args, **kwargs)

    monkeypatch.setattr(prepare, "make_inputs", counted)
    prepare._BATCHES.clear()
    key = CellKey("mlp_heart", "torch_eager", "fp32", "cpu", 4, 0, 1)
    settings = MeasureSettings(warmup_s=0.0, min_time_s=0.02, min_iters=3, repeats=2, max_repeats=2, input_batches=3)
    request = CellRequest(key, {"engine": "torch_eager"}, CellInputs(meta, tmp_path / "m.pt"), settings)
    record = measure_cell(request, tmp_path / "r.json", lock)
    assert record.status == "ok" and len(record.repeats["per_repeat"]) == 2  # processes measured, counted or not
    drawn_by = {p.name.split("-")[0] for p in draws.iterdir()}
    assert drawn_by == {str(os.getpid())} and len(list(draws.iterdir())) == 3, "3 batches, drawn by the job only"
    shared = prepare.seeded_batches(key, CellInputs(meta, None, None, None), settings)[1]
    expected = [real(spec.inputs, 4, 0, seed) for seed in range(3)]
    assert all(np.array_equal(a["x"], b["x"]) for a, b in zip(shared, expected, strict=True))


def test_transformers_model_code_is_left_to_the_processes_of_gpu_cells(tmp_path, monkeypatch):
    """transformers' modeling code imports torchao, whose import initialises CUDA: never before a fork."""
    built: list[str] = []
    monkeypatch.setattr("inferbench.models.registry.create_model", lambda name, **arch: built.append(name))
    for workload, device in [("bert_base", "cuda"), ("bert_base", "cpu"), ("resnet50", "cuda")]:
        meta = tmp_path / f"{workload}.json"
        meta.write_text(json.dumps({"name": workload, "arch": {}}))
        key = CellKey(workload, "torch_eager", "fp16", device, 1, 128, 0)
        cell_job._import_model_code(key, "checkpoint", CellInputs(meta, None, None, None))
    assert built == ["bert_base", "resnet50"], "BERT is built on the meta device for the CPU cell only"


# --- imports timed apart, calls sized for the percentiles -------------------------------------


def test_imports_are_timed_once_before_the_processes_and_left_out_of_loading(tmp_path):
    spec = create_model("mlp_heart", in_features=13, hidden=[8])
    save_checkpoint(spec, tmp_path / "m.pt", seed=0)
    (tmp_path / "m.json").write_text(json.dumps({"name": "mlp_heart", "arch": spec.arch,
                                                 "inputs": [asdict(i) for i in spec.inputs]}))  # fmt: skip
    out = tmp_path / "cells" / "r.json"
    cmd = [
        sys.executable, "-m", "inferbench", "run-cell", "--workload", "mlp_heart", "--engine", "torch_eager",
        "--engine-options", '{"engine": "torch_eager"}', "--precision", "fp32", "--device", "cpu", "--batch", "2",
        "--threads", "1", "--model-meta", str(tmp_path / "m.json"), "--artifact", str(tmp_path / "m.pt"),
        "--measure", json.dumps({"warmup_s": 0, "min_time_s": 0.01, "min_iters": 6, "repeats": 2, "max_repeats": 2}),
        "--out", str(out),
    ]  # fmt: skip
    env = {**os.environ, "INFERBENCH_LOCK_FILE": str(tmp_path / "lock")}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    record = CellRecord.load(out)
    cold = record.cold_start_s
    assert record.status == "ok" and len(record.repeats["per_repeat"]) == 2  # processes measured, counted or not
    # torch was imported by the parent (seconds); the forked processes only loaded the checkpoint
    assert cold["import"] > 5 * cold["load_model"]
    row = pd.DataFrame([record.flatten()])
    from inferbench.analysis.decisions import cold_start_total_s

    assert cold_start_total_s(row.iloc[0]) == pytest.approx(cold["prepare"] + cold["first_call"])
    # six calls in all, three per process
    assert record.n_iters >= 6 and all(r["n_iters"] >= 3 for r in record.repeats["per_repeat"])


def test_a_study_that_reports_p99_gets_100_calls_per_cell():
    from inferbench.plan.grid import cell_min_iters

    study = {"workloads": ["mlp_heart"], "engines": ["noop"], "precisions": ["fp32"], "devices": ["cpu"],
             "batch_sizes": [1, 2], "threads": [1]}  # fmt: skip
    config = {
        "run": ["quick", "tails"],
        "studies": {"quick": {**study, "layout": "by_batch"}, "tails": {**study, "batch_sizes": [2]}},
        "engines": {"noop": {"engine": "noop"}},
        "measure": {"min_iters": 5},
    }
    needed = {c.batch_size: n for c, n in cell_min_iters(config, has_cuda=False).items()}
    assert needed == {1: 5, 2: 100}, "the `engines` layout shows p99; a cell in both studies gets the larger"
    config["studies"]["tails"]["percentiles"] = ["p50", "p90"]
    assert {c.batch_size: n for c, n in cell_min_iters(config, has_cuda=False).items()} == {1: 5, 2: 10}
    assert MeasureSettings(min_iters=100, repeats=2).min_iters_per_process == 50
    assert MeasureSettings(min_iters=5, repeats=2).min_iters_per_process == 3


def test_the_cells_own_process_holds_the_lock_except_while_a_child_measures(tmp_path):
    """Merging the processes' records (and anything else the parent does) must not overlap another
    cell's timed loop: the parent lets go of the machine lock only while one of its children runs."""
    import fcntl

    from inferbench.launch.processes import run_in_fresh_processes

    parent = MachineLock(tmp_path / "lock")
    parent.shared()

    def one_process(path: Path, index: int) -> CellRecord:
        own = MachineLock(tmp_path / "lock")
        fcntl.flock(own._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if the parent still held it
        own.close()
        record = _bound_record(None)
        save_samples(path, {"device": np.full(5, 0.001), "end_to_end": np.full(5, 0.001)})
        record.save(path)
        return record

    record, _ = run_in_fresh_processes(one_process, tmp_path / "cell.json", repeats=2, lock=parent)
    assert record.repeats["n"] == 2
    other = MachineLock(tmp_path / "lock")
    with pytest.raises(BlockingIOError):  # held shared again: nobody can measure while it merges
        fcntl.flock(other._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    other.close()
    parent.close()


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
def test_a_forked_process_records_the_memory_it_starts_with_beside_its_peak():
    from inferbench.trackers import memory

    held = bytearray(300 * 2**20)
    held[:: 2**12] = b"x" * len(held[:: 2**12])  # resident in the parent, mapped in its children

    def child(queue: Any) -> None:
        memory.note_process_start()
        queue.put((memory.host_rss_at_start_mb(), memory.host_peak_rss_mb()))

    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    process = context.Process(target=child, args=(queue,))
    process.start()
    at_start, peak = queue.get(timeout=30)
    process.join(30)
    assert at_start >= 290, "the parent's resident pages count in the child's RSS from its start"
    assert peak >= at_start
    del held


def test_a_window_in_which_other_work_held_the_cores_is_contended():
    ticks = os.sysconf("SC_CLK_TCK")
    # two cores for 1 s: 2 * ticks jiffies; busy all of it, this process 1.2 s of CPU: others held 0.8 cores
    before = parse_proc_stat("cpu  0 0 0 0 0 0 0 0 0 0\n")
    after = parse_proc_stat(f"cpu  {2 * ticks} 0 0 0 0 0 0 0 0 0\n")
    usage = [SimpleNamespace(ru_nvcsw=0, ru_nivcsw=0, ru_utime=0.0, ru_stime=0.0),
             SimpleNamespace(ru_nvcsw=0, ru_nivcsw=0, ru_utime=1.2, ru_stime=0.0)]  # fmt: skip
    busy = window_summary(before, after, *usage, wall_s=1.0)
    assert busy["others_cores"] == pytest.approx(0.8) and busy["idle_cores"] == pytest.approx(0.0)
    assert busy["contended"] is True
    # the same process alone: both cores its own (a spinning thread pool), nothing else ran
    alone = [usage[0], SimpleNamespace(ru_nvcsw=0, ru_nivcsw=0, ru_utime=2.0, ru_stime=0.0)]
    assert window_summary(before, after, *alone, wall_s=1.0)["contended"] is False
    # others busy, but a core stood idle: the cell's threads did not wait
    roomy = parse_proc_stat(f"cpu  {2 * ticks} 0 0 {2 * ticks} 0 0 0 0 0 0\n")  # four cores, two busy
    assert window_summary(before, roomy, *usage, wall_s=1.0)["contended"] is False
    assert window_summary(before, after, *usage)["contended"] is None, "no wall time: unknown"


def test_a_pinned_process_counts_contention_only_on_its_own_cores():
    """One core busy beside a cell pinned to the other contends nothing; on the cell's own core it does."""
    cpu0 = "cpu0 {} 0 0 {} 0 0 0 0\n"
    cpu1 = "cpu1 {} 0 0 {} 0 0 0 0\n"
    ticks = os.sysconf("SC_CLK_TCK")
    # 1 s: the other work spins on CPU 0 (ticks busy), the cell runs on CPU 1 (ticks busy, its own)
    before = f"cpu  0 0 0 0 0 0 0 0\n{cpu0.format(0, 0)}{cpu1.format(0, 0)}"
    after = f"cpu  {2 * ticks} 0 0 0 0 0 0 0\n{cpu0.format(ticks, 0)}{cpu1.format(ticks, 0)}"
    assert parse_proc_stat(after, frozenset({1})) == dict.fromkeys(PROC_STAT_FIELDS, 0) | {"user": ticks}
    usage = [SimpleNamespace(ru_nvcsw=0, ru_nivcsw=0, ru_utime=0.0, ru_stime=0.0),
             SimpleNamespace(ru_nvcsw=0, ru_nivcsw=0, ru_utime=1.0, ru_stime=0.0)]  # fmt: skip
    host = window_summary(parse_proc_stat(before), parse_proc_stat(after), *usage, wall_s=1.0)
    assert host["contended"] and host["others_cores"] == pytest.approx(1.0), "unpinned: the host's other core counts"
    mine = (parse_proc_stat(before, frozenset({1})), parse_proc_stat(after, frozenset({1})))
    pinned = window_summary(parse_proc_stat(before), parse_proc_stat(after), *usage, wall_s=1.0, mine=mine)
    assert not pinned["contended"] and pinned["others_cores"] == pytest.approx(0.0) and pinned["on_cpus"] == "own"
    assert pinned["busy_pct"] == pytest.approx(100.0), "the machine's shares stay the machine's"
    shared = (parse_proc_stat(before, frozenset({0, 1})), parse_proc_stat(after, frozenset({0, 1})))
    assert window_summary(None, None, *usage, wall_s=1.0, mine=shared)["contended"], "its own cores held by others"
    with pytest.raises(ValueError, match=r"for CPUs \[7\]"):
        parse_proc_stat(after, frozenset({7}))


def test_cells_measured_in_turn_take_one_process_each_until_each_has_what_it_needs(tmp_path):
    """A1 B1, B2 A2, A3 ...: every other round reversed, so that neither cell always follows the other; a cell
    of another class that wants more processes (host-bound here) goes on alone once the other is done."""
    from inferbench.launch.processes import CellProcesses, run_in_turn

    order = tmp_path / "order"

    def one_process(name: str, bound: str, path: Path, index: int) -> CellRecord:
        with order.open("a") as file:
            file.write(f"{name}{index + 1} ")
        save_samples(path, {"device": np.full(10, 0.005), "end_to_end": np.full(10, 0.006)})
        record = _bound_record(bound)
        record.save(path)
        return record

    cells = []
    for name, bound in (("A", "host"), ("B", "device")):
        (tmp_path / name).mkdir()
        cells.append(CellProcesses(functools.partial(one_process, name, bound), tmp_path / name, 2, 3))
    run_in_turn(cells)
    assert order.read_text().split() == ["A1", "B1", "B2", "A2", "A3"]
    assert [cell.merged()[0].repeats["n"] for cell in cells] == [3, 2]


def test_cells_of_one_class_measured_in_turn_take_as_many_processes(tmp_path):
    """A cell whose first two processes agree (both in the host's slow mode, say) takes turns with its twin for
    as long as the twin's processes part and it gets more: both rest on processes of the same rounds."""
    from inferbench.launch.processes import CellProcesses, run_in_turn

    order = tmp_path / "order"
    p50s = {"A": [5.0, 5.1, 3.0, 3.0, 3.0], "B": [3.0, 5.0, 3.0, 3.0, 3.0]}  # B parts: 3.0 and 5.0

    def one_process(name: str, path: Path, index: int) -> CellRecord:
        with order.open("a") as file:
            file.write(f"{name}{index + 1} ")
        save_samples(path, {"device": np.full(10, 0.005), "end_to_end": np.full(10, 0.006)})
        record = _bound_record("device")
        record.latency_ms = {"p50": p50s[name][index]}
        record.save(path)
        return record

    cells = []
    for name in "AB":
        (tmp_path / name).mkdir()
        cells.append(CellProcesses(functools.partial(one_process, name), tmp_path / name, 2, parted=(10.0, 4)))
    run_in_turn(cells)
    assert sorted(order.read_text().split()) == ["A1", "A2", "A3", "A4", "B1", "B2", "B3", "B4"]
    assert [cell.merged()[0].repeats["n"] for cell in cells] == [4, 4]


def test_a_cell_measured_in_turn_takes_its_own_record_or_says_what_is_missing(tmp_path):
    from inferbench.core.errors import UserError
    from inferbench.launch.cell_job import interleaved_record, take_interleaved

    record = _bound_record("device")
    folder, out = tmp_path / "interleaved", tmp_path / "cells" / record.key.relpath
    with pytest.raises(UserError, match=r"wrote no record for it.*logs/interleaved_cells"):
        take_interleaved(folder, record.key, out)
    source = interleaved_record(folder, record.key)
    save_samples(source, {"device": np.full(10, 0.005), "end_to_end": np.full(10, 0.006)})
    record.save(source)
    taken = take_interleaved(folder, record.key, out)
    assert taken.key == record.key and CellRecord.load(out).latency_ms == record.latency_ms
    assert load_samples(out)["device"].size == 10
