"""The wider engine matrix on CPU: TorchScript, torch.compile, ORT int8, the GPU engines' availability
logic, and the parity gate (including a deliberately wrong engine)."""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np
import onnx
import pytest
import torch

from inferbench.core.cells import CellKey, CellRecord
from inferbench.core.settings import MeasureSettings
from inferbench.engines.ort.engine import tensorrt_unavailable_reason
from inferbench.engines.registry import load_engine_class, onnx_path
from inferbench.machine.lock import MachineLock
from inferbench.models import create_model, make_inputs
from inferbench.models.export import convert_fp16, export_onnx, quantize_int8, relative_l2
from inferbench.models.parity import compare, load_reference, make_reference, violations
from inferbench.models.registry import save_checkpoint
from inferbench.scenarios.prepare import CellInputs, CellRequest
from inferbench.scenarios.run import run_cell

FAST = MeasureSettings(warmup_s=0.0, min_time_s=0.0, min_iters=3, repeats=1)
BERT = {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64}


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    root = tmp_path_factory.mktemp("bert")
    spec = create_model("bert_base", **BERT)
    save_checkpoint(spec, root / "m.pt", seed=0)
    (root / "m.json").write_text(json.dumps({"inputs": [asdict(i) for i in spec.inputs]}))
    export_onnx(spec, root / "m.onnx")
    make_reference(root / "m.pt", spec.inputs, seq_len=12, rows=2, out=root / "ref.npz")
    return {"spec": spec, "root": root}


def _outputs(impl, artifact, spec, feed, precision="fp32", **options):
    engine = load_engine_class(impl)("cpu", precision, 1, {"engine": impl, **options})
    engine.prepare(artifact, spec.inputs, feed)
    out = engine.run(engine.stage(feed))
    engine.synchronize()
    return engine, engine.to_numpy(out)


def test_torchscript_matches_eager(bert):
    feed = make_inputs(bert["spec"].inputs, 3, 12, 0)
    _, eager = _outputs("torch_eager", bert["root"] / "m.pt", bert["spec"], feed)
    engine, scripted = _outputs("torchscript", bert["root"] / "m.pt", bert["spec"], feed)
    assert relative_l2(scripted, eager) < 1e-5
    assert "trace" in engine.cold_start_s and isinstance(engine.module, torch.jit.ScriptModule)


@pytest.mark.slow
def test_torch_compile_matches_eager_and_records_compile_time(tmp_path):
    spec = create_model("mlp_heart", in_features=22, hidden=[16])
    save_checkpoint(spec, tmp_path / "mlp.pt", seed=0)
    feed = make_inputs(spec.inputs, 4, 0, 0)
    _, eager = _outputs("torch_eager", tmp_path / "mlp.pt", spec, feed)
    engine, compiled = _outputs("torch_compile", tmp_path / "mlp.pt", spec, feed)
    assert relative_l2(compiled, eager) < 1e-5
    assert engine.cold_start_s["compile"] > 0 and engine.describe()["mode"] == "default"


@pytest.mark.slow
def test_inductor_freezing_keeps_the_outputs_and_the_record_says_it_froze(tmp_path):
    spec = create_model("timm:test_resnet")  # BatchNorm after every convolution: what freezing folds
    save_checkpoint(spec, tmp_path / "r.pt", seed=0)
    feed = make_inputs(spec.inputs, 2, 0, 0)
    _, eager = _outputs("torch_eager", tmp_path / "r.pt", spec, feed)
    engine, frozen = _outputs("torch_compile", tmp_path / "r.pt", spec, feed, freezing=True)
    assert relative_l2(frozen, eager) < 1e-4
    assert engine.describe()["freezing"] is True
    assert engine.computation("vision")["compile_mode"] == "default + freezing"
    plain = load_engine_class("torch_compile")("cpu", "fp32", 1, {"engine": "torch_compile"})
    assert plain.computation("vision")["compile_mode"] == "default"


