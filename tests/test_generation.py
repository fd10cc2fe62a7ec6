"""Decoder LMs answering requests token by token (issue 33): the llm: family, the generation engines, the
generation scenario's arithmetic and its token parity gate, and a cell through the runner."""

from __future__ import annotations

import importlib.util
import json
import time
from dataclasses import asdict

import numpy as np
import pytest
import yaml

from inferbench.analysis.summary import summary_row
from inferbench.catalog.workloads import workload_info
from inferbench.core.cells import CellKey
from inferbench.core.settings import MeasureSettings
from inferbench.engines.base import Engine
from inferbench.engines.registry import engine_info
from inferbench.launch.processes import merge_repeats
from inferbench.models import create_model
from inferbench.models.parity import REFERENCE_TOKENS, make_reference
from inferbench.models.registry import save_checkpoint
from inferbench.plan.config import validate_config
from inferbench.plan.grid import config_cells
from inferbench.scenarios.generation.measure import (
    GATED_TOKENS,
    decode_roofline,
    generate_request,
    generation_stats,
    token_parity,
)
from inferbench.scenarios.prepare import CellInputs, CellRequest
from tests.conftest import REPO, run_as_job

FAST = MeasureSettings(warmup_s=0, min_time_s=0, min_iters=3, repeats=1)


class FakeGenerator:
    """A generation engine of known times: the prefill sleeps ``prefill_s``, each step ``step_s``."""

    def __init__(self, prefill_s: float, step_s: float, new_tokens: int, tokens: list[int] | None = None) -> None:
        self.prefill_s, self.step_s, self.new_tokens = prefill_s, step_s, new_tokens
        self.tokens = tokens

    def stage(self, batch):
        return batch

    def start(self, staged):
        time.sleep(self.prefill_s)
        return {"rows": len(staged["input_ids"]), "made": [self._token(0)]}

    def step(self, request):
        time.sleep(self.step_s)
        request["made"].append(self._token(len(request["made"])))
        return request

    def _token(self, index: int) -> int:
        return self.tokens[index] if self.tokens else 7

    def generated(self, request):
        return np.tile(np.asarray(request["made"]), (request["rows"], 1))


def test_a_request_s_first_token_and_each_further_one_are_timed_apart():
    engine = FakeGenerator(prefill_s=0.03, step_s=0.005, new_tokens=6)
    batch = {"input_ids": np.zeros((2, 4), dtype=np.int64)}
    ttft, steps, latency, request, _ = generate_request(engine, batch, None)
    assert len(steps) == engine.new_tokens - 1  # the first token comes from the prefill
    assert ttft >= 0.03 and all(s >= 0.005 for s in steps)
    assert ttft < 0.03 + 0.5 and max(steps) < 0.005 + 0.5  # sleeps overshoot on a busy machine, not by seconds
    assert latency >= ttft + sum(steps)  # the request holds them all, staging and the copy back besides
    assert engine.generated(request).shape == (2, engine.new_tokens)


def test_ttft_tpot_and_tokens_per_second_follow_from_the_samples():
    ttft = np.full(10, 0.020)
    tpot = np.concatenate([np.full(150, 0.002), np.full(50, 0.004)])
    stats = generation_stats(ttft, tpot, batch=4)
    assert stats["ttft_ms"]["p50"] == pytest.approx(20.0) and stats["ttft_ms"]["p99"] is None  # 10 requests
    assert stats["tpot_ms"]["p50"] == pytest.approx(2.0) and stats["tpot_ms"]["p99"] == pytest.approx(4.0)
    assert stats["decode_tokens_per_s_per_sequence"] == pytest.approx(500.0)
    assert stats["decode_tokens_per_s"] == pytest.approx(2000.0)  # four rows decode at once
    assert stats["requests"] == 10 and stats["decode_steps"] == 200


def test_the_decode_floor_is_the_weights_read_over_the_memory_bandwidth():
    # 1 GB read per step, memory moving 2 TB/s in a copy (1 read + 1 written): a step that only reads
    # has the whole 2 TB/s, 0.5 ms at the least
    roofline = decode_roofline(10**9, 2e12, tpot_p50_ms=1.25)
    assert roofline["decode_floor_ms"] == pytest.approx(0.5)
    assert roofline["decode_floor_share"] == pytest.approx(0.4)


def test_token_parity_names_the_first_token_that_differs():
    reference = np.array([[5, 6, 7, 8], [5, 6, 7, 8]])
    inputs = {"input_ids": np.zeros((2, 3), dtype=np.int64)}
    same = FakeGenerator(0, 0, 4, tokens=[5, 6, 7, 8])
    assert token_parity(same, inputs, reference) == {
        "equal": True, "compared": 4, "agreeing": 4, "first_difference": None
    }  # fmt: skip
    parted = FakeGenerator(0, 0, 6, tokens=[5, 6, 9, 8, 1, 1])
    assert token_parity(parted, inputs, reference) == {
        "equal": False, "compared": 4, "agreeing": 2, "first_difference": 2
    }  # fmt: skip
    # at a low precision only the first token is gated: a later parting is reported, not judged
    assert token_parity(parted, inputs, reference, gated=1) == {
        "equal": True, "compared": 1, "agreeing": 2, "first_difference": 2
    }  # fmt: skip
    assert GATED_TOKENS["fp32"] is None and GATED_TOKENS["bf16"] == 1


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory):
    """A decoder of a model type the README does not name, shrunk by arch overrides alone."""
    root = tmp_path_factory.mktemp("qwen2")
    arch = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 512}  # fmt: skip
    spec = create_model("llm:qwen2", **arch)
    save_checkpoint(spec, root / "m.pt", seed=0)
    (root / "m.json").write_text(json.dumps({"inputs": [asdict(i) for i in spec.inputs]}))
    make_reference(root / "m.pt", spec.inputs, 8, 2, root / "ref.npz")
    return {"spec": spec, "checkpoint": root / "m.pt", "meta": root / "m.json", "reference": root / "ref.npz"}


