"""The native TensorRT engine's code paths that run without TensorRT: cache paths, shape profiles,
calibration inputs, availability, and the builder calls (against a recording stand-in of the API)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from inferbench.engines.tensorrt import build, plans
from inferbench.engines.tensorrt import engine as trt_engine
from inferbench.models.registry import InputSpec

BERT_INPUTS = (
    InputSpec("input_ids", ("batch", "seq"), "int64", "tokens", 30522),
    InputSpec("attention_mask", ("batch", "seq"), "int64", "mask"),
)
MLP_INPUTS = (InputSpec("x", ("batch", 5), "float32"),)
TRT_INSTALLED = importlib.util.find_spec("tensorrt") is not None


def test_cache_path_names_gpu_trt_version_variant_and_shape():
    target = plans.target_name("NVIDIA H100 80GB HBM3", "10.9.0.34")
    assert target == "nvidia-h100-80gb-hbm3-trt10.9.0.34"
    plan = plans.plan_path(target, "tensorrt", "bert_base", "fp16", 1, 128)
    assert plan == Path(
        "results/engines/tensorrt/nvidia-h100-80gb-hbm3-trt10.9.0.34/tensorrt/bert_base.fp16.b1-s128.plan"
    )
    other_gpu = plans.plan_path(plans.target_name("NVIDIA H200", "10.9.0.34"), "tensorrt", "bert_base", "fp16", 1, 128)
    other_trt = plans.plan_path(
        plans.target_name("NVIDIA H100 80GB HBM3", "10.13"), "tensorrt", "bert_base", "fp16", 1, 128
    )
    assert len({plan, other_gpu, other_trt}) == 3  # a plan is never reused on another GPU or TensorRT
    assert plans.timing_cache_path(plan) == plan.parent.parent / "timing.cache"
    assert plans.build_report_path(plan).suffix == ".json"


def test_profiles_are_static_at_the_cells_shape():
    shapes = build.profile_shapes(BERT_INPUTS, batch=4, seq=128)
    assert shapes == {"input_ids": ((4, 128),) * 3, "attention_mask": ((4, 128),) * 3}
    assert build.profile_shapes(MLP_INPUTS, 256, 0) == {"x": ((256, 5),) * 3}


def test_calibration_uses_real_rows_in_order_and_says_when_there_are_too_few():
    features = np.arange(50, dtype=np.float64).reshape(10, 5)
    batches = build.calibration_batches(MLP_INPUTS, batch=4, seq=0, n_batches=8, features=features)
    assert len(batches) == 2  # 10 rows make two whole batches of 4
    assert batches[0]["x"].dtype == np.float32 and batches[1]["x"][0, 0] == 20.0
    with pytest.raises(ValueError, match="at least 16 rows"):
        build.calibration_batches(MLP_INPUTS, batch=16, seq=0, n_batches=1, features=features)


def test_synthetic_calibration_differs_from_the_parity_input():
    from inferbench.models.registry import make_inputs

    batches = build.calibration_batches(BERT_INPUTS, batch=2, seq=8, n_batches=3)
    assert [b["input_ids"].shape for b in batches] == [(2, 8)] * 3
    parity_input = make_inputs(BERT_INPUTS, 2, 8, seed=0)["input_ids"]
    assert not any(np.array_equal(b["input_ids"], parity_input) for b in batches)


@pytest.mark.skipif(TRT_INSTALLED, reason="TensorRT is installed here")
def test_unavailable_reasons_name_what_is_missing():
    assert "NVIDIA GPUs only" in plans.native_unavailable_reason("cpu", "fp16")
    assert "not bf16" in plans.native_unavailable_reason("cuda", "bf16")
    assert "`tensorrt` Python package" in plans.native_unavailable_reason("cuda", "fp16")
    assert plans.current_target() is None
    with pytest.raises(RuntimeError, match="cannot build a TensorRT engine here: the `tensorrt` Python package"):
        build.build_engine("m.onnx", MLP_INPUTS, "fp16", 1, 0, "m.plan")


class _Recorder:
    """A stand-in for the parts of the ``tensorrt`` API that ``build_engine`` uses; records calls."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.module = types.ModuleType("tensorrt")
        self.module.__spec__ = importlib.machinery.ModuleSpec("tensorrt", None)
        self.module.__version__ = "10.0.0-fake"
        rec = self

        class Logger:
            WARNING = "warning"

            def __init__(self, level):
                pass

        class Profile:
            def set_shape(self, name, low, opt, high):
                rec.calls.append(("profile", name, low, opt, high))

        class TimingCache:
            def __init__(self, data):
                self.data = data

            def serialize(self):
                return b"timings:" + self.data

        class Config:
            def set_memory_pool_limit(self, pool, size):
                rec.calls.append(("workspace", size))

            def create_timing_cache(self, data):
                rec.calls.append(("timing_cache_in", bytes(data)))
                self.cache = TimingCache(bytes(data))
                return self.cache

            def set_timing_cache(self, cache, ignore_mismatch):
                pass

            def get_timing_cache(self):
                return self.cache

            def add_optimization_profile(self, profile):
                rec.calls.append(("add_profile",))

            def set_flag(self, flag):
                rec.calls.append(("flag", flag))

            def set_calibration_profile(self, profile):
                rec.calls.append(("calibration_profile",))

            def __setattr__(self, name, value):
                if name == "int8_calibrator":
                    rec.calls.append(("calibrator", value))
                object.__setattr__(self, name, value)

        class Parser:
            num_errors = 0

            def __init__(self, network, logger):
                pass

            def parse_from_file(self, path):
                rec.calls.append(("parse", path))
                return True

        class Builder:
            def __init__(self, logger):
                pass

            def create_network(self, flags):
                return object()

            def create_builder_config(self):
                return Config()

            def create_optimization_profile(self):
                return Profile()

            def build_serialized_network(self, network, config):
                return b"PLAN"

        class IInt8EntropyCalibrator2:
            def __init__(self):
                pass

        m = self.module
        m.Logger, m.Builder, m.OnnxParser = Logger, Builder, Parser
        m.IInt8EntropyCalibrator2 = IInt8EntropyCalibrator2
        m.MemoryPoolType = types.SimpleNamespace(WORKSPACE="workspace")
        m.BuilderFlag = types.SimpleNamespace(FP16="FP16", INT8="INT8")