def test_ort_int8_quantization_runs_and_stays_close(bert, tmp_path):
    report = quantize_int8(bert["root"] / "m.onnx", tmp_path / "m.int8.onnx")
    graph_ops = {n.op_type for n in onnx.load(str(tmp_path / "m.int8.onnx")).graph.node}
    assert "DynamicQuantizeLinear" in graph_ops or "MatMulInteger" in graph_ops
    assert report["variant"] == "int8"
    feed = make_inputs(bert["spec"].inputs, 3, 12, 0)
    _, fp32 = _outputs("ort_cpu", bert["root"] / "m.onnx", bert["spec"], feed)
    _, int8 = _outputs("ort_cpu", tmp_path / "m.int8.onnx", bert["spec"], feed, precision="int8")
    assert 0 < relative_l2(int8, fp32) < 0.3


def test_fp16_conversion_keeps_fp32_io(bert, tmp_path):
    convert_fp16(bert["root"] / "m.onnx", tmp_path / "m.fp16.onnx")
    model = onnx.load(str(tmp_path / "m.fp16.onnx"))
    assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in model.graph.initializer)
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT


def test_onnx_variant_paths():
    assert onnx_path("ort_cpu", "bert_base", "int8") == "results/onnx/bert_base.int8.onnx"
    assert onnx_path("ort_cuda", "bert_base", "fp16") == "results/onnx/bert_base.fp16.onnx"
    assert onnx_path("ort_trt", "bert_base", "fp16") == "results/onnx/bert_base.onnx"  # TensorRT casts itself


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
@pytest.mark.parametrize("impl", ["torch_cudagraph", "ort_cuda", "ort_trt", "torch_compile"])
def test_gpu_engines_say_why_they_cannot_run_here(impl):
    reason = load_engine_class(impl).unavailable_reason("cuda", "fp16")
    assert reason and "no CUDA device" in reason


def test_tensorrt_absence_is_explained():
    reason = tensorrt_unavailable_reason()
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        assert reason and "TensorRT is not installed" in reason


def test_reference_tiles_to_any_batch(bert):
    inputs, output = load_reference(bert["root"] / "ref.npz", batch=5)
    assert inputs["input_ids"].shape == (5, 12) and output.shape == (5, 12, 32)
    assert np.array_equal(inputs["input_ids"][0], inputs["input_ids"][2])
    assert np.array_equal(output[1], output[3])


def test_compare_and_violations_on_known_values():
    ref = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert compare(ref, ref) == {
        "max_abs": 0.0,
        "rel_l2": 0.0,
        "cosine": pytest.approx(1.0),
        "finite": True,
        "top1_agreement": 1.0,
    }
    swapped = compare(ref[::-1].copy(), ref)
    assert swapped["top1_agreement"] == 0.0 and swapped["rel_l2"] == pytest.approx(np.sqrt(4 / 2))
    assert violations(swapped, {"max_rel_l2": 0.1}) == ["relative L2 error 1.41 > 0.1"]
    assert violations(swapped, {"min_top1_agreement": 0.9})[0].startswith("top-1 agreement 0.000")
    assert violations(compare(np.full((2, 2), np.nan), ref), {})[0] == "non-finite outputs"
    assert "differs from the reference" in violations(compare(np.zeros(3), ref), {"max_rel_l2": 1})[0]


def _cell(bert, tmp_path, impl="torch_eager", artifact="m.pt"):
    key = CellKey("bert_base", impl, "fp32", "cpu", 3, 12, 1)
    lock = MachineLock()
    lock.shared()
    try:
        inputs = CellInputs(bert["root"] / "m.json", bert["root"] / artifact, bert["root"] / "ref.npz")
        request = CellRequest(key, {"engine": impl}, inputs, FAST, {"max_rel_l2": 1e-4})
        return run_cell(request, tmp_path / key.relpath, lock)
    finally:
        lock.close()


@pytest.mark.parametrize(
    ("impl", "artifact"), [("torch_eager", "m.pt"), ("ort_cpu", "m.onnx"), ("torchscript", "m.pt")]
)
def test_parity_gate_passes_correct_engines(bert, tmp_path, impl, artifact):
    record = _cell(bert, tmp_path, impl, artifact)
    assert record.status == "ok", record.reason
    assert record.parity["rel_l2"] < 1e-5 and record.parity["cosine"] > 0.99999