def _run(tmp_path, artifacts, reference, engine="hf_generate", precision="fp32", options=None):
    key = CellKey("llm:qwen2", engine, precision, "cpu", 2, 8, 1)
    inputs = CellInputs(artifacts["meta"], artifacts["checkpoint"], reference)
    request = CellRequest(key, {"engine": engine, "new_tokens": 6, **(options or {})}, inputs, FAST,
                          {"max_rel_l2": 0.05})  # fmt: skip
    return run_as_job(request, tmp_path / key.relpath)


def test_a_decoder_of_any_transformers_type_generates_on_the_cpu_with_its_tokens_checked(qwen2, tmp_path):
    assert workload_info("llm:qwen2").kind == "decoder"
    with np.load(qwen2["reference"]) as data:
        assert data["tokens"].shape == (2, REFERENCE_TOKENS)  # FP32 eager's greedy tokens, by generate()
    record = _run(tmp_path, qwen2, qwen2["reference"])
    assert record.status == "ok", record.reason
    gen = record.sections["generation"]
    assert gen["token_parity"] == {"equal": True, "compared": 6, "agreeing": 6, "first_difference": None}
    assert gen["requests"] == record.n_iters >= 3 and gen["decode_steps"] == gen["requests"] * 5
    assert gen["new_tokens"] == 6 and record.items_per_call == 2 * 6  # tokens a request makes
    assert 0 < gen["decode_read_mb"] < gen["weights_mb"]  # untied: the input embedding is read a row at a time
    assert gen["kv_cache_mb"] > 0 and gen["decode_floor_ms"] > 0
    row = summary_row(record)
    assert row["mode"] == "generate" and row["gen_token_parity"] is True
    assert row["gen_tpot_p50_ms"] == gen["tpot_ms"]["p50"] and row["latency_p50_ms"] >= row["gen_ttft_p50_ms"]


def test_tokens_that_differ_from_fp32_eager_make_the_cell_invalid(qwen2, tmp_path):
    with np.load(qwen2["reference"]) as data:
        files = {name: data[name] for name in data.files}
    files["tokens"] = files["tokens"].copy()
    files["tokens"][:, 1] += 1  # FP32 eager's second token, changed
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, **files)
    record = _run(tmp_path, qwen2, wrong)
    assert record.status == "invalid"
    assert "differ from FP32 eager's at token 1" in record.reason
    assert record.sections["generation"]["token_parity"]["first_difference"] == 1


def test_every_process_s_samples_are_pooled_in_the_merged_record(qwen2, tmp_path):
    first = _run(tmp_path / "a", qwen2, qwen2["reference"])
    second = _run(tmp_path / "b", qwen2, qwen2["reference"])
    samples = [{"device": np.full(r.n_iters, 0.01), "end_to_end": np.full(r.n_iters, 0.01)} for r in (first, second)]
    merged, _ = merge_repeats([first, second], samples)
    pooled = merged.sections["generation"]
    # the processes the merge counts: on a busy machine one timed while other work held the cores is listed only
    counted = [r for r, entry in zip((first, second), merged.repeats["per_repeat"], strict=True) if entry["counted"]]
    assert counted and pooled["requests"] == sum(r.sections["generation"]["requests"] for r in counted)
    steps = [step for r in counted for step in r.sections["generation"]["samples_ms"]["tpot"]]
    assert pooled["tpot_ms"]["p50"] == pytest.approx(float(np.median(steps)), rel=1e-3)


def test_generation_engines_take_decoders_only_and_the_llm_preset_has_cpu_generation_cells():
    assert engine_info("hf_generate").workload_kinds == ("decoder",)
    assert engine_info("torch_eager").workload_kinds == ("tabular", "vision", "text")
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["run"] = yaml.safe_load((REPO / "config" / "studies" / "llm.yaml").read_text())["run"]
    cells = config_cells(validate_config(config), has_cuda=False)
    generation = [c for c in cells if engine_info(config["engines"][c.engine]["engine"]).mode == "generate"]
    assert generation and {c.workload for c in generation} == {"llama_mini"}
    assert all(c.device == "cpu" and c.seq_len > 0 for c in generation)


def test_the_static_cache_engine_compiles_its_decode_step_and_generates_fp32_eager_s_tokens(qwen2, tmp_path):
    # on the CPU torch.compile's default mode (reduce-overhead's CUDA graphs need a GPU)
    record = _run(tmp_path, qwen2, qwen2["reference"], engine="hf_generate_static", options={"mode": "default"})
    assert record.status == "ok", record.reason
    assert record.sections["generation"]["token_parity"]["equal"] is True
    assert record.cold_start_s["compile"] > 0 and record.computation["compile_mode"] == "default"
    # the static cache is allocated once for the prompt and every new token: 2 rows x 2 KV heads x (8 + 6)
    # positions x 16 dims, keys and values, 2 layers, fp32
    assert record.sections["generation"]["kv_cache_mb"] * 2**20 == pytest.approx(2 * 2 * 14 * 16 * 2 * 2 * 4)


