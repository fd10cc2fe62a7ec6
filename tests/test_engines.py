"""Engines and the cell runner on CPU: agreement, availability, and records for every outcome."""

from __future__ import annotations

import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch

from inferbench.core.cells import CellKey, CellRecord
from inferbench.core.environment import engine_libraries
from inferbench.core.settings import MeasureSettings
from inferbench.core.storage import samples_path
from inferbench.engines.base import Engine
from inferbench.engines.registry import ENGINES, engine_info, load_engine_class
from inferbench.machine.lock import MachineLock
from inferbench.models import create_model, make_inputs
from inferbench.models.export import export_onnx, relative_l2
from inferbench.models.registry import save_checkpoint
from inferbench.scenarios.prepare import CellInputs, CellRequest
from inferbench.scenarios.run import run_cell
from tests.conftest import REPO

FAST = MeasureSettings(warmup_s=0.0, min_time_s=0.0, min_iters=3, repeats=1)
BERT = {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64}
NO_CUDA = not torch.cuda.is_available()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """A shrunk BERT: checkpoint, model description and ONNX export."""
    root = tmp_path_factory.mktemp("bert")
    spec = create_model("bert_base", **BERT)
    save_checkpoint(spec, root / "m.pt", seed=0)
    (root / "m.json").write_text(json.dumps({"inputs": [asdict(i) for i in spec.inputs]}))
    export_onnx(spec, root / "m.onnx")
    return {"spec": spec, "checkpoint": root / "m.pt", "meta": root / "m.json", "onnx": root / "m.onnx"}


def _engine(impl, artifact, spec, threads=1, precision="fp32", example=None, **options):
    engine = load_engine_class(impl)("cpu", precision, threads, {"engine": impl, **options})
    engine.prepare(artifact, spec.inputs, example or make_inputs(spec.inputs, 3, 12, 0))
    return engine


def test_torch_and_ort_compute_the_same_function(artifacts):
    spec = artifacts["spec"]
    feed = make_inputs(spec.inputs, 3, 12, 0)
    torch_engine = _engine("torch_eager", artifacts["checkpoint"], spec)
    ort_engine = _engine("ort_cpu", artifacts["onnx"], spec)
    outputs = {}
    for engine in (torch_engine, ort_engine):
        out = engine.run(engine.stage(feed))
        engine.synchronize()
        outputs[engine.impl] = engine.to_numpy(out)
    assert outputs["torch_eager"].shape == (3, 12, 32)
    assert relative_l2(outputs["ort_cpu"], outputs["torch_eager"]) < 1e-5
    assert ort_engine.describe()["providers"][0] == "CPUExecutionProvider"
    assert torch_engine.describe()["threads"] == 1


def test_bf16_autocast_changes_precision_on_cpu(artifacts):
    spec = artifacts["spec"]
    feed = make_inputs(spec.inputs, 2, 8, 0)
    engine = _engine("torch_eager", artifacts["checkpoint"], spec, precision="bf16", example=feed)
    low = engine.to_numpy(engine.run(engine.stage(feed)))
    ref = _engine("torch_eager", artifacts["checkpoint"], spec)
    full = ref.to_numpy(ref.run(ref.stage(feed)))
    assert 0 < relative_l2(low, full) < 0.1  # close, but really computed in lower precision


