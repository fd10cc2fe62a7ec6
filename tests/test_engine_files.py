"""What an engine writes (exports, caches) stays in results/engines/ of the working directory: as the config
names it and with its symlinks resolved, checked with the config and again where the job runs."""

from __future__ import annotations

import copy
import os

import pytest
import yaml

from inferbench.catalog.engines import engine_files_dir, engine_files_problem
from inferbench.plan.config import ConfigError, validate_config
from tests.conftest import REPO

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    "value",
    ["/tmp/x", "results/engines/../cells/x", "results/cells/ort_genai", "results", "", "a\\b", "results/engines/a\0b"],
)
def test_a_folder_outside_results_engines_is_refused_by_name(value, tmp_path):
    problem = engine_files_problem(value, tmp_path)
    assert problem is not None and repr(value) in problem and "results/engines/" in problem


def test_a_folder_among_the_records_is_refused_so_clean_never_removes_an_export(tmp_path):
    # `clean` removes what under results/cells/ is not a readable record: an export kept there would go
    assert "among the records" in engine_files_problem("results/cells/mine", tmp_path)


def test_a_symlink_out_of_results_engines_is_refused_with_where_it_leads(tmp_path):
    (tmp_path / "results" / "engines").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "results" / "engines" / "link").symlink_to(tmp_path / "outside")
    problem = engine_files_problem("results/engines/link/genai", tmp_path)
    assert problem is not None and "through a symlink" in problem and str(tmp_path / "outside") in problem
    assert engine_files_problem("results/engines/genai", tmp_path) is None


def test_a_symlinked_results_folder_is_fine(tmp_path):
    (tmp_path / "elsewhere" / "engines").mkdir(parents=True)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "results").symlink_to(tmp_path / "elsewhere")  # a cluster's scratch, say
    assert engine_files_problem("results/engines/genai", tmp_path / "work") is None


def test_the_engine_checks_again_where_the_job_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert engine_files_dir("results/engines/vllm") == tmp_path.joinpath("results/engines/vllm").relative_to(tmp_path)
    (tmp_path / "results" / "engines").mkdir(parents=True)
    os.symlink("/tmp", tmp_path / "results" / "engines" / "vllm")  # made after the config was checked
    with pytest.raises(ValueError, match="through a symlink"):
        engine_files_dir("results/engines/vllm")


def test_the_config_check_refuses_a_model_dir_outside_results_engines():
    config = copy.deepcopy(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    config["engines"]["ort_genai"]["model_dir"] = "results/cells/genai"
    with pytest.raises(ConfigError, match=r"engines.ort_genai: model_dir: 'results/cells/genai' must be"):
        validate_config(config)


def test_an_export_killed_half_way_leaves_no_scratch_once_the_next_build_runs(tmp_path):
    from inferbench.engines.generation.exports import made_once
    from inferbench.machine.scratch import host_name

    killed = tmp_path / f"export-999999999@{host_name()}-abc"  # a builder SIGKILLed with its cell: 75 MB left
    (killed / "onnx").mkdir(parents=True)

    def build(scratch):
        (scratch / "out").mkdir()
        (scratch / "out" / "genai_config.json").write_text("{}")
        return scratch / "out"

    assert made_once(tmp_path / "model", "genai_config.json", build) == tmp_path / "model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"], "the killed build's scratch is gone too"