def test_onnx_runtime_genai_exports_once_and_generates_fp32_eager_s_tokens(qwen2, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the export is kept under results/engines/ort_genai, relative to the run
    first = _run(tmp_path / "a", qwen2, qwen2["reference"], engine="ort_genai")
    assert first.status == "ok", first.reason
    assert first.sections["generation"]["token_parity"]["equal"] and first.parity["rel_l2"] < 1e-3
    exports = list((tmp_path / "results" / "engines" / "ort_genai").iterdir())
    assert len(exports) == 1 and (exports[0] / "genai_config.json").exists() and exports[0].name.endswith("-fp32-cpu")
    second = _run(tmp_path / "b", qwen2, qwen2["reference"], engine="ort_genai")
    assert second.status == "ok" and second.cold_start_s["export"] < first.cold_start_s["export"]  # reused
    assert len(list((tmp_path / "results" / "engines" / "ort_genai").iterdir())) == 1


class FakeVllmEngine:
    """vLLM's LLMEngine as the driver uses it: ``step`` is one scheduler iteration, in which a new request's
    prefill advances by one chunk (its first token after ``prefill_chunks`` steps) and every request past
    its prefill makes one token; outputs are cumulative, as vLLM's are by default."""

    def __init__(self, prefill_chunks: int = 1, stuck: bool = False) -> None:
        self.prefill_chunks, self.stuck = prefill_chunks, stuck
        self.requests: dict[str, dict] = {}
        self.steps = 0
        self.aborted: list[str] = []

    def add_request(self, request_id, prompt, params):
        assert set(prompt) == {"prompt_token_ids"}
        self.requests[request_id] = {"chunks": 0, "tokens": [], "max": params["max_tokens"]}

    def has_unfinished_requests(self):
        return bool(self.requests)

    def abort_request(self, ids):
        self.aborted += ids
        for request_id in ids:
            del self.requests[request_id]

    def step(self):
        from types import SimpleNamespace

        self.steps += 1
        if self.stuck:
            return []
        outputs = []
        for request_id, state in list(self.requests.items()):
            if state["chunks"] < self.prefill_chunks:
                state["chunks"] += 1
                if state["chunks"] < self.prefill_chunks:
                    continue  # a chunk of the prefill: no token yet
            state["tokens"].append(100 + len(state["tokens"]))
            finished = len(state["tokens"]) == state["max"]
            outputs.append(SimpleNamespace(request_id=request_id, finished=finished,
                                           outputs=[SimpleNamespace(token_ids=list(state["tokens"]))]))  # fmt: skip
            if finished:
                del self.requests[request_id]
        return outputs


def test_the_vllm_driver_makes_one_token_per_step_for_every_row_and_waits_out_a_chunked_prefill():
    from inferbench.engines.generation.vllm_engine import MAX_STEPS_PER_TOKEN, StepDriver

    engine = FakeVllmEngine(prefill_chunks=3)
    driver = StepDriver(engine)
    request = driver.add([[1, 2, 3], [4, 5, 6]], {"max_tokens": 4})
    assert request.prompt == 3 and len(request.ids) == 2
    driver.until(request, 1)  # the first token: the prefill's three chunks
    assert engine.steps == 3 and request.made() == 1
    for made in (2, 3, 4):
        driver.until(request, made)
        assert request.made() == made and engine.steps == made + 2  # one scheduler step per decode token
    assert request.tokens == {i: [100, 101, 102, 103] for i in request.ids}
    assert not engine.requests  # finished with their last token
    # a request left half-way (a warm-up cut short) is aborted before the next one starts
    left = driver.add([[7]], {"max_tokens": 4})
    driver.until(left, 1)
    driver.add([[8]], {"max_tokens": 4})
    assert engine.aborted == left.ids
    # an engine that makes no token is named, not waited on forever
    stuck = StepDriver(FakeVllmEngine(stuck=True))
    with pytest.raises(RuntimeError, match=f"no token in {MAX_STEPS_PER_TOKEN} scheduler steps"):
        stuck.until(stuck.add([[1]], {"max_tokens": 2}), 1)


class LogProbabilities(Engine):
    """The reference's logits less their log-sum-exp, as vLLM returns them."""

    run_gives_log_probabilities = True

    def prepare(self, artifact, inputs, example):
        pass

    def stage(self, batch):
        return batch

    def run(self, staged):
        from scipy.special import log_softmax

        from inferbench.models.parity import load_reference

        _, logits = load_reference(self.reference, 2)
        return log_softmax(logits, axis=1)

    def to_numpy(self, output):
        return output


def test_an_engine_that_returns_log_probabilities_is_held_to_the_logits(qwen2, monkeypatch):
    from inferbench.catalog.engines import EngineInfo
    from inferbench.engines import registry as engine_registry
    from inferbench.scenarios.prepare import check_parity

    info = EngineInfo("tests.test_generation:LogProbabilities", ("cpu",), ("fp32",), "none", "log-probabilities")
    monkeypatch.setitem(engine_registry.ENGINES, "log_probabilities", info)
    monkeypatch.setattr(LogProbabilities, "reference", qwen2["reference"], raising=False)
    key = CellKey("llm:qwen2", "log_probabilities", "fp32", "cpu", 2, 8, 1)
    request = CellRequest(key, {"engine": "log_probabilities"}, CellInputs(qwen2["meta"], qwen2["checkpoint"],
                          qwen2["reference"]), FAST, {"max_rel_l2": 1e-4})  # fmt: skip
    metrics, problems = check_parity(LogProbabilities("cpu", "fp32", 1, {"engine": "log_probabilities"}), request)
    assert problems == [] and metrics["rel_l2"] < 1e-5
    # the same numbers taken for logits: off by a constant
    monkeypatch.setattr(LogProbabilities, "run_gives_log_probabilities", False)
    _, problems = check_parity(LogProbabilities("cpu", "fp32", 1, {"engine": "log_probabilities"}), request)
    assert problems and "relative L2 error" in problems[0]


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_a_vllm_cell_where_vllm_is_not_installed_is_unavailable_with_the_reason(qwen2, tmp_path):
    record = _run(tmp_path, qwen2, qwen2["reference"], engine="vllm", precision="fp16")
    assert record.status == "unavailable"
    assert "vLLM is not installed here" in record.reason


def test_the_generation_answer_says_how_many_times_its_floor_each_engine_decodes_at_batch_1():
    import pandas as pd

    from inferbench.scenarios.generation.answer import generation_answer

    def row(engine: str, batch: int, tpot: float, floor: float = 0.7) -> dict:
        return {"workload": "llm:llama", "engine": engine, "engine_impl": engine, "precision": "fp16",
                "device": "cuda", "batch_size": batch, "seq_len": 128, "threads": 0, "status": "ok",
                "mode": "generate", "gen_tpot_p50_ms": tpot, "gen_ttft_p50_ms": 10.0 + tpot,
                "gen_decode_floor_ms": floor, "gen_decode_floor_share": floor / tpot,
                "gen_decode_tokens_per_s": 1e3 / tpot * batch}  # fmt: skip

    cells = pd.DataFrame([row("hf_eager", 1, 14.0), row("hf_static", 1, 1.75), row("hf_static", 16, 2.1)])
    text = "\n".join(generation_answer(cells, {}))
    assert "1.75 ms (hf_static fp16 cuda b1 prompt 128; 1 process), 2.50× its memory-bandwidth floor" in text
    assert "batch 1, prompt 128: time per output token over its floor, hf_static 2.50×, hf_eager 20.0×" in text
    assert "batch 16 decodes 13.3× (1 process: no interval) the tokens/s of batch 1" in text
    # with each process's TPOT the gain carries Welch's interval over them
    cells["gen_tpot_p50_by_process_ms"] = [None, "1.7;1.8", "2.0;2.2"]
    text = "\n".join(generation_answer(cells, {}))
    assert "batch 16 decodes 13.3× (95% CI 9.90–18.0) the tokens/s of batch 1" in text
    assert "(hf_static fp16 cuda b1 prompt 128; 2 processes: 1.70–1.80 ms)" in text
    # where the cells say where a step's time goes, the floor comes with the GPU's busy share of the step
    from inferbench.scenarios.generation.answer import generation_section

    assert "GPU busy" not in text and "GPU busy a step" not in "\n".join(generation_section(cells, {}))
    cells["gen_gpu_busy_ms_per_step"] = [3.1, 1.6, 2.0]
    cells["gen_gpu_idle_ms_per_step"] = [10.9, 0.15, 0.1]
    text = "\n".join(generation_answer(cells, {}))
    assert (
        "hf_static 2.50× (GPU busy 1.60 of 1.75 ms, idle 0.150 waiting on the host), "
        "hf_eager 20.0× (GPU busy 3.10 of 14.0 ms, idle 10.9 waiting on the host)"
    ) in text
    table = "\n".join(generation_section(cells, {}))
    assert "| GPU busy a step | GPU idle a step |" in table and "| 1.60 | 0.150 |" in table


def test_the_generation_plot_draws_each_engine_and_prompt_against_the_batch(tmp_path, monkeypatch):
    import pandas as pd

    import inferbench.scenarios.generation.plots as plots

    drawn = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: (drawn.append(fig), path.write_bytes(b"png")))

    def row(engine: str, batch: int, prompt: int, status: str = "ok", threads: int = 0) -> dict:
        return {"workload": "llm:llama", "engine": engine, "engine_impl": engine, "precision": "fp16",
                "device": "cuda", "batch_size": batch, "seq_len": prompt, "threads": threads, "status": status,
                "mode": "generate", "gen_tpot_p50_ms": 2.0 * batch**0.2, "gen_ttft_p50_ms": 10.0 * batch}  # fmt: skip

    rows = [row(e, b, p) for e in ("hf_static", "ort_genai") for b in (1, 16) for p in (128, 512)]
    rows.append(row("vllm", 1, 128, status="unavailable"))  # no line for a cell that did not run
    rows += [row("ort_cpu_genai", b, 128, threads=t) for b in (1, 4) for t in (1, 4)]  # a line per thread count
    plots.plot_generation(pd.DataFrame(rows), "llm:llama", tmp_path / "generation.png", ["hf_static", "ort_genai"])
    tpot, ttft = drawn[0].axes
    labels = [line.get_label() for line in tpot.lines]
    assert len(tpot.lines) == len(ttft.lines) == 6  # 2 engines x 2 prompts, and one engine at 2 thread counts
    assert "hf_static fp16 cuda, prompt 512" in labels and "ort_cpu_genai fp16 cuda 4t, prompt 128" in labels
    assert not any(label.startswith("vllm") for label in labels)
    assert all(list(line.get_xdata()) == sorted(line.get_xdata()) for line in tpot.lines)  # along the batch
    # a workload without ok generation cells still gets its file, saying so
    not_run = [r for r in rows if r["status"] != "ok"]
    plots.plot_generation(pd.DataFrame(not_run), "llm:llama", tmp_path / "empty.png")
    assert not drawn[1].axes[0].lines and (tmp_path / "empty.png").exists()