def test_parity_gate_marks_a_wrong_engine_invalid_and_keeps_timings(bert, tmp_path, monkeypatch):
    from inferbench.engines.pytorch.eager import TorchEager

    right = TorchEager.run
    monkeypatch.setattr(TorchEager, "run", lambda self, staged: right(self, staged) * 1.05)  # 5 % off
    record = _cell(bert, tmp_path)
    assert record.status == "invalid"
    assert record.reason.startswith("output differs from FP32 eager: relative L2 error 0.05")
    assert record.latency_ms["p50"] > 0 and record.n_iters >= 3  # timings kept, reported apart
    assert CellRecord.load(tmp_path / record.key.relpath).status == "invalid"


def test_ort_cold_start_includes_making_the_onnx_file(tmp_path):
    from inferbench.models.onnx_costs import onnx_build_costs

    (tmp_path / "bert_base.export.json").write_text(json.dumps({"export_s": 30.5, "simplify_s": 4.0}))
    (tmp_path / "bert_base.int8.json").write_text(json.dumps({"convert_s": 7.25}))
    assert onnx_build_costs(tmp_path / "bert_base.onnx") == {"export": 30.5, "simplify": 4.0}
    assert onnx_build_costs(tmp_path / "bert_base.int8.onnx") == {"export": 30.5, "simplify": 4.0, "convert": 7.25}
    assert onnx_build_costs(tmp_path / "resnet50.onnx") == {}  # no reports: nothing claimed


def _cuda_provider_missing() -> str | None:
    """Why ONNX Runtime cannot compute on the GPU here (no GPU, or no CUDA provider), or None."""
    return load_engine_class("ort_cuda").unavailable_reason("cuda", "fp32")


