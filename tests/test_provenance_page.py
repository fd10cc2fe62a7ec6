"""The first page's "Where these numbers come from" on small summaries built to tempt each defect of issue 69:
a copy without .git called "a clean tree", a dirty tree, two package hashes, a vLLM cell whose library went
unnamed, generated data shown as real, and random weights left unsaid."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd
import pytest

from inferbench.analysis.decisions import ClaimBasis
from inferbench.analysis.summary import read_summary_csv
from inferbench.core import environment
from inferbench.core.cells import CellKey, CellRecord
from inferbench.engines.registry import ENGINES
from inferbench.report.markdown import build_details, build_report
from inferbench.report.provenance import provenance_section
from tests.test_decisions import cell

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)

GENERATED = [{"dataset": "lendingclub", "source": "synthetic", "rows_used": 12011}]
REAL_HEART = {"dataset": "heart", "source": "uci", "rows_clean": 297, "rows_used": 297}


def page(rows: list[dict], stats: list[dict] | None = None, tmp_path: Path | None = None) -> str:
    """The provenance lines of ``rows``; through a summary CSV where ``tmp_path`` is given (as a report reads it)."""
    frame = pd.DataFrame(rows).assign(scenario="single")
    if tmp_path is not None:
        frame.to_csv(tmp_path / "summary.csv", index=False)
        frame = read_summary_csv(tmp_path / "summary.csv")
    return "\n".join(provenance_section(frame, {}, ClaimBasis.of(frame), stats or []))


def test_a_copy_without_git_reads_commit_unknown_never_a_clean_tree(tmp_path):
    text = page([cell(git_commit=None, git_dirty=False, code_package="0a1b2c3d4e5f")], tmp_path=tmp_path)
    assert "- Code: inferbench commit unknown, no git checkout." in text
    assert "clean tree" not in text and "Package hash `0a1b2c3d4e5f`, over every source file." in text


def test_a_dirty_tree_names_its_commit_with_uncommitted_changes(tmp_path):
    text = page([cell(git_commit="0123456789abcdef", git_dirty=True)], tmp_path=tmp_path)
    assert "- Code: inferbench 0123456789ab, with uncommitted changes. Package hash not recorded." in text
    clean = page([cell(git_commit="0123456789abcdef", git_dirty=False)], tmp_path=tmp_path)
    assert "0123456789ab, a clean tree." in clean and "uncommitted" not in clean


def test_cells_of_two_trees_and_two_package_hashes_are_each_counted():
    rows = [
        cell(git_commit="0123456789abcdef", git_dirty=False, code_package="aaaa11112222"),
        cell(git_commit="0123456789abcdef", git_dirty=False, code_package="aaaa11112222", batch_size=2),
        cell(git_commit=None, git_dirty=None, code_package="bbbb33334444", batch_size=4),
    ]
    text = page(rows)
    assert "0123456789ab, a clean tree: 2 cells; commit unknown, no git checkout: 1 cell." in text
    assert "2 package hashes, `aaaa11112222` for 2 cells, `bbbb33334444` for 1 cell" in text


def test_a_vllm_cell_names_vllm_and_its_other_libraries_but_no_engine_it_did_not_use():
    libraries = "numpy=2.1.0;onnxruntime=1.20.0;torch=2.5.1;transformers=4.46.0;vllm=0.6.3"
    row = cell(workload="llm:llama", engine="vllm", engine_impl="vllm", mode="generate", seq_len=64,
               libraries=libraries, torch="2.5.1", onnxruntime="1.20.0", openvino=None)  # fmt: skip
    software = next(line for line in page([row]).splitlines() if line.startswith("- Software"))
    assert "vllm 0.6.3" in software and "transformers 4.46.0" in software and "torch 2.5.1" in software
    assert "onnxruntime" not in software  # recorded, but the vLLM engine does not use it
    old = page([{**row, "libraries": None}])  # a summary written before the libraries column
    assert "torch 2.5.1; no version recorded for numpy, transformers, vllm." in old


def test_the_details_environment_lists_the_same_libraries_and_code():
    row = cell(engine="ort_cpu", engine_impl="ort_cpu", libraries="numpy=2.1.0;onnxruntime=1.20.0;torch=2.5.1",
               git_commit="12345e7", git_dirty=True, code_package="0a1b2c3d4e5f")  # fmt: skip
    details = build_details(pd.DataFrame([row]).assign(scenario="single"))
    assert "- inferbench commit 12345e7, with uncommitted changes; package hash `0a1b2c3d4e5f`" in details
    assert "numpy 2.1.0, onnxruntime 1.20.0, torch 2.5.1" in details


def test_generated_data_is_said_so_and_its_auc_is_no_quality_claim():
    rows = [cell(workload="mlp_lendingclub"), cell(workload="resnet50")]
    text = page(rows, GENERATED)
    assert "Dataset `lendingclub` is generated: synthetic rows in the real schema." in text
    assert "AUC of `mlp_lendingclub` is on generated data: it checks that training ran, not model quality." in text
    assert "Every other model has random weights." in text and "is real" not in text


def test_real_data_names_its_source_and_rows_and_a_missing_source_is_not_called_generated():
    rows = [cell(workload="mlp_lendingclub"), cell(workload="mlp_heart")]
    text = page(rows, [*GENERATED, REAL_HEART])
    assert "Dataset `heart` is real: UCI Heart Disease, Cleveland (303 rows), 297 rows used." in text
    assert "AUC of `mlp_heart` is on real data: held-out quality." in text
    assert "AUC of `mlp_lendingclub` is on generated data" in text
    unknown = page([cell(workload="mlp_heart")])  # no dataset stats given to the report
    assert "Dataset `heart` is of unrecorded source." in unknown and "generated" not in unknown


def test_random_weights_are_said_once_at_the_top_of_the_section():
    report = build_report(pd.DataFrame([cell()]).assign(scenario="single"), dataset_stats=GENERATED)
    section = report[report.index("## Where these numbers come from") :]
    first = section.splitlines()[2]
    assert first == (
        "- Data and weights: Every model has random weights. Parity: a cell's outputs match FP32 eager's on the "
        "same random weights."
    )
    assert section.count("random weights") == 2  # said once, and once in what parity means


def test_the_record_keeps_every_library_version_and_the_summary_one_column_of_them():
    key = CellKey("llm:llama", "vllm", "fp16", "cuda", 1, 64, 0)
    environment_ = {"libraries": {"vllm": "0.6.3", "torch": "2.5.1"}}
    row = CellRecord(key, "failed", "vllm", reason="boom", environment=environment_).flatten()
    assert row["libraries"] == "torch=2.5.1;vllm=0.6.3" and "torch" not in row  # one column, not one per library
    assert environment.parse_libraries(row["libraries"]) == environment_["libraries"]


def test_an_engines_libraries_include_those_it_imports_itself_by_their_distribution(monkeypatch):
    assert {"vllm", "torch", "transformers"} <= set(environment.engine_libraries(ENGINES["vllm"]))
    assert "vllm" not in ENGINES["vllm"].libraries  # the declaration alone would miss it
    fake = {"onnxruntime-genai-cuda": "0.5.0"}
    monkeypatch.setattr(environment, "_version", fake.get)
    assert environment._module_version("onnxruntime_genai") == "0.5.0"
    libraries = environment.engine_libraries(ENGINES["ort_genai"])
    assert environment._libraries(libraries)["onnxruntime_genai"] == "0.5.0"


@pytest.fixture
def fresh_git(monkeypatch):
    """The git answers recomputed for a patched package path, and again after it."""
    caches = (environment._in_checkout, environment._git_commit, environment._git_dirty)
    for cache in caches:
        cache.cache_clear()
    yield monkeypatch
    for cache in caches:
        cache.cache_clear()


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True)


def test_a_copy_without_git_inside_another_repository_records_no_commit(tmp_path, fresh_git):
    home = tmp_path / "home"
    subprocess.run(["git", "init", "-q", str(home)], check=True)
    (home / "notes.txt").write_text("a\n")
    _git(home, "add", "notes.txt")
    _git(home, "commit", "-qm", "c")
    (home / "notes.txt").write_text("b\n")  # the outer repository is dirty: its state is not the copy's
    copy = home / "copy" / "inferbench"
    copy.mkdir(parents=True)
    (copy / "__init__.py").write_text("")
    fresh_git.setattr(environment.inferbench, "__file__", str(copy / "__init__.py"))
    assert environment._git_commit() is None and environment._git_dirty() is None


def test_a_checkout_with_a_new_untracked_module_is_dirty(tmp_path, fresh_git):
    repo = tmp_path / "repo"
    package = repo / "inferbench"
    package.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (package / "__init__.py").write_text("")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "c")
    fresh_git.setattr(environment.inferbench, "__file__", str(package / "__init__.py"))
    assert environment._git_commit() and environment._git_dirty() is False
    (package / "new.py").write_text("x = 1\n")  # code the commit lacks
    environment._git_dirty.cache_clear()
    assert environment._git_dirty() is True