# --- where a decode step's time goes (issue 57) --------------------------------------------------------


def test_the_host_s_time_in_each_step_call_is_kept_per_step():
    engine = FakeGenerator(prefill_s=0.0, step_s=0.004, new_tokens=5)
    *_, host_steps = generate_request(engine, {"input_ids": np.zeros((1, 3), dtype=np.int64)}, None)
    assert len(host_steps) == engine.new_tokens - 1 and all(s >= 0.004 for s in host_steps)


def test_busy_time_is_the_union_of_kernel_intervals_not_their_sum():
    from inferbench.trackers.kernel_trace import busy_us

    assert busy_us([]) == 0
    assert busy_us([(0, 10), (20, 25)]) == 15  # apart: their sum
    assert busy_us([(0, 10), (5, 12)]) == 12  # overlapping streams count once
    assert busy_us([(0, 10), (2, 3), (9, 30), (40, 41)]) == 31  # nested, chained, apart


def test_a_chrome_trace_s_kernels_are_read_gzipped_or_not_and_copies_and_host_ops_are_left_out(tmp_path):
    import gzip

    from inferbench.trackers.kernel_trace import totals, trace_kernels

    events = [
        {"cat": "kernel", "name": "gemv", "ts": 100.0, "dur": 8.0},
        {"cat": "kernel", "name": "rmsnorm", "ts": 110.0, "dur": 2.0},
        {"cat": "gpu_memcpy", "name": "Memcpy DtoH", "ts": 120.0, "dur": 5.0},
        {"cat": "cpu_op", "name": "aten::mm", "ts": 90.0, "dur": 50.0},
        {"ph": "M", "name": "process_name"},
    ]
    plain, zipped = tmp_path / "t.json", tmp_path / "t.pt.trace.json.gz"
    plain.write_text(json.dumps({"traceEvents": events}))
    with gzip.open(zipped, "wt") as handle:
        json.dump({"traceEvents": events}, handle)
    for path in (plain, zipped):
        assert trace_kernels(path) == [(100.0, 108.0), (110.0, 112.0)]
        assert totals(trace_kernels(path)).busy_us == 10.0


