"""Which committed result is current (issue 69, item 9): a newer run on the same machine that measured every
cell of an older one supersedes it, whatever the folders are called; a run of another grid, or on another
GPU, supersedes nothing."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from inferbench.cli.results_index import build_index

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)

H100 = "NVIDIA H100 80GB HBM3"


def run(results: Path, folder: str, created: str, cells: list[tuple[str, str, int]], gpu: str = H100) -> None:
    """A committed summary: one row per (workload, engine, batch) cell, all measured at ``created``."""
    rows = [
        {"workload": w, "engine": e, "engine_impl": e, "precision": "fp32", "device": "cuda", "batch_size": b,
         "seq_len": 0, "threads": 0, "scenario": "single", "status": "ok", "gpu": gpu, "cpu": "Xeon",
         "created_at": created}
        for w, e, b in cells
    ]  # fmt: skip
    (results / folder).mkdir(parents=True)
    pd.DataFrame(rows).to_csv(results / folder / "summary.csv", index=False)


def statuses(results: Path) -> dict[str, str]:
    """Each result's folder and its status column."""
    rows = [line.strip("|").split("|") for line in build_index(results).splitlines() if line.startswith("| [")]
    return {row[0].strip().split("]")[0][1:]: row[-1].strip() for row in rows}


DEFAULT = [("resnet50", "ort_cuda", 1), ("resnet50", "ort_cuda", 8)]


def test_a_newer_run_of_the_same_grid_supersedes_an_older_one_whatever_its_folder(tmp_path):
    run(tmp_path, "h100/default/2026-11-27", "2026-11-27T10:00:00+00:00", DEFAULT)
    run(tmp_path, "h100/readme_install", "2026-11-23T10:00:00+00:00", DEFAULT)
    found = statuses(tmp_path)
    assert found["h100/default/2026-11-27"] == "**current**"
    assert found["h100/readme_install"] == "superseded by [h100/default/2026-11-27](h100/default/2026-11-27/)"


def test_a_larger_grid_supersedes_a_smaller_one_and_never_the_other_way(tmp_path):
    run(tmp_path, "h100/small", "2026-11-23T10:00:00+00:00", DEFAULT[:1])
    run(tmp_path, "h100/large", "2026-11-24T10:00:00+00:00", DEFAULT)
    run(tmp_path, "h100/later_small", "2026-11-25T10:00:00+00:00", DEFAULT[:1])
    found = statuses(tmp_path)
    assert found["h100/small"].startswith("superseded by [h100/later_small]")  # the newest that covers it
    assert found["h100/large"] == "**current**"  # the later run measured only one of its two cells
    assert found["h100/later_small"] == "**current**"


def test_another_grid_or_another_gpu_supersedes_nothing(tmp_path):
    run(tmp_path, "h100/default", "2026-11-23T10:00:00+00:00", DEFAULT)
    run(tmp_path, "h100/default_llm", "2026-11-28T10:00:00+00:00", [("llm:llama", "vllm", 1)])
    run(tmp_path, "h200/default", "2026-11-28T10:00:00+00:00", DEFAULT, gpu="NVIDIA H200")
    assert set(statuses(tmp_path).values()) == {"**current**"}


def test_a_grid_read_back_with_gaps_is_the_same_grid(tmp_path):
    """A batch column with an empty field reads back as floats (8.0): the cell is still batch 8."""
    run(tmp_path, "h100/old", "2026-11-23T10:00:00+00:00", DEFAULT)
    run(tmp_path, "h100/new", "2026-11-24T10:00:00+00:00", [*DEFAULT, ("bert_base", "ort_cuda", 1)])
    new = tmp_path / "h100/new/summary.csv"
    frame = pd.read_csv(new)
    frame.loc[len(frame)] = {**frame.iloc[0].to_dict(), "batch_size": None, "status": "failed"}
    frame.to_csv(new, index=False)
    assert statuses(tmp_path)["h100/old"].startswith("superseded by [h100/new]")