@pytest.fixture
def fake_trt(monkeypatch):
    recorder = _Recorder()
    monkeypatch.setitem(sys.modules, "tensorrt", recorder.module)
    monkeypatch.setattr(plans, "cuda_unavailable_reason", lambda: None)
    return recorder


def test_build_sets_the_profile_precision_and_writes_plan_and_timing_cache(fake_trt, tmp_path):
    plan = tmp_path / "h100-trt10" / "tensorrt" / "bert_base.fp16.b4-s128.plan"
    report = build.build_engine("bert.onnx", BERT_INPUTS, "fp16", 4, 128, plan, workspace_gib=2)
    assert plan.read_bytes() == b"PLAN" and report["plan_bytes"] == 4 and report["build_s"] >= 0
    assert ("profile", "input_ids", (4, 128), (4, 128), (4, 128)) in fake_trt.calls
    assert ("flag", "FP16") in fake_trt.calls and ("flag", "INT8") not in fake_trt.calls
    assert ("workspace", 2 << 30) in fake_trt.calls
    cache = plans.timing_cache_path(plan)
    assert cache.read_bytes() == b"timings:"  # started empty, saved for the next build
    build.build_engine("bert.onnx", BERT_INPUTS, "fp32", 1, 128, plan.with_name("b1.plan"))
    assert ("timing_cache_in", b"timings:") in fake_trt.calls  # the second build reads the first one's cache
    assert not list(plan.parent.glob("*.tmp*"))  # atomic writes leave no partial files


def test_int8_build_calibrates_on_the_given_batches(fake_trt, tmp_path):
    batches = build.calibration_batches(MLP_INPUTS, 4, 0, 2, np.ones((8, 5)))
    build.build_engine("m.onnx", MLP_INPUTS, "int8", 4, 0, tmp_path / "t" / "v" / "m.int8.plan", batches)
    flags = [c[1] for c in fake_trt.calls if c[0] == "flag"]
    assert flags == ["FP16", "INT8"] and ("calibration_profile",) in fake_trt.calls
    calibrator = next(c[1] for c in fake_trt.calls if c[0] == "calibrator")
    assert calibrator.get_batch_size() == 4
    with pytest.raises(ValueError, match="needs calibration batches"):
        build.build_engine("m.onnx", MLP_INPUTS, "int8", 4, 0, tmp_path / "t" / "v" / "x.plan")


def test_engine_refuses_anything_but_a_plan(fake_trt):
    engine = trt_engine.TensorRTEngine("cuda", "fp16", 0, {"engine": "tensorrt"})
    with pytest.raises(ValueError, match=r"serialized \.plan"):
        engine.prepare(Path("results/onnx/bert_base.onnx"), BERT_INPUTS, {})
