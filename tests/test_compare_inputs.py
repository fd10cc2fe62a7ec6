"""Issue 56, item 2: what `inferbench compare`, its `--out-leases` and config `report.lease_spread` are given
is checked, and their outputs never replace what is not a regular file of their own.

compare: a cell repeated in a summary (run A given as two copies read "20 cells ok in both runs" for 10 and
`--out-leases` wrote `cells: 20`), a repeated column (every cell "faster"), a negative, infinite or NaN
latency and a batch of 1e30 (dropped without a word) are refused by name. A lease spread that is negative,
not a number, absurdly large, not an object, a directory or missing is refused naming the config key, the
value and what is allowed. atomic_path, which every writer of the project goes through, refuses to replace a
symbolic link, a directory or a device (a pipe stands in for one here) with a regular file.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from inferbench.analysis.compare_runs import Run
from inferbench.analysis.leases import LEASE_SPREAD_ALLOWED, MAX_SD_LOG, LeaseSpread, lease_spread_problems
from inferbench.cli.main import main as inferbench_main
from inferbench.core.errors import UserError
from inferbench.core.fsutil import atomic_path, write_json
from inferbench.report.compare import compare_runs

pytestmark = pytest.mark.fast  # pure logic: summaries written by hand, no model, no workflow

#: the cells of the hand-made summary: four device-bound GPU cells (a class of at least MIN_CELLS, so that
#: the two runs give a spread between them), each measured in three processes
BATCHES = (1, 2, 4, 8)


def a_summary(scale: float = 1.0) -> pd.DataFrame:
    rows = []
    for batch in BATCHES:
        p50 = batch * scale
        rows.append(
            {
                "workload": "resnet50",
                "engine": "torch_eager",
                "precision": "fp32",
                "device": "cuda",
                "batch_size": batch,
                "seq_len": 0,
                "threads": 0,
                "scenario": "single",
                "status": "ok",
                "engine_impl": "torch_eager",
                "timing": "device",
                "bound": "device",
                "latency_p50_ms": p50,
                "e2e_latency_p50_ms": p50 * 1.1,
                "p50_by_process_ms": f"{p50 * 0.99:.6g};{p50:.6g};{p50 * 1.01:.6g}",
                "n_iters": 400,
                "throughput_per_s": 1e3 * batch / p50,
            }
        )
    return pd.DataFrame(rows)


def written(tmp_path: Path, name: str, summary: pd.DataFrame) -> Path:
    path = tmp_path / name
    summary.to_csv(path, index=False)
    return path


def refused(path_a: Path, path_b: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> str:
    """The message compare refuses two runs with: a UserError from the function, and from the CLI the same
    message on stderr, exit status 2, no traceback."""
    with pytest.raises(UserError) as error:
        compare_runs(path_a, path_b)
    capsys.readouterr()
    assert inferbench_main(["compare", str(path_a), str(path_b), *flags]) == 2
    err = capsys.readouterr().err
    assert str(error.value) in err and "Traceback" not in err
    return str(error.value)


# --- cells and columns counted once -----------------------------------------------------------------


def test_two_distinct_runs_are_compared_and_their_spread_counts_each_cell_once(tmp_path, capsys):
    """The positive control of the refusals below: 4 cells, 4 compared, ``cells: 4`` in the lease file."""
    run_a, run_b = written(tmp_path, "a.csv", a_summary()), written(tmp_path, "b.csv", a_summary(1.1))
    leases = tmp_path / "leases.json"
    assert inferbench_main(["compare", str(run_a), str(run_b), "--out-leases", str(leases)]) == 0
    assert "4 cells ok in both runs" in capsys.readouterr().out
    assert json.loads(leases.read_text())["cells"] == {"device": 4}


@pytest.mark.parametrize("other_p50", [None, 7.5], ids=["identical copy", "another p50"])
def test_a_cell_repeated_in_a_summary_is_refused_naming_the_cell_its_rows_and_the_fix(tmp_path, capsys, other_p50):
    summary = a_summary()
    repeated = pd.concat([summary, summary.iloc[[0]]], ignore_index=True)
    if other_p50 is not None:
        repeated.loc[len(summary), "latency_p50_ms"] = other_p50
    csv = written(tmp_path, "repeated.csv", repeated)
    message = refused(csv, written(tmp_path, "b.csv", a_summary()), capsys)
    p50s = "1, 7.5" if other_p50 else "1, 1"
    assert message.startswith(
        f"{csv}: cell resnet50/torch_eager-fp32/cuda/b1-s0-t0 (scenario single) is in rows 1, 5 (p50 {p50s} ms)"
    )
    assert "it is the only cell repeated" in message and "Keep one row per cell" in message


def test_a_run_given_as_two_copies_of_its_summary_is_refused_and_nothing_is_written(tmp_path, capsys):
    """The issue's case: "20 cells ok in both runs" for 10 cells, and `cells: 20` in the lease file."""
    summary = a_summary()
    doubled = written(tmp_path, "doubled.csv", pd.concat([summary, summary], ignore_index=True))
    outputs = {flag: tmp_path / name for flag, name in (("--out-leases", "leases.json"), ("--out-csv", "c.csv"),
                                                        ("--out-md", "c.md"))}  # fmt: skip
    flags = [str(part) for flag, path in outputs.items() for part in (flag, path)]
    message = refused(doubled, written(tmp_path, "b.csv", a_summary(1.1)), capsys, *flags)
    assert f"{len(BATCHES)} cells are repeated" in message
    assert not any(path.exists() for path in outputs.values())


