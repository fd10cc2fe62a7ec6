"""LLM serving under load with a real tiny Llama on the CPU (issue 58): a cell through the runner on transformers'
continuous batching, its served tokens held to FP32 eager's; the static engine's CPU cell says why it cannot
serve there; and the `llm` preset's CPU study through the workflow, to its record, plot and report."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml
from snakemake.utils import update_config

from inferbench.analysis.summary import summary_row
from inferbench.core.cells import CellKey, CellRecord
from inferbench.core.settings import MeasureSettings
from inferbench.scenarios.prepare import CellInputs, CellRequest
from tests.conftest import REPO, TINY_LLAMA, run_as_job
from tests.test_workflow import snakemake

pytestmark = pytest.mark.slow

#: small enough for seconds on 2 cores: steady windows of a second or more, 20 requests at least judge a p90
LOAD = {"requests": 20, "load_shares": [0.5, 1.0, 2.0], "prompt_range": 0.5, "output_range": 0.5, "steady_s": 1.0,
        "ramp_s": 0.2, "served_tolerance": 0.5,
        "objective": {"ttft_ms": 10_000, "tpot_ms": 1_000, "percentile": "p90"}}  # fmt: skip


def _run(tmp_path: Path, llama: Path, engine: str, options: dict | None = None) -> CellRecord:
    key = CellKey("llm:llama", engine, "fp32", "cpu", 4, 16, 1, "llm_load")
    settings = MeasureSettings(warmup_s=0, repeats=1, scenario_settings=LOAD)
    inputs = CellInputs(llama / "m.json", llama / "m.pt", llama / "ref.npz")
    variant = {"engine": engine, "new_tokens": 8, **(options or {})}
    request = CellRequest(key, variant, inputs, settings, {"max_rel_l2": 0.05})
    return run_as_job(request, tmp_path / key.relpath)


def test_a_tiny_llama_serves_a_sweep_through_transformers_continuous_batching_with_fp32_eager_s_tokens(llama, tmp_path):
    record = _run(tmp_path, llama, "hf_generate")
    assert record.status == "ok", record.reason
    serving = record.sections["llm_load"]
    assert serving["driven"] == "step" and serving["max_running"] == 4 and serving["prompt_tokens"] == 16
    # the reference prompts through the batcher: their 8 greedy tokens are transformers' generate's on FP32
    assert serving["token_parity"] == {"equal": True, "checked": True, "compared": 8, "agreeing": 8,
                                       "first_difference": None}  # fmt: skip
    capacity = serving["capacity"]["request_per_s"]
    assert capacity > 0 and [s["offered_per_s"] for s in serving["sweep"]] == pytest.approx(
        [0.5 * capacity, capacity, 2 * capacity]
    )
    for step in serving["sweep"]:
        # every request made what it asked for (4 to 12 tokens around new_tokens 8), no stop at EOS
        n = step["requests"]  # those that arrived in the steady window, each timed to its end
        assert n >= 20 and step["short_requests"] == 0 and step["window_s"] >= 1.0 and step["output_tokens"] > 0
        assert step["valid"] in (True, False) and isinstance(step["failed"], list)
        assert step["ttft_ms"]["p50"] <= step["e2e_ms"]["p50"] and step["tpot_ms"]["p90"] is not None
    row = summary_row(record)
    assert row["timing"] == "llm_load" and row["serving_capacity_qps"] == capacity
    assert row["serving_target_qps"] == serving["answer"]["rate_per_s"]  # None where no load met the objective
    shown = serving["sweep"][serving["answer"]["index"] or 0]
    assert record.n_iters == shown["requests"] and record.latency_ms["p50"] > 0


def test_the_static_engine_s_cpu_cell_says_it_serves_under_load_on_a_gpu_only(llama, tmp_path):
    record = _run(tmp_path, llama, "hf_generate_static", {"mode": "default"})
    # `unavailable` once the runner asks the scenario before preparing (ScenarioInfo.unavailable); `failed` before
    assert record.status in ("unavailable", "failed")
    assert "the static engine replays transformers' continuous batching steps as CUDA graphs" in record.reason


def test_the_llm_preset_s_cpu_serving_study_runs_through_the_workflow_to_its_plot_and_answer(tmp_path):
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    update_config(config, yaml.safe_load((REPO / "config" / "studies" / "llm.yaml").read_text()))
    update_config(config, copy.deepcopy({"models": {"llama_mini": {"arch": {**TINY_LLAMA, "vocab_size": 1024}}},
                                         "measure": {"warmup_s": 0.0}}))  # fmt: skip
    config["run"] = ["llm_serving_cpu"]  # the preset's study that runs on the CPU under load
    jobs = snakemake(tmp_path, config, dryrun=False)
    assert jobs["llm_load_cell"] == 1 and jobs["plot_declared"] == 1
    results = tmp_path / "results"
    record = CellRecord.load(results / "cells" / "llama_mini" / "hf_eager-fp32" / "cpu" / "b4-s64-t2-llm_load.json")
    assert record.status == "ok", record.reason
    # two processes, one of them perhaps left out where other work held the host (the contention rule)
    assert (
        len(record.repeats["per_repeat"]) >= 2 and record.sections["llm_load"]["settings"]["requests"] == 40
    )  # the study's
    assert record.sections["llm_load"]["objective_text"] == "TTFT p90 ≤ 500 ms and TPOT p90 ≤ 50 ms"
    assert (results / "plots" / "llama_mini" / "serving.png").stat().st_size > 10_000
    report = (results / "report.md").read_text()
    answer = report[report.index("Study `llm_serving_cpu`.") :]
    assert "**llama_mini** hf_eager fp32 cpu 2t (up to 4 running, prompts of 64 ±50% tokens" in answer
    assert "TTFT p90 ≤ 500 ms and TPOT p90 ≤ 50 ms" in answer and "capacity" in answer
    assert "![llama_mini serving](plots/llama_mini/serving.png)" in answer
    search = record.sections["llm_load"]["search"]
    # a load met the objective and a heavier one missed it: every process searched, and the answer says so (on a busy
    # machine the pooled sweep may meet it at no load, though a process's bracket asked for the search: no rate)
    if search is not None and record.sections["llm_load"]["answer"]["rate_per_s"] is not None:
        assert search["pooled"] and "A search of 2 loads between the two, each offered to every process" in answer
    # every process was offered the same rates: the first's capacity's shares
    assert record.sections["llm_load"]["offered_from"]["same_rates"] is True
    details = (results / "report_details.md").read_text()
    assert "## LLM serving under load" in details and "| 1.5× capacity |" in details
    # each load's verdict beside its figures: VALID, or INVALID with the constraints it failed
    verdicts = re.findall(r"\| (VALID|INVALID: [^|]+) \|", details)
    steps = len(search["steps"]) if search else 0
    assert len(verdicts) == 3 + steps, details
    # loads.csv beside the summary: the capacity, each load and each search step, one row each, as the record
    loads = pd.read_csv(results / "loads.csv")
    assert list(loads["phase"]) == ["capacity"] + ["sweep"] * 3 + ["search"] * steps
    assert loads["request_per_s"].tolist()[1:4] == pytest.approx(
        [s["request_per_s"] for s in record.sections["llm_load"]["sweep"]]
    )
    assert loads["energy_per_output_token_mj"].isna().all(), "no energy counter on a CPU"
    assert re.search(r"Energy: +unavailable: energy is read from a GPU's counter", answer)


def test_the_batcher_serves_and_puts_the_model_s_own_attention_back_when_closed():
    import contextlib

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from inferbench.engines.generation.transformers import ServingBatcher

    torch.manual_seed(0)
    lm = LlamaForCausalLM(LlamaConfig(**TINY_LLAMA, attn_implementation="sdpa")).eval()
    batcher = ServingBatcher(lm, running=2, longest=32, autocast=contextlib.nullcontext)
    batcher.add("a", [1, 2, 3], 3)
    made = {}
    while batcher.busy():
        made |= {request_id: (count, finished) for request_id, count, finished in batcher.step()}
    assert made == {"a": (3, True)} and len(batcher.tokens("a")) == 3
    batcher.close()
    # transformers 5.17 batches on a paged attention, which refuses a plain forward: the model's own is back
    assert lm.config._attn_implementation == "sdpa"
    lm(torch.tensor([[1, 2, 3]]))
