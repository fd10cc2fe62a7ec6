"""The cell record schema, paths and atomic writes."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from inferbench.catalog.scenarios import scenario_info
from inferbench.core.cells import SCHEMA_VERSION, CellKey, CellRecord, record_section
from inferbench.core.fsutil import write_atomic, write_json

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)

KEY = CellKey("bert_base", "ort_cpu", "fp32", "cpu", 8, 128, 2)


def test_path_names_every_dimension_and_round_trips():
    assert KEY.relpath == "bert_base/ort_cpu-fp32/cpu/b8-s128-t2.json"
    assert CellKey.from_path(f"results/cells/{KEY.relpath}") == KEY
    with pytest.raises(ValueError):
        CellKey.from_path("results/cells/bert_base/ort_cpu/cpu/b8.json")


def test_record_round_trip(tmp_path):
    record = CellRecord(
        KEY,
        "ok",
        "ort_cpu",
        timing="device",
        latency_ms={"p50": 1.5, "p99": None},
        throughput_per_s=5333.3,
        n_iters=40,
        memory_mb={"host_peak_rss": 900.0},
        cold_start_s={"prepare": 1.2, "first_call": 0.1},
    )
    record.save(tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["cell"]["cell_id"] == "bert_base/ort_cpu-fp32/cpu/b8-s128-t2"
    assert CellRecord.load(tmp_path / "r.json") == record
    row = record.flatten()
    assert row["latency_p50_ms"] == 1.5 and row["latency_p99_ms"] is None
    assert row["latency_per_item_p50_ms"] == pytest.approx(1.5 / 8)
    assert row["prepare_s"] == 1.2 and row["batch_size"] == 8 and row["status"] == "ok"


def test_record_validation():
    with pytest.raises(ValueError, match="status must be one of"):
        CellRecord(KEY, "great", "ort_cpu")
    with pytest.raises(ValueError, match="needs a reason"):
        CellRecord(KEY, "unavailable", "ort_cpu")
    data = CellRecord(KEY, "failed", "ort_cpu", reason="boom").to_dict()
    data["schema_version"] = 0
    with pytest.raises(ValueError, match="schema_version"):
        CellRecord.from_dict(data)


#: the record's fields at SCHEMA_VERSION: adding, removing or renaming one raises the version
FIELDS_OF_VERSION = {
    4: ["key", "status", "engine_impl", "reason", "mode", "timing", "timing_description", "clock", "latency_ms",
        "latency_ci95_ms", "cv", "end_to_end", "throughput_per_s", "items_per_call", "input_batches", "n_iters",
        "warmup_iters", "measured_s", "measured_windows_unix", "measuring", "parity", "memory_mb", "gpu_telemetry",
        "host_telemetry", "computation", "bound", "repeats", "cold_start_s", "sections", "launcher",
        "engine", "environment", "options", "code", "created_at", "schema_version"],
}  # fmt: skip


def test_the_schema_version_changes_with_the_fields():
    fields = [f.name for f in dataclasses.fields(CellRecord)]
    assert fields == FIELDS_OF_VERSION[SCHEMA_VERSION], "the record's fields changed: raise SCHEMA_VERSION"


def test_a_version_1_record_loads_without_its_code_and_the_summary_names_the_code(tmp_path):
    data = CellRecord(KEY, "failed", "ort_cpu", reason="boom").to_dict()
    data.pop("code")
    data["schema_version"] = 1
    old = CellRecord.from_dict(data)
    assert old.code == {} and old.flatten()["code_job"] is None and old.flatten()["schema_version"] == 1
    new = CellRecord(KEY, "failed", "ort_cpu", reason="boom", code={"job": "0123456789ab", "package": "00ff"})
    row = new.flatten()
    assert (row["code_job"], row["code_package"], row["schema_version"]) == ("0123456789ab", "00ff", SCHEMA_VERSION)


def test_the_package_source_hash_follows_the_source(tmp_path, monkeypatch):
    import inferbench
    from inferbench.core import environment

    package = tmp_path / "inferbench"
    package.mkdir()
    (package / "__init__.py").write_text("")
    monkeypatch.setattr(inferbench, "__file__", str(package / "__init__.py"))
    environment.package_source_hash.cache_clear()
    first = environment.package_source_hash()
    (package / "__init__.py").write_text("x = 1\n")
    environment.package_source_hash.cache_clear()
    assert environment.package_source_hash() != first and len(first) == 12
    environment.package_source_hash.cache_clear()


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    path = tmp_path / "out.json"
    write_json(path, {"v": 1})

    def broken(tmp):
        tmp.write_text('{"v": 2, "half')
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        write_atomic(path, broken)
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # no temporary left behind


def test_fingerprint_says_when_the_checkout_differs_from_its_commit(tmp_path, monkeypatch):
    import subprocess

    from inferbench.core import environment

    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "f.py").write_text("a = 1\n")
    subprocess.run([*git, "add", "f.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    monkeypatch.setattr(environment.inferbench, "__file__", str(repo / "f.py"))
    environment._git_dirty.cache_clear()
    assert environment._git_dirty() is False
    (repo / "f.py").write_text("a = 2\n")
    environment._git_dirty.cache_clear()
    assert environment._git_dirty() is True
    environment._git_dirty.cache_clear()


def test_fingerprint_names_the_onnxruntime_that_was_imported(monkeypatch):
    # onnxruntime and onnxruntime-gpu install one module; with both present, the imported one ran
    import types

    from inferbench.core.environment import fingerprint

    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    env = fingerprint(include_gpu=False, libraries=("onnxruntime",))
    assert env["python"] and env["cpu_count"] >= 1 and "numpy" in env["libraries"]
    assert "torch" not in env["libraries"], "only the libraries asked for, beside the harness's"
    assert env["thread_env"]["OMP_NUM_THREADS"] == "3" and env["inferbench"] and env["git_commit"]
    assert env["git_dirty"] in (True, False)  # a clean clone in CI, edits in progress here
    monkeypatch.setitem(sys.modules, "onnxruntime", types.SimpleNamespace(__version__="9.9.9-gpu"))
    assert fingerprint(include_gpu=False, libraries=("onnxruntime",))["libraries"]["onnxruntime"] == "9.9.9-gpu"


@pytest.mark.parametrize(
    ("scenario", "mode", "field", "section"),
    [
        ("server", "inference", "serving", "serving"),
        ("offline", "inference", "serving", "serving"),
        ("llm_load", "generate", "serving", "llm_load"),
        ("single", "generate", "generation", "generation"),
        ("llm_load", "generate", "scenario_section", "llm_load"),
    ],
)
def test_a_record_before_schema_4_reads_its_scenarios_figures_as_its_section(scenario, mode, field, section):
    key = dataclasses.replace(KEY, scenario=scenario)
    data = CellRecord(key, "failed", "x", reason="boom", mode=mode).to_dict()
    data.pop("sections")
    data |= {field: {"figure": 1}, "schema_version": 3}
    record = CellRecord.from_dict(data)
    assert record.sections == {section: {"figure": 1}}
    assert record_section(data, section) == {"figure": 1} and record_section(record.to_dict(), section) == {"figure": 1}
    assert record_section(data, "elsewhere") is None


def test_every_committed_record_reads_with_the_section_it_had():
    """The records under docs/results, each of an older schema: every one loads (the report reads them beside
    their summaries, skipping what it cannot read) with its scenario's figures under its section."""
    paths = sorted(Path(__file__).parents[1].glob("docs/results/**/cells/**/*.json"))
    assert len(paths) > 100
    for path in paths:
        data = json.loads(path.read_text())
        record = CellRecord.from_dict(data)
        old = {name: data[name] for name in ("serving", "generation") if data.get(name)}
        assert list(record.sections.values()) == list(old.values()), path
        if old:
            assert list(record.sections) == [scenario_info(record.key.scenario, record.mode).section], path


def test_a_scenario_writes_its_figures_under_its_folder_s_name():
    from inferbench.catalog.scenarios import GENERATION, SCENARIOS
    from inferbench.scenarios import generation, llm_load, serving

    assert SCENARIOS["server"].section == SCENARIOS["offline"].section == serving.SECTION, "one folder, one section"
    assert SCENARIOS["llm_load"].section == llm_load.SECTION and GENERATION.section == generation.SECTION