def test_a_column_named_twice_in_a_summary_header_is_refused_by_name(tmp_path, capsys):
    """pandas reads the second as ``latency_p50_ms.1``: compare judged the first, without a word."""
    summary = a_summary().assign(second=lambda frame: frame["latency_p50_ms"] / 2)
    text = summary.to_csv(index=False).replace(",second\n", ",latency_p50_ms\n", 1)
    csv = tmp_path / "twice.csv"
    csv.write_text(text)
    column = list(summary.columns).index("latency_p50_ms") + 1
    message = refused(csv, written(tmp_path, "b.csv", a_summary()), capsys)
    assert f"{csv} names a column more than once in its header ('latency_p50_ms' in columns {column}, " in message
    assert "Keep one column of each name" in message


# --- numbers in their range ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("column", "value", "what"),
    [
        ("latency_p50_ms", "-1.0", "is -1.0, not a latency in ms above 0"),
        ("latency_p50_ms", "0", "is 0.0, not a latency in ms above 0"),
        ("latency_p50_ms", "nan", "is 'nan', not a number"),
        ("latency_p50_ms", "inf", "is inf, not a latency in ms above 0 and at most 86,400,000"),
        ("latency_p50_ms", "1e308", "is 1e+308, not a latency in ms above 0 and at most 86,400,000"),
        ("latency_p50_ms", "", "is empty, not a number: the cell measured (its status says so), so it has a p50"),
        ("e2e_latency_p50_ms", "-3", "not a latency in ms above 0"),
        ("batch_size", "1e30", "is 1e+30, not a whole number from 1 to 1,048,576"),
        ("batch_size", "2.5", "is 2.5, not a whole number from 1 to 1,048,576"),
        ("batch_size", "0", "not a whole number from 1 to 1,048,576"),
        ("seq_len", "-1", "not a whole number from 0 to 1,048,576"),
        ("threads", "", "is empty, not a whole number from 0 to 1,024"),
        ("throughput_per_s", "-5", "is -5.0, not a finite rate per second from 0"),
        ("throughput_per_s", "inf", "is inf, not a finite rate per second from 0"),
        ("n_iters", "0.5", "is 0.5, not a whole number of calls from 1"),
        ("p50_by_process_ms", "1.0;-1.0;1.0", "is '1.0;-1.0;1.0', not ';'-separated numbers"),
        ("p50_by_process_ms", "1.0;inf", "is '1.0;inf', not ';'-separated numbers"),
        ("workload", "", "is empty, not a name"),
    ],
)
def test_a_number_out_of_its_range_is_refused_naming_file_row_cell_column_and_value(
    tmp_path, capsys, column, value, what
):
    summary = a_summary().astype({column: object})
    summary.loc[2, column] = value
    csv = tmp_path / "summary.csv"
    summary.to_csv(csv, index=False)
    message = refused(csv, written(tmp_path, "b.csv", a_summary()), capsys)
    assert message.startswith(f"{csv}: column {column} of row 3 (cell "), message
    assert what in message and "correct or empty that field" in message


def test_every_cell_of_a_checked_summary_is_compared_none_dropped(tmp_path):
    """What passes the checks is compared whole: each cell, at its own p50 (a cell skipped for a p50 that
    is not above 0 was the silent drop)."""
    cells, _, _, _ = compare_runs(written(tmp_path, "a.csv", a_summary()), written(tmp_path, "b.csv", a_summary(2)))
    assert len(cells) == len(BATCHES) and np.allclose(cells["ratio"], 2)
    assert sorted(Run.load(tmp_path / "a.csv").summary["batch_size"]) == list(BATCHES)


# --- report.lease_spread ------------------------------------------------------------------------------