class TracedElsewhere(FakeGenerator):
    """An engine whose kernels run in another process (as vLLM's engine core): its profiled request's decode
    steps, each two kernels of 3 and 1 us, and one step of a batch whose rows reached it late left out."""

    steps_in_another_process = True
    kernel_trace_description = "a fake engine core's trace"

    def traced_decode_steps(self, staged):
        return [[(t, t + 3.0), (t + 3.0, t + 4.0)] for t in range(0, 10 * (self.new_tokens - 2), 10)]


def test_the_step_split_of_an_engine_traced_elsewhere_counts_the_steps_its_trace_tells_apart():
    from inferbench.scenarios.generation.measure import step_split

    engine = TracedElsewhere(0.0, 0.0, new_tokens=9)
    batch = {"input_ids": np.zeros((1, 3), dtype=np.int64)}
    split = step_split(engine, batch, tpot_p50_ms=0.01, host_step_s=[1.0], children_cpu_ms_per_iteration=0.008)
    assert split["steps_profiled"] == 7 and split["kernels_per_step"] == 2
    assert split["gpu_busy_ms_per_step"] == pytest.approx(0.004)
    assert split["gpu_busy_share"] == pytest.approx(0.4) and split["gpu_idle_ms_per_step"] == pytest.approx(0.006)
    # its step call waits for another process: not the host's time to issue a step
    assert split["host_step_call_ms_p50"] is None and "own process" in split["host_step_call"]
    # the CPU its engine core used per iteration, instead
    assert split["engine_core_cpu_ms_per_iteration"] == 0.008


