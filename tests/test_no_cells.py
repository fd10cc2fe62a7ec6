"""A study with no cells on this machine says why, per workload and engine variant."""

from __future__ import annotations

import copy

import pytest
import yaml

from inferbench.plan.config import validate_config
from inferbench.plan.grid import config_cells, no_cells_message
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