@pytest.mark.skipif(
    _cuda_provider_missing() is not None,
    reason=f"needs a GPU and ONNX Runtime's CUDA provider: {_cuda_provider_missing()}",
)
def test_ort_cuda_cells_time_the_device_with_events_on_their_own_stream(bert, tmp_path):
    """Every GPU engine's device boundary is the time between CUDA events on the stream it computes on:
    ONNX Runtime's through its user compute stream, as PyTorch's. Its CUDA provider waits for its stream
    at the end of a run, which the probe measures."""
    key = CellKey("bert_base", "ort_cuda", "fp32", "cuda", 2, 12, 0)
    inputs = CellInputs(bert["root"] / "m.json", bert["root"] / "m.onnx", bert["root"] / "ref.npz")
    lock = MachineLock(tmp_path / "lock")
    lock.shared()
    try:
        request = CellRequest(key, {"engine": "ort_cuda", "tf32": "strict"}, inputs, FAST, {"max_rel_l2": 1e-3})
        record = run_cell(request, tmp_path / "r.json", lock)
    finally:
        lock.close()
    assert record.status == "ok", record.reason
    assert record.timing == "device" and record.clock == "cuda_events"
    assert "CUDA events recorded on the stream the engine computes on" in record.timing_description
    assert record.engine["provider_options"]["use_tf32"] == 0 and record.bound["launches_async"] is False
    # the device's time is within the end-to-end call's, which adds the copies both ways
    assert record.latency_ms["p50"] <= record.end_to_end["latency_ms"]["p50"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: the probe keeps a CUDA stream busy")
def test_the_probe_tells_a_call_that_only_queues_from_one_that_waits_for_the_device():
    from inferbench.trackers.bound import probe_launches_async

    stream = torch.cuda.current_stream()
    queue_only = lambda: torch.cuda._sleep(1_000_000)  # noqa: E731
    waits_mid_way = lambda: (torch.cuda._sleep(1_000_000), torch.ones(1, device="cuda").item())  # noqa: E731
    assert probe_launches_async(queue_only, stream, torch.cuda.synchronize) is True
    assert probe_launches_async(waits_mid_way, stream, torch.cuda.synchronize) is False
    assert probe_launches_async(queue_only, None, torch.cuda.synchronize) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: a no-op cell on the GPU")
def test_an_engine_that_queues_no_gpu_work_is_timed_on_the_host_clock_on_the_gpu_too(tmp_path):
    """Events with nothing between them would time the GPU's gap between two events, not the harness."""
    lock = MachineLock(tmp_path / "lock")
    lock.shared()
    try:
        key = CellKey("mlp_heart", "noop", "fp32", "cuda", 1, 0, 0)
        record = run_cell(CellRequest(key, {"engine": "noop"}, CellInputs(), FAST), tmp_path / "r.json", lock)
    finally:
        lock.close()
    assert record.status == "ok", record.reason
    assert record.timing == "device" and record.clock == "host"
    assert record.timing_description.startswith("host clock around one run()")
    assert record.bound["launches_async"] is None, "no stream: nothing to probe"


def test_host_inputs_in_the_models_dtype_are_made_once_and_compute_the_same(tmp_path):
    """`host_dtype: model`: the host holds float inputs in fp16 where the weights are cast (half the bytes
    to copy in), converted once before any timed call; the outputs are those of the plain path."""
    spec = create_model("mlp_heart", in_features=22, hidden=[16])
    save_checkpoint(spec, tmp_path / "mlp.pt", seed=0)
    batches = [make_inputs(spec.inputs, 4, 0, seed) for seed in range(2)]
    plain, _ = _outputs("torch_eager", tmp_path / "mlp.pt", spec, batches[0], "bf16", precision_mode="cast")
    held, _ = _outputs(
        "torch_eager", tmp_path / "mlp.pt", spec, batches[0], "bf16", precision_mode="cast", host_dtype="model"
    )
    assert plain.host_batches(batches) is batches and plain.computation("tabular")["host_input"] is None
    host = held.host_batches(batches)
    assert [b["x"].dtype for b in host] == [torch.bfloat16] * 2 and batches[0]["x"].dtype == np.float32
    assert held.computation("tabular")["host_input"] == "bf16"
    same = [e.to_numpy(e.run(e.stage(b))) for e, b in ((plain, batches[1]), (held, host[1]))]
    assert np.array_equal(*same)
    # autocast keeps fp32 weights: the host's fp32 arrays are the model's inputs there, nothing to change
    autocast, _ = _outputs("torch_eager", tmp_path / "mlp.pt", spec, batches[0], "bf16", host_dtype="model")
    assert autocast.host_batches(batches) is batches
    pinned, _ = _outputs("torch_eager", tmp_path / "mlp.pt", spec, batches[0], host_memory="pinned")
    assert pinned.computation("tabular")["host_input"] == "pinned"
    with pytest.raises(ValueError, match="pinned is for copies to a GPU"):
        pinned.host_batches(batches)
    # overlapping copies with compute needs page-locked memory on a GPU: asked for otherwise, it says so
    overlapped, _ = _outputs("torch_eager", tmp_path / "mlp.pt", spec, batches[0], host_overlap=True)
    assert overlapped.overlaps_copies and overlapped.computation("tabular")["host_input"] == "overlapped"
    with pytest.raises(ValueError, match="give the variant host_memory: pinned, and run it on cuda"):
        overlapped.host_batches(batches)


def test_a_pipelined_end_to_end_call_runs_what_the_call_before_staged_and_stages_the_next_during_compute():
    """A server's pipelined loop (``host_overlap``): the next batch is staged after this one's run is queued
    and before its output is waited for, so the copy in overlaps the compute; every output is its own batch's."""
    from inferbench.scenarios.single.measure import pipelined

    events: list[str] = []
    batches = iter(range(100))

    def stage_next():
        batch = next(batches)
        events.append(f"stage {batch}")
        return batch

    def run(batch):
        events.append(f"run {batch}")
        return batch * 10

    def to_numpy(output):
        events.append(f"back {output // 10}")
        return output

    call = pipelined(run, stage_next, to_numpy)
    assert events == ["stage 0"]  # the first batch, before any timed call
    assert [call() for _ in range(3)] == [0, 10, 20]
    assert events[1:] == ["run 0", "stage 1", "back 0", "run 1", "stage 2", "back 1", "run 2", "stage 3", "back 2"]
