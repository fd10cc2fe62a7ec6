"""A study with no cells on this machine says why, per workload and engine variant."""

from __future__ import annotations

import copy

import pytest
import yaml

from inferbench.plan.config import ConfigError, validate_config
from inferbench.plan.grid import SKIPPED_WITH_GPU, config_cells, no_cells_message, resolved_studies, study_cells
from tests.conftest import REPO

pytestmark = pytest.mark.fast

DEFAULT = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def _config(study: dict) -> dict:
    config = copy.deepcopy(DEFAULT)
    config["studies"]["x"] = {"precisions": ["fp32"], "devices": ["cpu"], "batch_sizes": [1], **study}
    config["run"] = ["x"]
    return validate_config(config)


def test_each_workload_and_engine_without_cells_gets_its_own_reason():
    config = _config({"workloads": ["mlp_heart", "resnet50"], "engines": ["ort_cuda", "ort_cpu", "ort_trt"],
                      "precisions": ["fp16"]})  # fmt: skip
    assert config_cells(config, has_cuda=False) == []
    lines = no_cells_message(config, has_cuda=False).splitlines()
    assert "  x: mlp_heart on ort_cuda: it runs on cuda, and the study runs on cpu here" in lines
    assert "  x: resnet50 on ort_cpu: it runs fp32/int8, and the study asks for fp16" in lines
    assert len([line for line in lines if line.startswith("  x: ")]) == 6, "one line per workload and engine"


def test_a_study_that_needs_a_gpu_says_so_once():
    config = _config({"workloads": ["resnet50"], "engines": ["torch_eager"], "devices": ["cuda"],
                      "requires_gpu": True})  # fmt: skip
    assert no_cells_message(config, has_cuda=False).splitlines()[1] == (
        "  x: every cell needs a GPU, and none is visible here"
    )


def test_a_study_for_cpu_machines_runs_only_where_no_gpu_is_visible():
    config = _config({"workloads": ["mlp_heart"], "engines": ["ort_cpu"], "skip_with_gpu": True})
    assert [c.cell_id for c in config_cells(config, has_cuda=False)] == ["mlp_heart/ort_cpu-fp32/cpu/b1-s0-t2"]
    assert config_cells(config, has_cuda=True) == []
    why = no_cells_message(config, has_cuda=True).splitlines()[1]
    assert why.startswith("  x: every cell: a question for CPU machines") and "skip_with_gpu" in why
    studies = resolved_studies(config, has_cuda=True)
    assert studies["x"]["left_out"] == [{"what": "every cell", "why": SKIPPED_WITH_GPU}]
    assert studies["x"]["cells"] == []


def test_a_study_cannot_both_need_a_gpu_and_skip_one():
    with pytest.raises(ConfigError, match="requires_gpu and skip_with_gpu together"):
        _config({"workloads": ["mlp_heart"], "engines": ["ort_cpu"], "requires_gpu": True, "skip_with_gpu": True})


def test_the_default_leaves_its_cpu_runtime_studies_to_cpu_machines():
    """A GPU machine's default stays short: the CPU runtimes' studies run where there is no GPU."""
    config = validate_config(copy.deepcopy(DEFAULT))
    studies, variants = config["studies"], config["engines"]
    skipped = [name for name in config["run"] if studies[name]["skip_with_gpu"]]
    assert skipped == ["cpu_engines", "cpu_vision"]

    def cells(names: list[str], has_cuda: bool) -> set:
        return set().union(*(study_cells(studies[name], variants, has_cuda) for name in names))

    others = [name for name in config["run"] if name not in skipped]
    assert set(config_cells(config, has_cuda=True)) == cells(others, True)
    assert set(config_cells(config, has_cuda=False)) == cells(config["run"], False)
    assert cells(skipped, False) - cells(others, False), "the CPU studies add cells where there is no GPU"