def test_kernels_are_grouped_by_the_iteration_annotation_they_follow_and_only_decode_steps_kept(tmp_path):
    from inferbench.engines.generation.vllm_engine import decode_iteration
    from inferbench.trackers.kernel_trace import annotated_kernels

    def annotation(name: str, ts: float) -> dict:
        return {"cat": "gpu_user_annotation", "name": name, "ts": ts, "dur": 5.0}

    def kernel(ts: float, dur: float) -> dict:
        return {"cat": "kernel", "name": "k", "ts": ts, "dur": dur}

    events = [
        annotation("execute_context_1(128)_generation_0(0)", 0.0), kernel(1, 50),  # one row's prefill
        annotation("execute_context_1(128)_generation_1(1)", 60.0), kernel(61, 40), kernel(105, 2),  # mixed
        annotation("execute_context_0(0)_generation_2(2)", 110.0), kernel(111, 3), kernel(115, 1),
        kernel(117, 1),  # the sampling after the step: still the step's
        annotation("execute_context_0(0)_generation_2(2)", 130.0), kernel(131, 3),
        {"cat": "user_annotation", "name": "execute_context_0(0)_generation_2(2)", "ts": 129.0, "dur": 9.0},
    ]  # fmt: skip
    trace = tmp_path / "rank0.pt.trace.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    steps = annotated_kernels(trace, decode_iteration(2))
    assert steps == [[(111.0, 114.0), (115.0, 116.0), (117.0, 118.0)], [(131.0, 134.0)]]
    assert not decode_iteration(16).fullmatch("execute_context_14(1792)_generation_2(2)")
    assert decode_iteration(16).fullmatch("execute_context_0(0)_generation_16(16)")


def test_processes_step_splits_merge_against_the_pooled_tpot_and_plain_requests_keep_each_ratio():
    from inferbench.scenarios.generation.measure import merged_plain_requests, merged_step_split

    one = {"gpu_busy_ms_per_step": 1.0, "kernels_per_step": 400.0, "host_step_call_ms_p50": 0.3, "profiled": "x"}
    two = one | {"gpu_busy_ms_per_step": 1.2, "host_step_call_ms_p50": 0.5}
    three = one | {"gpu_busy_ms_per_step": 1.1, "host_step_call_ms_p50": 0.4}
    merged = merged_step_split([one, None, two, three], tpot_p50_ms=2.0)
    assert merged["gpu_busy_ms_per_step"] == pytest.approx(1.1) and merged["gpu_busy_share"] == pytest.approx(0.55)
    assert merged["gpu_idle_ms_per_step"] == pytest.approx(0.9) and merged["host_step_call_ms_p50"] == pytest.approx(
        0.4
    )
    assert merged["gpu_busy_ms_per_step_by_process"] == [1.0, 1.2, 1.1]
    assert merged_step_split([None, None], 2.0) is None
    plain = {
        "how": "LLM.generate",
        "requests": 5,
        "plain_p50_ms": 10.0,
        "stepped_p50_ms": 10.1,
        "stepped_over_plain": 1.01,
    }
    merged_plain = merged_plain_requests([plain, plain | {"stepped_over_plain": 0.99}, None])
    assert merged_plain["requests"] == 10 and merged_plain["stepped_over_plain_by_process"] == [1.01, 0.99]
    assert merged_plain["stepped_over_plain"] == pytest.approx(1.0)


class PlainToo(FakeGenerator):
    plain_request_description = "the engine's own loop"

    def plain_request(self, staged):
        time.sleep(self.step_s * (self.new_tokens - 1))


def test_an_engine_with_a_plain_way_of_answering_is_timed_that_way_too_and_others_are_not():
    from inferbench.scenarios.generation.measure import PLAIN_REQUESTS, plain_requests

    batch = {"input_ids": np.zeros((1, 3), dtype=np.int64)}
    assert plain_requests(FakeGenerator(0, 0.001, 4), batch) is None
    engine = PlainToo(0, 0.002, 4)
    calls = []
    engine.start = lambda staged, start=engine.start: calls.append("stepped") or start(staged)
    engine.plain_request = lambda staged, plain=engine.plain_request: calls.append("plain") or plain(staged)
    compared = plain_requests(engine, batch)
    # a stepped request, then a plain one, a pair more than it keeps (the first sets up what is set up once)
    assert calls == ["stepped", "plain"] * (PLAIN_REQUESTS + 1)
    assert compared["requests"] == PLAIN_REQUESTS and compared["plain_p50_ms"] >= 6.0
    assert compared["stepped_p50_ms"] >= 6.0  # 3 steps of 2 ms
    assert compared["stepped_over_plain"] == pytest.approx(compared["stepped_p50_ms"] / compared["plain_p50_ms"])


