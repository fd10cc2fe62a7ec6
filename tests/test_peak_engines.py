"""The engine variants of the peak study that the CPU can check: ONNX Runtime's transformer fusions
(export, fusion, parity, a cell on ort_cpu), the record of which attention kernel ran, the options of
ORT CUDA's CUDA-graph path, and their validation."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from inferbench.core.cells import CellKey
from inferbench.core.settings import MeasureSettings
from inferbench.engines.registry import load_engine_class, onnx_path, option_problems
from inferbench.machine.lock import MachineLock
from inferbench.models import create_model, make_inputs
from inferbench.models.fusions import attention_shape, eager_attention, export_fused
from inferbench.models.onnx_costs import onnx_build_costs
from inferbench.models.parity import make_reference
from inferbench.models.registry import save_checkpoint
from inferbench.scenarios.prepare import CellInputs, CellRequest
from inferbench.scenarios.run import run_cell
from inferbench.trackers.attention import UNFUSED, classify

FAST = MeasureSettings(warmup_s=0.0, min_time_s=0.0, min_iters=3, repeats=1)
BERT = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128}


@pytest.fixture(scope="module")
def fused_bert(tmp_path_factory):
    root = tmp_path_factory.mktemp("fused")
    spec = create_model("bert_base", **BERT)
    save_checkpoint(spec, root / "bert_base.pt", seed=0)
    (root / "bert_base.json").write_text(json.dumps({"inputs": [asdict(i) for i in spec.inputs]}))
    report = export_fused(create_model("bert_base", **BERT), "text", root / "bert_base.fused.onnx")
    (root / "bert_base.fused.json").write_text(json.dumps(report))
    make_reference(root / "bert_base.pt", spec.inputs, seq_len=12, rows=2, out=root / "ref.npz")
    return {"spec": spec, "root": root, "report": report}


def test_fused_export_has_fused_attention_and_matches_pytorch(fused_bert):
    report = fused_bert["report"]
    # the fusions that ONNX Runtime's CUDA and CPU kernels make fast, on a 2-layer encoder
    assert report["fused_operators"]["Attention"] == 2
    assert report["fused_operators"]["SkipLayerNormalization"] == 4
    assert report["eager_attention"] and (report["num_heads"], report["hidden_size"]) == (4, 64)
    assert report["rel_l2"] < 1e-4 and report["fuse_s"] > 0
    assert onnx_build_costs(fused_bert["root"] / "bert_base.fused.onnx") == {
        "export": report["export_s"],
        "fuse": report["fuse_s"],
    }


def test_fusion_patterns_need_eager_attention():
    spec = create_model("bert_base", **BERT)
    assert spec.module.model.config._attn_implementation == "sdpa"  # what the plain export runs
    assert eager_attention(spec.module) and spec.module.model.config._attn_implementation == "eager"
    assert attention_shape(create_model("resnet50", layers=[1, 1, 1, 1]).module) == (0, 0)


def test_fused_cell_runs_on_ort_cpu_and_records_the_attention_operator(fused_bert):
    root = fused_bert["root"]
    key = CellKey("bert_base", "ort_cpu_fused", "fp32", "cpu", 2, 12, 1)
    variant = {"engine": "ort_cpu", "fusions": True}
    inputs = CellInputs(root / "bert_base.json", root / "bert_base.fused.onnx", root / "ref.npz")
    out = root / "cell.json"
    record = run_cell(CellRequest(key, variant, inputs, FAST, {"max_rel_l2": 1e-4}), out, MachineLock(root / "lock"))
    assert record.status == "ok", record.reason
    assert record.computation["fusions"] is True and record.parity["rel_l2"] < 1e-4
    assert record.engine["attention"] == {"kernel": "onnxruntime Attention", "source": "ONNX graph"}
    assert set(record.cold_start_s) >= {"export", "fuse", "session"}
    assert record.flatten()["attention_kernel"] == "onnxruntime Attention"


def test_torch_cells_record_the_sdpa_backend(fused_bert):
    spec, root = fused_bert["spec"], fused_bert["root"]
    engine = load_engine_class("torch_eager")("cpu", "fp32", 1, {"engine": "torch_eager"})
    feed = make_inputs(spec.inputs, 2, 12, 0)
    engine.prepare(root / "bert_base.pt", spec.inputs, feed)
    found = engine.attention_kernel(engine.stage(feed))
    # transformers' default attention is PyTorch SDPA; on the CPU with a padding mask it picks a backend
    assert found["source"] == "profiled call" and found["kernel"].startswith("sdpa ")
    resnet = create_model("resnet50", layers=[1, 1, 1, 1])
    save_checkpoint(resnet, root / "r.pt", seed=0)
    engine = load_engine_class("torch_eager")("cpu", "fp32", 1, {"engine": "torch_eager"})
    feed = make_inputs(resnet.inputs, 1, 0, 0)
    engine.prepare(root / "r.pt", resnet.inputs, feed)
    assert engine.attention_kernel(engine.stage(feed))["kernel"] is None  # a convnet has no attention


def test_attention_names_are_classified():
    assert classify(["aten::_scaled_dot_product_flash_attention_for_cpu"]) == "sdpa flash"
    assert classify(["aten::_scaled_dot_product_efficient_attention", "aten::softmax"]) == "sdpa memory-efficient"
    assert classify(["aten::_scaled_dot_product_cudnn_attention"]) == "sdpa cudnn"
    assert classify(["aten::_scaled_dot_product_attention_math", "aten::_softmax"]) == "sdpa math"
    assert classify(["aten::bmm", "triton_per_fused__softmax_3"]) == UNFUSED
    assert classify(["aten::conv2d", "aten::relu"]) is None


def test_fused_and_plain_exports_have_their_own_files():
    fused = {"engine": "ort_cuda", "fusions": True}
    assert onnx_path("ort_cuda", "bert_base", "fp16", fused) == "results/onnx/bert_base.fused.fp16.onnx"
    assert onnx_path("ort_cpu", "bert_base", "fp32", {"engine": "ort_cpu", "fusions": True}) == (
        "results/onnx/bert_base.fused.onnx"
    )
    assert onnx_path("ort_cuda", "bert_base", "fp16", {"engine": "ort_cuda"}) == "results/onnx/bert_base.fp16.onnx"
    assert onnx_path("ort_cpu", "bert_base", "int8") == "results/onnx/bert_base.int8.onnx"


def test_ort_cuda_graph_options_are_checked():
    # a CUDA graph replays on fixed device buffers: host arrays in and out cannot be captured
    problems = option_problems("ort_cuda", {"engine": "ort_cuda", "cuda_graph": True, "io_binding": False})
    assert problems == [
        "cuda_graph: true needs io_binding: true (capture the session in a CUDA graph and replay it (needs "
        "io_binding; the cell's shapes are fixed with free-dimension overrides so that no node falls back to "
        "the CPU))"
    ]
    assert option_problems("ort_cuda", {"engine": "ort_cuda", "cuda_graph": True}) == []
    assert "not one of EXHAUSTIVE" in option_problems("ort_cuda", {"cudnn_conv_algo_search": "FAST"})[0]
    assert "an option of ort_cpu, ort_cuda" in option_problems("torch_eager", {"fusions": True})[0]


def test_a_cuda_graph_session_is_profiled_without_its_capture():
    """ONNX Runtime's profiler records no node events while a captured graph replays: the profiling
    session of a cuda_graph variant runs the same graph uncaptured (the measured one captures)."""
    from types import SimpleNamespace

    engine = load_engine_class("ort_cuda")("cuda", "fp16", 0, {"engine": "ort_cuda", "cuda_graph": True})
    engine._stream = SimpleNamespace(cuda_stream=1234)
    assert engine.provider_options()["enable_cuda_graph"] == 1
    uncaptured = engine.provider_options(graph_capture=False)
    assert "enable_cuda_graph" not in uncaptured
    # every session, the profiling one too, computes on the engine's stream; the record holds no address
    assert engine._process_options() == {"user_compute_stream": "1234"}
    assert "user_compute_stream" not in engine.provider_options() and "user_compute_stream" not in uncaptured
    assert uncaptured["prefer_nhwc"] == engine.provider_options()["prefer_nhwc"], "otherwise the same session"


def test_an_ort_gpu_profile_lists_the_kernels_of_the_measured_calls_beside_the_graph_nodes(monkeypatch, tmp_path):
    """On a GPU the profile's kernels are those of the measured session's calls (a CUDA graph's replay
    included: CUPTI sees every library's kernels); ONNX Runtime's node table goes beside them, and stands
    alone, saying why, where the kernel profile fails."""
    import inferbench.trackers.profiling as profiling
    from inferbench.report.markdown import profile_section

    engine = load_engine_class("ort_cuda")("cuda", "fp16", 0, {"engine": "ort_cuda", "cuda_graph": True})
    nodes = {"tool": "onnxruntime", "top_ops": [{"name": "Attention", "calls_per_run": 12, "ms_per_run": 1.0,
             "share": 0.3}], "per_call": {"unit": "nodes", "count": 88, "ms": 3.6, "mean_us": 41.0}}  # fmt: skip
    monkeypatch.setattr(engine, "_node_profile", lambda *args: dict(nodes))
    monkeypatch.setattr(engine, "stage", lambda batch: batch)
    monkeypatch.setattr(engine, "run", lambda staged: None)
    kernels = {"tool": "torch.profiler", "top_ops": [{"name": "nvjet_gemm", "calls_per_run": 36, "ms_per_run": 0.2,
               "share": 0.5}], "per_call": {"unit": "kernels", "count": 150, "ms": 0.45, "mean_us": 3.0}}  # fmt: skip
    monkeypatch.setattr(profiling, "torch_profile", lambda *args: dict(kernels))
    result = engine.profile({}, 10, tmp_path, 12)
    assert result["per_call"]["unit"] == "kernels" and result["nodes"]["per_call"]["count"] == 88
    text = "\n".join(profile_section([{"cell_id": "c", "status": "ok", "n_calls": 10, **result}]))
    assert "150 kernels per call" in text and "88.0 nodes per call" in text
    assert text.index("`nvjet_gemm`") < text.index("`Attention`"), "kernels first, then the nodes"

    def broken(*args):
        raise RuntimeError("CUPTI unavailable")

    monkeypatch.setattr(profiling, "torch_profile", broken)
    alone = engine.profile({}, 10, tmp_path, 12)
    assert alone["per_call"]["unit"] == "nodes" and "No kernel profile: CUPTI unavailable" in alone["note"]


def test_a_compiled_model_in_a_cuda_graph_of_its_own_needs_a_gpu_and_a_mode_without_graphs(fused_bert):
    """``cuda_graph: true`` captures Inductor's kernels in one graph of the engine's own; Inductor's own
    graphs (reduce-overhead, max-autotune) would be a graph inside a graph, and the CPU has none."""
    options = {"engine": "torch_compile", "freezing": True, "cuda_graph": True}
    gpu = load_engine_class("torch_compile")("cuda", "fp16", 0, options)
    computation = gpu.computation("text")
    assert computation["cuda_graph"] is True and computation["compile_mode"] == "default + freezing"
    assert "replay()" in gpu.run_description
    feed = make_inputs(fused_bert["spec"].inputs, 1, 12, 0)
    reduce_overhead = load_engine_class("torch_compile")("cuda", "fp16", 0, options | {"mode": "reduce-overhead"})
    cpu = load_engine_class("torch_compile")("cpu", "fp32", 1, options)
    for wrong, where in ((cpu, "on cpu"), (reduce_overhead, "not 'reduce-overhead' on cuda")):
        # refused before anything is loaded, so on a machine without a GPU too
        with pytest.raises(ValueError, match=f"needs a cuda cell and a mode without Inductor's graphs.*{where}"):
            wrong.prepare(fused_bert["root"] / "bert_base.pt", fused_bert["spec"].inputs, feed)
    plain = load_engine_class("torch_compile")("cpu", "fp32", 1, {"engine": "torch_compile"})
    assert "replay()" not in plain.run_description


def test_roofline_study_places_its_cells_and_fp8_is_recorded_unavailable_on_the_cpu(tmp_path):
    import copy

    import pandas as pd
    import yaml

    from tests.conftest import REPO
    from tests.test_workflow import snakemake

    config = copy.deepcopy(yaml.safe_load((REPO / ".test" / "config" / "config.yaml").read_text()))
    config["run"] = ["roof"]
    config["studies"] = {
        "roof": {
            "workloads": ["distilbert"],
            "engines": ["torch_eager", "fp8"],
            "precisions": ["fp32", "fp8"],
            "devices": ["cpu"],
            "batch_sizes": [2],
            "seq_lens": [16],
            "threads": [1],
            "roofline": True,
        }
    }
    config["engines"] = {
        "torch_eager": {"engine": "torch_eager"},
        "fp8": {"engine": "torch_compile", "precisions": ["fp8"]},
    }
    jobs = snakemake(tmp_path, config, dryrun=False)
    assert jobs["model_cost"] == 1 and jobs["machine_peaks"] == 1 and jobs["roofline"] == 1
    summary = pd.read_csv(tmp_path / "results" / "summary.csv")
    fp8 = summary[summary["precision"] == "fp8"].iloc[0]
    assert fp8["status"] == "unavailable" and "FP8 tensor cores" in fp8["reason"]
    roof = pd.read_csv(tmp_path / "results" / "roofline.csv")
    assert list(roof["engine"]) == ["torch_eager"]  # the measured cells; fp8 has no time to place
    row = roof.iloc[0]
    cost = json.loads((tmp_path / "results" / "cost" / "distilbert-s16.json").read_text())
    assert row["flops"] == 2 * cost["flops_per_row"] > 0
    assert row["limit"] in ("compute", "memory") and row["times_floor"] > 0
    assert row["floor_ms"] < row["latency_p50_ms"] * 2  # a floor the measurement cannot be far below
    report = (tmp_path / "results" / "report_details.md").read_text()
    assert "## Distance to the limit (roofline)" in report and "| distilbert | torch_eager | fp32 |" in report
