"""Any timm model or transformers encoder by name: `timm:<name>` and `hf:<model type>` in a study
run like the declared workloads, with no code change; a name that does not exist stops the run
before any job, with the closest names."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import yaml

from inferbench.catalog.workloads import ordered, workload_info
from inferbench.models.registry import create_model
from inferbench.plan.config import ConfigError, validate_config
from tests.conftest import REPO

BASE = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def test_family_workloads_have_a_kind_and_come_after_the_declared_ones():
    assert workload_info("timm:convnext_tiny").kind == "vision"
    assert workload_info("hf:roberta").has_seq_len
    assert ordered(["timm:convnext_tiny", "bert_base", "hf:roberta", "mlp_heart"]) == [
        "mlp_heart", "bert_base", "hf:roberta", "timm:convnext_tiny",
    ]  # fmt: skip
    with pytest.raises(KeyError, match=r"allowed values: .*timm:<name>, hf:<name>"):
        workload_info("resnet18")


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ("timm:convnxt_tiny", "timm has no model 'convnxt_tiny'; did you mean convnext_tiny"),
        ("hf:robrta", "transformers has no model type 'robrta'; did you mean roberta"),
        ("resnet18", "'resnet18' is not allowed; allowed values: mlp_lendingclub"),
    ],
)
def test_a_name_that_does_not_exist_stops_the_run_with_the_closest_names(workload, message):
    config = copy.deepcopy(BASE)
    config["studies"]["vision"]["workloads"] = [workload]
    config["run"] = ["vision"]
    with pytest.raises(ConfigError, match=f"studies.vision.workloads\\[0\\]: {message}"):
        validate_config(config)


def test_a_library_name_is_looked_up_only_where_the_run_measures_it():
    """A study the run leaves out is checked for form only: looking its names up imported the library
    (transformers: 4 s) in every dry run."""
    config = copy.deepcopy(BASE)
    config["studies"]["vision"]["workloads"] = ["hf:robrta"]
    assert "vision" not in config["run"]
    validate_config(config)
    config["studies"]["vision"]["workloads"] = ["robrta"]
    with pytest.raises(ConfigError, match="'robrta' is not allowed"):
        validate_config(config)


def test_an_hf_encoder_builds_from_its_model_type_with_arch_overrides():
    spec = create_model("hf:roberta", num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64)
    assert spec.name == "hf:roberta"
    assert [i.name for i in spec.inputs] == ["input_ids", "attention_mask"]
    assert spec.inputs[0].high == 50265  # roberta's vocabulary: the token ids drawn for its inputs
    assert spec.module.model.config.num_hidden_layers == 1


@pytest.mark.slow
def test_timm_convnext_tiny_runs_on_the_cpu_with_no_code_change(tmp_path):
    config = {
        "run": ["any_model"],
        "studies": {
            "any_model": {
                "workloads": ["timm:convnext_tiny"],
                "engines": ["torch_eager"],
                "devices": ["cpu"],
                "batch_sizes": [1],
                "threads": [2],
            }
        },
        "engines": {"torch_eager": {"engine": "torch_eager"}},
        "measure": {"warmup_s": 0.0, "min_time_s": 0.0, "min_iters": 3},
        "profile": {"cells": []},
    }
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", "--snakefile", str(REPO / "Snakefile")],
        cwd=tmp_path, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    record = tmp_path / "results/cells/timm:convnext_tiny/torch_eager-fp32/cpu/b1-s0-t2.json"
    assert '"status": "ok"' in record.read_text()
    assert (tmp_path / "results/plots/timm:convnext_tiny/throughput.png").exists()
    assert "**timm:convnext_tiny**" in (tmp_path / "results/report.md").read_text()


@pytest.mark.parametrize("key", ["checkpoint_path", "pretrained", "pretrained_cfg_overlay"])
def test_a_timm_arch_cannot_load_weights_from_a_file_or_hub(key):
    with pytest.raises(ValueError, match=f"arch may not set {key}"):
        create_model("timm:resnet18", **{key: "/tmp/evil.pth"})


def test_a_declared_workload_is_one_entry_naming_the_model_it_is_built_as(monkeypatch):
    from inferbench.catalog import workloads
    from inferbench.catalog.workloads import WorkloadInfo
    from inferbench.models import create_model

    entry = WorkloadInfo("vision", "ResNet-18 (timm), random weights", model="timm:resnet18")
    monkeypatch.setitem(workloads.WORKLOADS, "resnet18", entry)
    spec = create_model("resnet18", num_classes=10)
    assert spec.name == "resnet18", "named as the workload, so its records and meta say resnet18"
    assert spec.module.fc.out_features == 10 and spec.inputs[0].shape == ("batch", 3, 224, 224)