def test_vllm_s_own_latency_benchmark_gets_the_cell_s_engine_arguments_and_is_set_beside_it(tmp_path):
    spec = importlib.util.spec_from_file_location("vllm_bench_latency", REPO / "benchmarks/tools/vllm_bench_latency.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    bench_args, side_by_side = tool.bench_args, tool.side_by_side
    record = {
        "cell": {"cell_id": "llm:llama/vllm-fp16/cuda/b1-s128-t0", "batch_size": 1, "seq_len": 128},
        "engine": {
            "vllm": "0.24.0",
            "checkpoint_dir": "results/engines/vllm/abc-fp16",
            "engine_args": {
                "dtype": "float16",
                "max_num_seqs": 1,
                "enforce_eager": False,
                "enable_prefix_caching": False,
            },
        },
        "latency_ms": {"p50": 70.0, "mean": 75.0},
        "repeats": {"per_repeat": [{"p50_ms": 60.0, "n_iters": 61}, {"p50_ms": 80.0, "n_iters": 58}]},
        "sections": {"generation": {"new_tokens": 33, "ttft_ms": {"p50": 5.0}, "tpot_ms": {"p50": 2.0}}},
        "environment": {"thread_env": {"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": None}},
    }
    args = bench_args(record, 33, tmp_path / "o.json", iters=30, warmup=10)
    assert args[:2] == ["--model", "results/engines/vllm/abc-fp16"] and "--skip-tokenizer-init" in args
    assert "--no-enforce-eager" in args and "--no-enable-prefix-caching" in args
    assert args[args.index("--max-num-seqs") + 1] == "1" and args[args.index("--output-len") + 1] == "33"
    assert args[args.index("--input-len") + 1] == "128" and args[args.index("--batch-size") + 1] == "1"
    # each run in a fresh process, with the compile cache beside the cell's checkpoint and the cell's threads
    script = (
        "import json, os, sys\n"
        "json.dump([os.environ[n] for n in ('VLLM_CACHE_ROOT', 'OMP_NUM_THREADS')], open(sys.argv[1], 'w'))\n"
    )
    cache, threads = tool.in_fresh_process(record, script, lambda folder: [str(folder / "out.json")], "a script")
    assert cache == "results/engines/vllm/vllm-cache" and threads == "4"
    with pytest.raises(RuntimeError, match=r"a script failed \(1\): .*no GPU"):
        tool.in_fresh_process(record, "raise SystemExit('no GPU')", lambda folder: [], "a script")
    # the benchmark times as many requests as the cell's longest process did, never fewer than its default 30
    assert tool.matching_iters(record) == 61
    assert tool.matching_iters({"repeats": {"per_repeat": [{"n_iters": 10}]}}) == 30
    fulls = [{"output_len": 33, "p50_ms": p50, "mean_ms": p50 + 1} for p50 in (60.0, 68.0, 90.0)]
    row = side_by_side(record, {"output_len": 1, "p50_ms": 4.0}, fulls)
    assert row["bench_latency"]["per_token_ms"] == pytest.approx(2.0)  # (68 - 4) / 32: the full runs' median
    assert row["cell_over_bench"] == pytest.approx(
        {"request_ms": 70 / 68, "ttft_ms": 1.25, "per_token_ms": 1.0, "request_mean_ms": 75 / 73.667}, rel=1e-4
    )
    # each side's processes, and how far apart they read: (max - min) / median
    assert row["request_p50_by_process_ms"] == {"inferbench": [60.0, 80.0], "bench_latency": [60.0, 68.0, 90.0]}
    assert row["request_p50_spread_pct"] == pytest.approx({"inferbench": 20 / 70 * 100, "bench_latency": 30 / 68 * 100})
    assert "| 60.0, 80.0; 60.0, 68.0, 90.0 ms |" in tool.markdown([row])


class FakeLLMEngine:
    """vLLM's LLMEngine as the vllm engine drives it under load: requests added at any time, each step one
    token for every running request (outputs cumulative, as vLLM's default output kind)."""

    def __init__(self) -> None:
        self.running: dict[str, list] = {}

    def add_request(self, request_id, prompt, params):
        assert prompt["prompt_token_ids"] and params.ignore_eos and params.temperature == 0.0
        self.running[request_id] = [params.max_tokens, [], getattr(params, "output_kind", "cumulative")]

    def has_unfinished_requests(self):
        return bool(self.running)

    def step(self):
        from types import SimpleNamespace

        # vLLM's step on an idle engine waits for an output that never comes
        assert self.running, "step() on an engine with no request: vLLM would wait here forever"
        outputs = []
        for request_id, (wanted, tokens, kind) in list(self.running.items()):
            tokens.append(len(tokens) + 100)
            finished = len(tokens) == wanted
            if finished or kind == "cumulative":
                outputs.append(SimpleNamespace(request_id=request_id, finished=finished,
                                               outputs=[SimpleNamespace(token_ids=tuple(tokens))]))  # fmt: skip
            if finished:
                del self.running[request_id]
        return outputs


class FakeLLM:
    """vLLM 0.24's ``LLM.generate``: it sets the sampling parameters it is given to hand back final outputs
    only, then steps its engine to the end."""

    def __init__(self) -> None:
        self.llm_engine = FakeLLMEngine()

    def generate(self, prompts, params, use_tqdm=True):
        params.output_kind = "final_only"
        for index, prompt in enumerate(prompts):
            self.llm_engine.add_request(f"g{index}", prompt, params)
        finished = []
        while self.llm_engine.has_unfinished_requests():
            finished += [o for o in self.llm_engine.step() if o.finished]
        return finished


def test_vllm_s_stepped_requests_see_every_token_after_llm_generate_and_never_step_an_idle_engine():
    from types import SimpleNamespace

    from inferbench.engines.generation.vllm_engine import StepDriver, Vllm

    engine = object.__new__(Vllm)  # what prepare sets up, without vLLM
    engine.llm = FakeLLM()
    engine.driver = StepDriver(engine.llm.llm_engine)
    engine.sampling_params = SimpleNamespace
    engine.greedy = {"temperature": 0.0, "detokenize": False, "ignore_eos": True}
    engine.new_tokens = 4
    engine.generate_params = SimpleNamespace(max_tokens=4, **engine.greedy)
    staged = [[1, 2, 3], [4, 5, 6]]
    assert len(engine.plain_request(staged)) == 2
    request = engine.start(staged)  # after LLM.generate, as a cell's token parity runs
    assert request.made() == 1
    for made in (2, 3, 4):
        assert engine.step(request).made() == made
    with pytest.raises(RuntimeError, match="finished with 4 tokens a row; 5 were asked"):
        engine.step(request)


def test_vllm_serves_requests_under_load_through_its_engine_loop_as_the_step_driver_drives_it():
    from types import SimpleNamespace

    from inferbench.engines.generation.vllm_engine import Vllm
    from inferbench.scenarios.llm_load.arrivals import PlannedRequest
    from inferbench.scenarios.llm_load.measure import drive_steps, serving_mode

    engine = object.__new__(Vllm)  # what prepare sets up for serving, without vLLM
    engine.llm = SimpleNamespace(llm_engine=FakeLLMEngine())
    engine.sampling_params = SimpleNamespace
    engine.greedy = {"temperature": 0.0, "detokenize": False, "ignore_eos": True}
    engine._served = {}
    assert serving_mode(engine) == "step"
    requests = [PlannedRequest(f"r{i}", 0.0, (1, 2, 3), tokens) for i, tokens in enumerate((2, 5, 3))]
    traces, _ = drive_steps(engine, requests, concurrency=2)
    assert [len(t.events) for t in traces] == [2, 5, 3] and not engine.serve_busy()
    assert engine.serve_tokens("r1") == [100, 101, 102, 103, 104]
    with pytest.raises(KeyError):
        engine.serve_tokens("r1")  # read once


def _tracing_engine(tmp_path, monkeypatch, script: str):
    """The vllm engine's tracing path (traced_decode_steps) with ``script`` run in place of vLLM's."""
    from inferbench.engines.generation import vllm_engine

    monkeypatch.setattr(vllm_engine, "TRACE_SCRIPT", script)
    engine = object.__new__(vllm_engine.Vllm)
    engine.trace_dir = tmp_path / "trace"
    engine.trace_dir.mkdir()
    engine.checkpoint_dir = tmp_path / "ckpt"
    engine.engine_args = {"dtype": "float16", "gpu_memory_utilization": 0.5}
    engine.new_tokens = 3
    return engine, vllm_engine


def test_vllm_s_trace_is_read_from_a_fresh_process_s_profile_and_leaves_its_folder_empty(tmp_path, monkeypatch):
    # what vLLM's profiler writes: a decode iteration's annotation on the GPU, then its kernels
    script = """
import json, sys
a = json.load(open(sys.argv[1]))
assert a["engine_args"]["gpu_memory_utilization"] < 0.5 and a["prompts"] == [[1, 2], [3, 4]]
events = [{"cat": "gpu_user_annotation", "ts": 0, "name": "execute_context_0(0)_generation_2(2)"},
          {"cat": "kernel", "ts": 1, "dur": 2}, {"cat": "kernel", "ts": 4, "dur": 1},
          {"cat": "gpu_user_annotation", "ts": 10, "name": "execute_context_2(4)_generation_0(0)"},
          {"cat": "kernel", "ts": 11, "dur": 5}]
json.dump({"traceEvents": events}, open(a["trace_dir"] + "/worker.pt.trace.json", "w"))
"""
    engine, _ = _tracing_engine(tmp_path, monkeypatch, script)
    steps = engine.traced_decode_steps([[1, 2], [3, 4]])
    assert steps == [[(1.0, 3.0), (4.0, 5.0)]]  # the decode iteration's kernels only, not the prefill's
    assert list(engine.trace_dir.iterdir()) == []


def test_vllm_s_tracing_process_is_ended_with_its_stacks_when_it_hangs_and_its_failure_is_a_reason(
    tmp_path, monkeypatch
):
    engine, vllm_engine = _tracing_engine(tmp_path, monkeypatch, "import time\ntime.sleep(60)\n")
    monkeypatch.setattr(vllm_engine, "TRACE_TIMEOUT_S", 1)
    with pytest.raises(RuntimeError, match=r"had not finished after 1 s(.|\n)*Fatal Python error: Aborted"):
        engine.traced_decode_steps([[1, 2]])
    monkeypatch.setattr(vllm_engine, "TRACE_SCRIPT", "raise SystemExit('no GPU here')\n")
    with pytest.raises(RuntimeError, match=r"failed \(1\): no GPU here"):
        engine.traced_decode_steps([[1, 2]])
    assert list(engine.trace_dir.iterdir()) == []


def test_continuous_batching_settings_take_the_names_of_the_installed_transformers():
    from dataclasses import dataclass

    from inferbench.engines.generation.transformers import _across_versions

    class Model:
        def __init__(self) -> None:
            self.config = type("Config", (), {"_attn_implementation": "sdpa"})()

        def set_attn_implementation(self, name: str) -> None:
            self.config._attn_implementation = name

    @dataclass
    class Before:  # transformers 5.17: block_size, and flash switched to wherever it is installed
        block_size: int = 256

    @dataclass
    class After:
        page_size: int = 256
        auto_switch_to_flash: bool = True

    old, new = Model(), Model()
    assert _across_versions(Before, old, 64) == {"block_size": 64}
    assert old.config._attn_implementation == "paged|sdpa"  # a paged attention is kept as it is: SDPA stays
    assert _across_versions(After, new, 64) == {"page_size": 64, "auto_switch_to_flash": False}
    assert new.config._attn_implementation == "sdpa"