def in_a_fresh_process(function, *args):
    """``function(*args)`` in a spawned process, its result returned. OpenVINO's CPU plugin keeps worker
    threads in a process that ran it, and a fork of that process inherits them broken: the warm-start
    tests fork servers from this one, as the workflow's warm start forks jobs from a server that has
    only imported OpenVINO, never run it."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(function, *args).result()


def _openvino_against_torch(artifacts: dict, static_shapes: bool) -> dict:
    spec = create_model("bert_base", **BERT)
    feed = make_inputs(spec.inputs, 3, 12, 0)
    reference = _engine("torch_eager", artifacts["checkpoint"], spec, example=feed)
    engine = _engine("openvino", artifacts["onnx"], spec, example=feed, static_shapes=static_shapes)
    out = engine.to_numpy(engine.run(engine.stage(feed)))
    return {
        "shape": out.shape,
        "rel_l2": relative_l2(out, reference.to_numpy(reference.run(reference.stage(feed)))),
        "described": engine.describe(),
        "takes_any_batch": engine.takes_any_batch,
        "cold_start": set(engine.cold_start_s),
        "computation": engine.computation("text"),
    }


@pytest.mark.parametrize("static_shapes", [True, False])
def test_openvino_computes_what_torch_computes_in_strict_fp32(artifacts, static_shapes):
    paths = {k: artifacts[k] for k in ("checkpoint", "onnx")}
    done = in_a_fresh_process(_openvino_against_torch, paths, static_shapes)
    assert done["shape"] == (3, 12, 32) and done["rel_l2"] < 1e-5
    compiled = done["described"]["compiled"]
    # what the plugin runs with is read back, not assumed: fp32 stays fp32 (never the CPU's bf16 default)
    assert compiled["INFERENCE_PRECISION_HINT"] == "f32"
    assert compiled["INFERENCE_NUM_THREADS"] == "1" and compiled["NUM_STREAMS"] == "1"
    assert done["takes_any_batch"] is not static_shapes
    assert {"read", "compile_model"} <= done["cold_start"]
    assert done["computation"]["graph"] == "openvino"


def _openvino_int8_against_fp32(onnx: Path, int8_onnx: Path) -> dict:
    from inferbench.models.export import quantize_int8

    spec = create_model("bert_base", **BERT)
    feed = make_inputs(spec.inputs, 2, 8, 0)
    quantize_int8(onnx, int8_onnx)
    full = _engine("openvino", onnx, spec, example=feed)
    int8 = _engine("openvino", int8_onnx, spec, precision="int8", example=feed)
    low, reference = (e.to_numpy(e.run(e.stage(feed))) for e in (int8, full))
    return {"rel_l2": relative_l2(low, reference), "computation": int8.computation("text")}


def test_openvino_runs_the_int8_export(artifacts, tmp_path):
    done = in_a_fresh_process(_openvino_int8_against_fp32, artifacts["onnx"], tmp_path / "m.int8.onnx")
    assert 0 < done["rel_l2"] < 0.05  # close, but really quantized
    assert done["computation"]["precision_mode"] == "dynamic quantization"


def test_openvino_is_unavailable_with_the_reason_where_it_cannot_run(monkeypatch):
    import importlib.util

    from inferbench.engines.openvino import engine as openvino_engine

    cls = load_engine_class("openvino")
    monkeypatch.setattr(openvino_engine, "cpu_capabilities", lambda: ["FP32", "INT8"])
    reason = cls.unavailable_reason("cpu", "bf16")
    assert reason and "does not compute in bf16" in reason and "FP32, INT8" in reason
    assert cls.unavailable_reason("cpu", "fp32") is None and cls.unavailable_reason("cpu", "int8") is None
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "openvino" else real_find_spec(n, *a))
    assert "openvino is not installed" in cls.unavailable_reason("cpu", "fp32")


@pytest.mark.skipif(not NO_CUDA, reason="checks the no-GPU path")
def test_cuda_is_unavailable_with_reason_here():
    for impl in ("torch_eager", "noop"):
        reason = load_engine_class(impl).unavailable_reason("cuda", "fp32")
        assert reason and "no CUDA device" in reason
    assert load_engine_class("ort_cpu").unavailable_reason("cpu", "fp32") is None


def test_registry_finds_every_family_and_each_engine_names_its_class():
    assert engine_info("ort_cpu").devices == ("cpu",) and engine_info("ort_cpu").artifact == "onnx"
    assert engine_info("torch_eager").artifact == "checkpoint"
    # every package under engines/ that declares engines is a family the registry found, and each engine's
    # class lives in its own family's package
    engines_dir = REPO / "src" / "inferbench" / "engines"
    declaring = {p.parent.name for p in engines_dir.glob("*/__init__.py") if "ENGINES = " in p.read_text()}
    assert {info.module.split(".")[2] for info in ENGINES.values()} == declaring and len(declaring) >= 6
    for impl, info in ENGINES.items():
        assert info.module.startswith("inferbench.engines.") and info.target.count(":") == 1, impl
        family = info.module.split(".")[2]
        text = (engines_dir / family / "__init__.py").read_text()
        assert f'"{impl}": EngineInfo(' in text, f"{impl} is declared in its class's family ({family})"
    assert issubclass(load_engine_class("torch_eager"), Engine)
    with pytest.raises(KeyError, match="unknown engine implementation"):
        engine_info("tensorrt9")


def _run(key, variant, artifacts, artifact, tmp_path, settings=FAST):
    out = tmp_path / key.relpath
    lock = MachineLock()
    lock.shared()
    try:
        record = run_cell(CellRequest(key, variant, CellInputs(artifacts["meta"], artifact), settings), out, lock)
    finally:
        lock.close()
    assert CellRecord.load(out) == record  # exactly what was returned was written
    return record, np.load(samples_path(out))


def _run_in_a_fresh_process(key, variant, artifacts, artifact, tmp_path):
    """``_run`` in a spawned process (an OpenVINO cell: see ``in_a_fresh_process``)."""
    paths = {"meta": artifacts["meta"]}
    in_a_fresh_process(_run, key, variant, paths, artifact, tmp_path)
    out = tmp_path / key.relpath
    return CellRecord.load(out), np.load(samples_path(out))


@pytest.mark.parametrize(
    ("impl", "artifact"), [("torch_eager", "checkpoint"), ("ort_cpu", "onnx"), ("openvino", "onnx"), ("noop", None)]
)
def test_run_cell_ok_record(impl, artifact, artifacts, tmp_path):
    key = CellKey("bert_base", impl, "fp32", "cpu", 2, 16, 1)
    run = _run_in_a_fresh_process if impl == "openvino" else _run
    record, samples = run(key, {"engine": impl}, artifacts, artifacts.get(artifact), tmp_path)
    assert record.status == "ok", record.reason
    assert record.n_iters == len(samples) >= 3 and record.warmup_iters >= 1
    assert record.latency_ms["p50"] == pytest.approx(np.median(samples) * 1e3)
    assert record.latency_ms["p99"] is None  # too few samples for a p99
    assert record.throughput_per_s == pytest.approx(2 * len(samples) / samples.sum())
    # a CPU cell: its inputs never leave the host, so it is timed end to end only
    assert record.timing == "end_to_end" and record.timing_description.startswith("host arrays in")
    assert record.end_to_end["latency_ms"]["p50"] == record.latency_ms["p50"]
    assert record.cold_start_s["prepare"] >= 0 and record.cold_start_s["first_call"] > 0
    assert record.memory_mb["host_peak_rss"] > 10
    # the versions of what this engine uses, none of another engine's
    libraries = record.environment["libraries"]
    assert record.environment["cpu_count"] >= 1 and set(engine_libraries(ENGINES[impl])) <= set(libraries)
    assert ("openvino" in libraries) == (impl == "openvino")
    # a CPU cell measures alone, the machine lock exclusive; the record says on which cores
    assert record.measuring["lock"] == "machine" and set(record.measuring["cpus"]) <= set(range(os.cpu_count()))


@pytest.mark.skipif(not NO_CUDA, reason="checks the no-GPU path")
def test_run_cell_records_unavailable_cuda(artifacts, tmp_path):
    key = CellKey("bert_base", "torch_eager", "fp32", "cuda", 2, 16, 0)
    record, samples = _run(key, {"engine": "torch_eager"}, artifacts, artifacts["checkpoint"], tmp_path)
    assert record.status == "unavailable" and "no CUDA device" in record.reason
    assert record.latency_ms is None and samples.size == 0


def test_run_cell_records_failure_and_goes_on(artifacts, tmp_path):
    key = CellKey("bert_base", "ort_cpu", "fp32", "cpu", 2, 16, 1)
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not an onnx file")
    record, _ = _run(key, {"engine": "ort_cpu"}, artifacts, broken, tmp_path)
    assert record.status == "failed" and record.latency_ms is None
    assert "broken.onnx" in record.reason or "protobuf" in record.reason.lower()


def test_run_cell_records_oom(artifacts, tmp_path, monkeypatch):
    from inferbench.engines.pytorch.eager import TorchEager

    def oom(self, staged):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(TorchEager, "run", oom)
    key = CellKey("bert_base", "torch_eager", "fp32", "cpu", 4096, 16, 1)
    record, _ = _run(key, {"engine": "torch_eager"}, artifacts, artifacts["checkpoint"], tmp_path)
    assert record.status == "oom" and "Tried to allocate" in record.reason