def a_spread(tmp_path: Path, data: object, name: str = "leases.json") -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


GOOD = {"sd_log": {"host": math.log(1.3), "cpu": 0.05}, "cells": {"host": 20, "cpu": 4}, "leases": 2}


def test_a_lease_spread_written_by_compare_and_none_pass(tmp_path):
    LeaseSpread({"device": 0.02}, {"device": 4}, 3).save(tmp_path / "saved.json")
    assert lease_spread_problems(str(tmp_path / "saved.json")) == []
    assert lease_spread_problems(a_spread(tmp_path, GOOD)) == []
    assert lease_spread_problems(None) == []
    assert LeaseSpread.load(a_spread(tmp_path, GOOD)) == LeaseSpread(GOOD["sd_log"], GOOD["cells"], 2)


@pytest.mark.parametrize(
    ("contents", "what"),
    [
        ({**GOOD, "sd_log": {"host": -0.1, "cpu": 0.05}}, "sd_log host is -0.1, not a finite spread from 0 to 2.3"),
        ({**GOOD, "sd_log": {"host": "abc", "cpu": 0.05}}, "sd_log host is 'abc', not a finite spread"),
        (
            '{"sd_log": {"host": NaN, "cpu": 0.05}, "cells": {"host": 20, "cpu": 4}, "leases": 2}',
            "sd_log host is nan, not a finite spread",
        ),
        ({**GOOD, "sd_log": {"host": 1e308, "cpu": 0.05}}, "sd_log host is 1e+308, not a finite spread"),
        ({**GOOD, "sd_log": {"host": [0.1], "cpu": 0.05}}, "sd_log host is [0.1], not a finite spread"),
        ({**GOOD, "sd_log": {"host": True, "cpu": 0.05}}, "sd_log host is True, not a finite spread"),
        ({**GOOD, "sd_log": {"gpu": 0.1}, "cells": {"gpu": 4}}, "sd_log names class 'gpu', not one of device, host"),
        ({**GOOD, "sd_log": {}, "cells": {}}, "sd_log is {}, not an object of one spread per class"),
        ({**GOOD, "cells": {"host": 20}}, "cells is {'host': 20}, not an object of one count per class of sd_log"),
        ({**GOOD, "cells": {"host": 1, "cpu": 4}}, "cells host is 1, not a whole number from 3"),
        ({**GOOD, "leases": 1}, "leases is 1, not a whole number from 2"),
        ({**GOOD, "leases": "2"}, "leases is '2', not a whole number from 2"),
        ({**GOOD, "extra": 1}, "has keys other than sd_log, cells and leases: ['extra']"),
        ('"abc"', "holds 'abc' (str), not an object with sd_log, cells and leases"),
        ("NaN", "holds nan (float), not an object"),
        ("1e308", "holds 1e+308 (float), not an object"),
        ("[0.1, 0.2]", "holds [0.1, 0.2] (list), not an object"),
        ("abc", "is not JSON (Expecting value: line 1 column 1"),
        ("", "is not JSON"),
    ],
)
def test_a_lease_spread_file_of_the_wrong_shape_is_refused_naming_key_value_and_what_is_allowed(
    tmp_path, contents, what
):
    path = a_spread(tmp_path, contents)
    problems = lease_spread_problems(path)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"report.lease_spread: {path!r} ") and what in problems[0]
    assert problems[0].endswith(LEASE_SPREAD_ALLOWED) and f"from 0 to {MAX_SD_LOG:.3g}" in LEASE_SPREAD_ALLOWED
    with pytest.raises(UserError, match="is not a spread between leases") as error:  # where a report loads it
        LeaseSpread.load(path)
    assert str(error.value).startswith(f"{path} is not a spread between leases: ") and what in str(error.value)


def test_a_lease_spread_that_is_no_file_is_refused_naming_what_it_is(tmp_path):
    os.mkfifo(tmp_path / "pipe.json")  # reading it would wait forever for a writer
    (tmp_path / "folder.json").mkdir()
    (tmp_path / "huge.json").write_text(" " * (2 << 20))
    for value, what in (
        (str(tmp_path / "missing.json"), "does not exist"),
        (str(tmp_path / "folder.json"), "is a directory, not a file"),
        (str(tmp_path / "pipe.json"), "is not a regular file (a device, a pipe or a socket)"),
        (str(tmp_path / "huge.json"), "holds 2,097,152 bytes, far more than a spread between leases (a few hundred)"),
    ):
        assert lease_spread_problems(value) == [f"report.lease_spread: {value!r} {what}. {LEASE_SPREAD_ALLOWED}"]
    for value in (12, 0.5, ["a.json"], {"sd_log": {}}, True, ""):
        assert lease_spread_problems(value) == [
            f"report.lease_spread: {value!r} is not a path to a file. {LEASE_SPREAD_ALLOWED}"
        ]


