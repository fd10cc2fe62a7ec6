"""Every study preset of config/studies/ runs on the CPU through the workflow, as a user runs it
(`--configfile config/studies/<name>.yaml` over config/config.yaml), and its report section answers
its question. Models are shrunk and the measuring loop shortened; the grids are the presets' own.
Presets that need a GPU must stop before any job with a message that says so."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pandas as pd
import pytest
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import update_config

from tests.conftest import REPO
from tests.test_workflow import snakemake

pytestmark = pytest.mark.slow

PRESETS = REPO / "config" / "studies"
LLAMA_TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
LLAMA_TINY |= {"num_key_value_heads": 2, "vocab_size": 1024}
SHRINK = {
    "models": {
        "mlp_lendingclub": {"arch": {"hidden": [8]}, "train": {"epochs": 1}},
        "mlp_heart": {"arch": {"hidden": [8]}, "train": {"epochs": 3}},
        "bert_base": {
            "arch": {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64}
        },
        "distilbert": {"arch": {"n_layers": 1, "dim": 32, "n_heads": 2, "hidden_dim": 64}},
        "llama_mini": {"arch": LLAMA_TINY},
    },
    "datasets": {"lendingclub": {"rows": 3000}},
    "measure": {"warmup_s": 0.0, "min_time_s": 0.01, "min_iters": 3},
}


#: CPUs this process may use: a cell with more threads is unavailable here (scenarios.prepare), so the
#: presets' thread counts are capped at it (CI has 2; loan_default and transformers ask for 4)
CPUS = len(os.sched_getaffinity(0))


def preset_config(name: str) -> dict:
    """config/config.yaml, then the preset, then the shrinking, merged as Snakemake merges config files;
    thread counts capped at the CPUs here."""
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    update_config(config, yaml.safe_load((PRESETS / f"{name}.yaml").read_text()))
    update_config(config, copy.deepcopy(SHRINK))
    for study in config["studies"].values():
        for grid in (study, study.get("own_grid") or {}):  # a seed's own grid too: it replaces the study's
            if "threads" in grid:
                grid["threads"] = sorted({min(threads, CPUS) for threads in grid["threads"]})
    return config


def test_every_preset_selects_defined_studies_and_every_seed_study_is_in_full():
    base = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    names = sorted(p.stem for p in PRESETS.glob("*.yaml"))
    assert {"loan_default", "vision_fp16", "gpu_efficiency", "transformers", "heart_training", "full"} <= set(names)
    seed_studies = set()
    for name in names:
        run = preset_config(name)["run"]
        assert set(run) <= set(base["studies"]), name
        if name not in ("full", "repeatability", "peak", "serving", "llm"):  # studies of their own, not seed studies
            seed_studies |= set(run)
        for study in run:  # every study of a preset says what it answers and how its section looks
            assert base["studies"][study].get("question"), study
    assert seed_studies <= set(preset_config("full")["run"])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """One working directory for all presets, as a user would have: shared cells run once."""
    return tmp_path_factory.mktemp("presets")


def run_preset(workdir: Path, name: str) -> tuple[pd.DataFrame, str]:
    snakemake(workdir, preset_config(name), dryrun=False)
    summary = pd.read_csv(workdir / "results" / "summary.csv")
    return summary, (workdir / "results" / "report.md").read_text()


def details(workdir: Path) -> str:
    return (workdir / "results" / "report_details.md").read_text()


def section(report: str, study: str) -> str:
    """A study's answer on the report's first page: its heading (the question) to the next heading."""
    start = report.rindex("\n### ", 0, report.index(f"Study `{study}`."))
    end = min(i for i in (report.find("\n### ", start + 1), report.find("\n## ", start + 1)) if i != -1)
    return report[start:end]


def test_loan_default_preset_gives_latency_per_loan_at_every_batch(workdir):
    summary, report = run_preset(workdir, "loan_default")
    assert set(summary["batch_size"]) == {1, 10, 100, 1000, 5000, 10000}
    assert set(summary["engine"]) == {"torch_eager", "ort_cpu"} and (summary["status"] == "ok").all()
    text = section(report, "loan_default")
    assert "### From which batch size does the GPU beat the CPU" in text
    assert "- CPU/GPU crossover: not measured here; only cpu cells ran." in text
    fastest = [line for line in text.splitlines() if line.startswith("- batch") and "is fastest" in line]
    assert [line.split(":")[0] for line in fastest] == [f"- batch {b:,}" for b in (1, 10, 100, 1000, 5000, 10000)]
    assert "| batch 10,000 |" in text and f"| ort_cpu fp32 cpu {min(4, CPUS)}t |" in text
    assert "The GPU side of `loan_default`: needs a GPU" in report[report.index("## Not measured here") :]


def test_transformers_preset_gives_the_scaling_exponent_per_encoder(workdir):
    summary, report = run_preset(workdir, "transformers")
    # two encoders, batch 1 and 8, three sequence lengths, ort_cpu on the plain and on the fused export
    assert len(summary) == 2 * 2 * 3 * 2
    assert (summary["status"] == "ok").all(), summary[["engine", "status", "reason"]]
    fused = summary[summary["engine"] == "ort_cpu_fused"]
    assert set(fused["attention_kernel"]) == {"onnxruntime Attention"} and fused["fusions"].all()
    assert set(summary[summary["engine"] == "ort_cpu"]["attention_kernel"]) == {"unfused (matmul, softmax, matmul)"}
    text = section(report, "transformers")
    threads = min(4, CPUS)
    for workload in ("bert_base", "distilbert"):  # an exponent per series, each with its interval
        answer = text[text.index(f"**{workload}**") :]
        assert f"- ort_cpu fp32 cpu {threads}t batch 8: p50" in answer and "length^k with k =" in answer
    assert f"| ort_cpu_fused fp32 cpu {threads}t | 8 |" in text  # a row per cell and batch, lengths across


def test_heart_training_preset_gives_epoch_times_and_the_loader_comparison(workdir):
    summary, report = run_preset(workdir, "heart_training")
    assert set(summary["engine"]) == {"train_epoch", "train_epoch_loader"} and set(summary["batch_size"]) == {32, 256}
    assert (summary["status"] == "ok").all()
    text = section(report, "heart_training")
    # against the plain loop, the study's first engine: the baseline is named, the ratio has its interval
    assert "× baseline: over train_epoch fp32 on the same device" in text
    row = next(line for line in text.splitlines() if line.startswith("| train_epoch_loader fp32 cpu 2t | fp32 | 256 |"))
    assert "× (" in row


def test_full_preset_reuses_the_cells_already_measured_and_has_every_section(workdir):
    before = {p: p.stat().st_mtime_ns for p in (workdir / "results" / "cells").rglob("*.json")}
    summary, report = run_preset(workdir, "full")
    after = {p: p.stat().st_mtime_ns for p in (workdir / "results" / "cells").rglob("*.json")}
    assert before and all(after[p] == t for p, t in before.items())  # nothing measured twice
    assert len(summary) == len(before)  # the CPU part of full is the union of the presets' CPU parts
    order = [report.index(f"Study `{s}`.") for s in preset_config("full")["run"]]
    assert order == sorted(order)  # answers in the run's order
    assert "Not answered here: every cell: needs a GPU" in section(report, "vision_fp16")


def test_serving_preset_serves_every_cpu_model_through_loadgen(workdir):
    config = preset_config("serving")
    # short LoadGen runs of 500 queries, not the default 2,000 (minutes here): fewer cannot make a p99
    # valid (LoadGen's early stopping); 4 search runs, not the preset's 6 (still down to 1/32 of the
    # capacity: a busy 2-core machine needs them)
    config["serving"] |= {"min_duration_s": 0.2, "min_query_count": 500, "search_runs": 4}
    snakemake(workdir, config, dryrun=False)
    summary = pd.read_csv(workdir / "results" / "summary.csv")
    report = (workdir / "results" / "report.md").read_text()
    # 2 MLPs x largest batch 1, 8 x server, offline; DistilBERT at 1; the LendingClub MLP with an 8 ms wait
    assert len(summary) == 2 * 2 * 2 + 2 + 1 and set(summary["scenario"]) == {"server", "offline"}
    not_ok = summary[summary["status"] != "ok"]
    assert not_ok.empty, not_ok[["workload", "engine", "batch_size", "scenario", "reason"]].to_dict("records")
    assert (summary["serving_qps"] > 0).all() and summary["latency_p50_ms"].isna().all()
    server = summary[summary["scenario"] == "server"]
    assert (server["serving_p99_ms"] <= server["serving_latency_bound_ms"]).all()
    assert set(server["serving_max_queue_delay_ms"]) == {0.0, 8.0}
    cell = workdir / "results" / "cells" / "distilbert" / "ort_cpu-fp32" / "cpu" / "b1-s32-t2-server"
    assert (cell.with_suffix(".loadgen") / "server-0" / "mlperf_log_detail.txt").exists()
    text = section(report, "serving_cpu")
    assert "### How many loan or patient queries per second" in text
    for workload in ("mlp_lendingclub", "mlp_heart"):
        assert f"- **{workload}**: " in text and "queries/s with p99" in text
    appendix = details(workdir)
    assert "| ort_cpu | fp32 | cpu | 0 | 8 |" in appendix  # a row at largest batch 8
    assert "| ort_cpu | fp32 | cpu | 32 | 1 |" in appendix  # DistilBERT at sequence 32
    assert "## Every cell by workload" not in appendix, "serving cells stay out of the single-call tables"
    assert "![distilbert serving](plots/distilbert/serving.png)" in report
    assert (workdir / "results" / "plots" / "distilbert" / "serving.png").stat().st_size > 10_000
    assert "ort_cpu_wait8" in section(report, "serving_cpu_delay")


def _spin() -> None:
    while True:
        pass


def test_serving_preset_completes_beside_a_busy_loop(workdir):
    """On a busy machine a server cell can find its bound out of reach before any LoadGen run: it is
    recorded with the reason and leaves every output its rule declares, and the run goes on."""
    import multiprocessing

    config = preset_config("serving")
    # DistilBERT only, and runs of at most 5 s: below 100 QPS no run can issue its 500 queries, so on
    # this busy machine the search stops early (or runs, if the machine is fast): either must complete
    config["run"] = ["serving_cpu_text"]
    config["serving"] |= {"min_duration_s": 0.2, "max_duration_s": 5, "min_query_count": 500}
    busy = [multiprocessing.get_context("spawn").Process(target=_spin, daemon=True) for _ in range(2)]
    for process in busy:
        process.start()
    try:
        snakemake(workdir, config, dryrun=False)
    finally:
        for process in busy:
            process.terminate()
    summary = pd.read_csv(workdir / "results" / "summary.csv")
    assert len(summary) == 2 and set(summary["status"]) <= {"ok", "invalid"}, summary[["status", "reason"]]
    for cell in (workdir / "results" / "cells" / "distilbert").rglob("*-server.json"):
        assert cell.with_suffix(".loadgen").is_dir()
    assert (workdir / "results" / "report.md").exists()


@pytest.mark.parametrize("name", ["vision_fp16", "gpu_efficiency", "peak"])
def test_gpu_only_presets_stop_with_a_clear_message_on_a_cpu_machine(tmp_path, name):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the preset has cells here")
    with pytest.raises(WorkflowError, match=r"(?s)have no cells on this machine:.* a GPU, and none is visible here"):
        snakemake(tmp_path, preset_config(name), dryrun=True)
    assert not (tmp_path / "results").exists()


def test_llm_preset_gives_first_token_and_per_token_times_for_every_engine_on_the_cpu(workdir):
    summary, report = run_preset(workdir, "llm")
    generation = summary[summary["mode"] == "generate"]
    # and llm_serving_cpu's cell under load (tests/test_llm_load_workflow.py reads its answer)
    loaded = generation[generation["scenario"] == "llm_load"]
    assert len(generation) == 25 and len(loaded) == 1 and (loaded["status"] == "ok").all(), loaded["reason"]
    generation = generation[generation["scenario"] == "single"]
    # llm_gpu needs a GPU; on the CPU: llama_mini, three engines, fp32 and bf16, batch 1 and 4, two prompts
    assert set(generation["engine"]) == {"hf_eager", "hf_static", "ort_genai"} and len(generation) == 24
    # ONNX Runtime's CPU provider cannot run the GenAI builder's bf16 graph: those cells say so
    cpu_bf16 = (generation["engine"] == "ort_genai") & (generation["precision"] == "bf16")
    assert (generation.loc[cpu_bf16, "status"] == "unavailable").all() and cpu_bf16.sum() == 4
    assert generation.loc[cpu_bf16, "reason"].str.contains("no bf16 kernels").all()
    measured = generation[~cpu_bf16]
    assert (measured["status"] == "ok").all(), measured[["engine", "precision", "status", "reason"]]
    assert measured["gen_token_parity"].all()  # every engine's first tokens are FP32 eager's
    assert (measured["gen_tpot_p50_ms"] > 0).all() and (measured["gen_ttft_p50_ms"] > 0).all()
    text = section(report, "llm_cpu")
    assert "**llama_mini**: the shortest time per output token is" in text
    assert "decodes" in text and "the tokens/s of batch 1" in text  # where batching pays
    assert "| ort_genai | fp32 | cpu | 4 | 256 |" in details(workdir)
    # the generation plot of the decoder, shown in its study's answer
    assert "![llama_mini generation](plots/llama_mini/generation.png)" in text
    assert (workdir / "results" / "plots" / "llama_mini" / "generation.png").stat().st_size > 10_000
    assert "Not answered here: every cell: needs a GPU" in section(report, "llm_gpu")
    assert "Generation cells (a decoder answering requests" in details(workdir)
