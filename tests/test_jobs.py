"""What a cell's job is given (inferbench.plan.jobs): its input files, its arguments, its threads, priority
and group, computed from the config once, in the package; the rules only turn wildcards into a cell."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from inferbench.core.cells import CellKey
from inferbench.plan.config import validate_config
from inferbench.plan.jobs import RunPlan
from tests.conftest import REPO

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)


@pytest.fixture(scope="module")
def plan() -> RunPlan:
    config = validate_config(copy.deepcopy(yaml.safe_load((REPO / "config" / "config.yaml").read_text())))
    config["run"] = ["transformers", "cpu_engines"]
    config["studies"]["transformers"]["devices"] = ["cpu"]
    return RunPlan.of(config)


def cell(plan: RunPlan, **axes) -> CellKey:
    found = [c for c in plan.cells if all(getattr(c, k) == v for k, v in axes.items())]
    assert found, f"no cell with {axes}"
    return found[0]


def test_a_cells_arguments_name_it_and_carry_the_calls_its_studies_need(plan):
    p99 = cell(plan, workload="bert_base", engine="ort_cpu", batch_size=8, seq_len=32)
    p50 = cell(plan, workload="mlp_lendingclub", engine="openvino", precision="fp32")
    args = plan.args(p99)
    parsed = dict(zip(args[::2], args[1::2], strict=True))
    assert parsed["--workload"] == "bert_base" and parsed["--batch"] == "8" and parsed["--seq"] == "32"
    # the transformers study reports a p99 (100 calls); cpu_engines a p50 only (the config's min_iters)
    assert json.loads(parsed["--measure"])["min_iters"] == 100
    assert json.loads(dict(zip(plan.args(p50)[::2], plan.args(p50)[1::2], strict=True))["--measure"])["min_iters"] == 5
    assert json.loads(parsed["--engine-options"]) == plan.config["engines"]["ort_cpu"]
    assert "--scenario" not in args  # the plain scenario needs no flag


def test_a_cells_inputs_are_the_artifact_its_engine_is_prepared_from(plan):
    onnx = plan.inputs(cell(plan, workload="distilbert", engine="ort_cpu", precision="int8"))
    eager = plan.inputs(cell(plan, workload="distilbert", engine="torch_eager"))
    assert onnx["artifact"].startswith("results/onnx/distilbert") and onnx["artifact"].endswith(".onnx")
    assert onnx["artifact"] != "results/onnx/distilbert.onnx", "int8 reads its own quantised file"
    assert eager["artifact"] == "results/models/distilbert.pt"
    assert onnx["reference"] == eager["reference"] == "results/reference/distilbert-s32.npz"


def test_cpu_cells_take_their_threads_and_gpu_cells_come_first_those_that_compile_before_all(plan):
    gpu = CellKey("resnet50", "torch_eager", "fp16", "cuda", 32, 0, 0)
    compiled = CellKey("resnet50", "torch_compile", "fp16", "cuda", 32, 0, 0)
    cpu = CellKey("resnet50", "torch_eager", "fp32", "cpu", 1, 0, 2)
    assert RunPlan.threads(cpu) == 2 and RunPlan.threads(gpu) == 4
    assert RunPlan.group(cpu) == "cpu_cells" and RunPlan.group(gpu) is None
    assert plan.priority(compiled) == 2 and plan.priority(gpu) == 1 and plan.priority(cpu) == 0


def test_a_gpu_cells_parity_gate_follows_its_tf32_setting_and_its_librarys_default_where_it_has_none(plan):
    tolerances = plan.config["parity"]["tolerances"]
    strict = dict(plan.config["engines"]["torch_eager"], tf32="strict")
    plan.config["engines"]["strict_eager"] = strict
    try:
        on_gpu = {
            name: plan.tolerance(CellKey("mlp_heart", name, "fp32", "cuda", 4, 0, 0))
            for name in ("strict_eager", "torch_eager", "noop")
        }
    finally:
        del plan.config["engines"]["strict_eager"]
    assert on_gpu["strict_eager"] == tolerances["fp32"] and on_gpu["torch_eager"] == tolerances["tf32"]
    assert on_gpu["noop"] == tolerances["tf32"], "no tf32 option: the library's default, TF32 on"
    assert plan.tolerance(CellKey("mlp_heart", "noop", "fp32", "cpu", 4, 0, 2)) == tolerances["fp32"]


def test_cells_that_compile_are_primed_in_a_job_of_their_own(plan):
    """torch.compile (inference and training) compiles from nothing in a priming job; the eager engines, other
    scenarios and generation engines (whose compile stays in their cell's first process) have none."""
    config = copy.deepcopy(plan.config)
    config["run"] = ["gpu_efficiency", "gpu_training"]
    gpu = RunPlan(config, True, [], {}, {}, {}, None)
    compiled = CellKey("resnet50", "torch_compile", "fp16", "cuda", 32, 0, 0)
    trained = CellKey("resnet50", "train_fast", "bf16", "cuda", 32, 0, 0)
    assert gpu.primed(compiled) == "results/primed/resnet50/torch_compile-fp16/cuda/b32-s0-t0.json"
    assert gpu.primed(trained) == "results/primed/resnet50/train_fast-bf16/cuda/b32-s0-t0.json"
    assert gpu.primed(CellKey("resnet50", "train", "fp32", "cuda", 32, 0, 0)) is None, "no compile: no priming"
    assert gpu.primed(CellKey("resnet50", "torch_eager", "fp16", "cuda", 32, 0, 0)) is None
    assert gpu.primed(CellKey("resnet50", "torch_compile", "fp16", "cuda", 32, 0, 0, "server")) is None
    assert gpu.primed(CellKey("llm_llama", "hf_static", "fp16", "cuda", 1, 128, 0)) is None
    assert max(gpu.priority(compiled), gpu.priority(trained)) < RunPlan.PRIME_PRIORITY, "priming comes first"


def test_an_interleaved_studys_cells_are_grouped_by_all_but_their_engine_variant():
    """The A/A studies interleave: one job per shape, each member named with its record in that job's folder."""
    config = validate_config(copy.deepcopy(yaml.safe_load((REPO / "config" / "config.yaml").read_text())))
    config["run"] = ["aa_cpu_text", "cpu_engines"]
    plan = RunPlan.of(config)
    folder = "results/interleaved/distilbert/fp32/cpu/b8-s32-t1"
    members = plan.interleaved[folder]
    assert [c.engine for c in members] == sorted(config["studies"]["aa_cpu_text"]["engines"])
    assert plan.interleaved_folder(members[0]) == folder
    grouped = {c for cells in plan.interleaved.values() for c in cells}
    assert grouped < set(plan.cells), "cpu_engines does not interleave: its cells have jobs of their own"
    assert all(plan.interleaved_folder(c) is None for c in set(plan.cells) - grouped)
    argv = plan.run_cell_argv(members[0], f"{folder}/{members[0].relpath}")
    parsed = dict(zip(argv[::2], argv[1::2], strict=True))
    assert parsed["--engine"] == members[0].engine and parsed["--out"].startswith(folder + "/distilbert/")
    assert parsed["--reference"] == "results/reference/distilbert-s32.npz" and "--tolerance" in parsed
    assert set(plan.interleaved_inputs(folder)) >= {parsed["--model-meta"], parsed["--reference"]}
