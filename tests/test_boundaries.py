"""The two timing boundaries, on a fake engine whose costs are known: staging 1 ms, computing 2 ms,
fetching the output 1 ms. `device` must see the computing only, `end_to_end` all three."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferbench.core.cells import CellKey, CellRecord
from inferbench.engines.base import Engine
from inferbench.engines.registry import EngineInfo
from inferbench.launch.lock import MachineLock
from inferbench.scenarios import run as cell_runner
from inferbench.scenarios.run import CellInputs, MeasureSettings, run_cell

STAGE_S, RUN_S, FETCH_S = 0.001, 0.002, 0.001


class SleepEngine(Engine):
    impl = "sleep"
    computes = False  # no model: nothing to compare with a reference

    def prepare(self, artifact: Path | None, inputs: tuple, example: dict[str, np.ndarray]) -> None:
        pass

    def stage(self, batch: dict[str, np.ndarray]) -> Any:
        time.sleep(STAGE_S)
        return batch

    def run(self, staged: Any) -> Any:
        time.sleep(RUN_S)
        return np.zeros(1, np.float32)

    def to_numpy(self, output: Any) -> np.ndarray:
        time.sleep(FETCH_S)
        return output


class HostToHostSleepEngine(SleepEngine):
    timing = "end_to_end"  # like ort_cuda without IO binding: its run already copies both ways


@pytest.mark.parametrize("engine_cls", [SleepEngine, HostToHostSleepEngine])
def test_device_and_end_to_end_boundaries_time_what_they_say(engine_cls, tmp_path, monkeypatch):
    monkeypatch.setattr(cell_runner, "load_engine_class", lambda impl: engine_cls)
    monkeypatch.setattr(
        cell_runner, "engine_info", lambda impl: EngineInfo("x:y", ("cpu",), ("fp32",), "none", "sleeps")
    )
    key = CellKey("mlp_heart", "sleep", "fp32", "cpu", 1, 0, 1)
    lock = MachineLock(tmp_path / "lock")
    lock.shared()
    try:
        record = run_cell(
            key, {"engine": "sleep"}, CellInputs(), MeasureSettings(0.0, 0.2, 20), tmp_path / "r.json", lock
        )
    finally:
        lock.release()
    assert record.status == "ok", record.reason
    device_ms, e2e_ms = record.latency_ms["p50"], record.end_to_end["latency_ms"]["p50"]
    # sleeping never returns early; the upper bounds leave room for a slow, shared CI machine
    assert 2.0 <= device_ms < 2.0 * 1.5 + 1
    if engine_cls is SleepEngine:
        assert record.timing == "device"
        assert 4.0 <= e2e_ms < 4.0 * 1.5 + 1
        assert e2e_ms - device_ms == pytest.approx(2.0, abs=1.0)  # staging + fetching
        assert record.end_to_end["n_iters"] >= 20
    else:  # one boundary only: the engine's own is already end to end
        assert record.timing == "end_to_end" and e2e_ms == device_ms
    row = CellRecord.load(tmp_path / "r.json").flatten()
    assert row["e2e_latency_p50_ms"] == pytest.approx(e2e_ms) and row["latency_p50_ms"] == pytest.approx(device_ms)