def test_the_report_verb_refuses_a_bad_lease_spread_by_name_without_a_traceback(tmp_path, capsys):
    summary = written(tmp_path, "summary.csv", a_summary())
    bad = a_spread(tmp_path, {**GOOD, "sd_log": {"host": -1.0, "cpu": 0.05}})
    code = inferbench_main(["report", "--summary", str(summary), "--out", str(tmp_path / "report.md"),
                            "--lease-spread", bad])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and f"{bad} is not a spread between leases: sd_log host is -1.0" in err and "Traceback" not in err
    assert not (tmp_path / "report.md").exists()


def test_the_lease_spread_check_imports_nothing_heavy_until_a_file_is_given():
    """The workflow's parse calls it beside the config's checks: a run without a lease spread pays no pandas."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom inferbench.analysis.leases import lease_spread_problems\n"
        "assert lease_spread_problems(None) == []\nprint('pandas' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


# --- outputs: regular files only ------------------------------------------------------------------------


def test_atomic_path_replaces_a_regular_file_and_writes_through_a_linked_folder(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real")  # results/ on another disk: a folder, not the output
    target = tmp_path / "linked" / "out.txt"
    for text in ("first", "second"):
        with atomic_path(target) as tmp:
            tmp.write_text(text)
    assert (tmp_path / "real" / "out.txt").read_text() == "second"


@pytest.mark.parametrize("kind", ["symbolic link", "directory", "pipe"])
def test_atomic_path_refuses_to_replace_what_is_not_a_regular_file(tmp_path, kind):
    outside = tmp_path / "outside.txt"
    outside.write_text("not yours")
    target = tmp_path / "out.txt"
    if kind == "symbolic link":
        target.symlink_to(outside)
    elif kind == "directory":
        target.mkdir()
    else:
        os.mkfifo(target)  # a device node's stand-in: mknod needs root
    with pytest.raises(UserError) as error, atomic_path(target) as tmp:
        tmp.write_text("output")
    assert str(error.value).startswith(f"{target} is a {kind}")
    assert f"refuses to replace a {kind}" in str(error.value)
    assert target.is_symlink() if kind == "symbolic link" else not target.is_file()
    assert outside.read_text() == "not yours" and sorted(p.name for p in tmp_path.iterdir()) == [
        "out.txt",
        "outside.txt",
    ]


def test_atomic_path_refuses_a_link_made_while_it_wrote(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("not yours")
    target = tmp_path / "out.txt"
    with pytest.raises(UserError, match="is a symbolic link"), atomic_path(target) as tmp:
        tmp.write_text("output")
        target.symlink_to(outside)
    assert target.is_symlink() and outside.read_text() == "not yours"
    write_json(tmp_path / "plain.json", {"a": 1})  # every writer goes through it: a plain target still works
    assert json.loads((tmp_path / "plain.json").read_text()) == {"a": 1}


@pytest.mark.parametrize("flag", ["--out-csv", "--out-md", "--out-leases"])
def test_compare_refuses_an_output_that_is_a_link_a_folder_or_a_run_before_any_work(tmp_path, capsys, flag):
    run_a, run_b = written(tmp_path, "a.csv", a_summary()), written(tmp_path, "b.csv", a_summary(1.1))
    before = run_a.read_text()
    link = tmp_path / "link"
    link.symlink_to(run_b)
    (tmp_path / "folder").mkdir()
    for output, what in (
        (link, f"{flag} {link} is a symbolic link (to {run_b}), not a regular file"),
        (tmp_path / "folder", f"{flag} {tmp_path / 'folder'} is a directory, not a regular file"),
        (run_a, f"{flag} {run_a} is also RUN_A {run_a}: it would be overwritten"),
    ):
        assert inferbench_main(["compare", str(run_a), str(run_b), flag, str(output)]) == 2
        captured = capsys.readouterr()
        assert what in captured.err and "Traceback" not in captured.err
        assert captured.out == ""  # refused before the comparison was made
    assert link.is_symlink() and (tmp_path / "folder").is_dir() and run_a.read_text() == before
    assert inferbench_main(["compare", str(run_a), str(run_b), "--out-csv", str(tmp_path / "c.csv"),
                            "--out-md", str(tmp_path / "c.csv")]) == 2  # fmt: skip
    assert "--out-md" in capsys.readouterr().err and not (tmp_path / "c.csv").exists()
