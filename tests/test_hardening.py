"""Bad input and faults, as an attacker or an unlucky user brings them (issue 16): no shell from the
config, no code from a checkpoint, no silently wrong data, nothing stuck behind a damaged file,
nothing measured thrown away, no process outliving its job. Text in reports: test_hardening_report.py."""

from __future__ import annotations

import copy
import errno
import json
import os
import pickle
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from inferbench.analysis.summary import summary_frame
from inferbench.catalog.verbs import VERBS
from inferbench.cli import main as cli
from inferbench.core.cells import SCHEMA_VERSION, CellKey, CellRecord, NewerRecord
from inferbench.core.errors import CorruptArtifact, UserError, is_oom
from inferbench.core.settings import MeasureSettings
from inferbench.plan.config import ConfigError, validate_config
from inferbench.scenarios import run as cell_runner
from inferbench.scenarios.prepare import CellInputs, CellRequest
from tests.conftest import REPO, disk_full_at

BASE = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


# --- 1. no shell from the config -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("lendingclub", "kaggle_dataset", "$(touch /tmp/pwned)/lending-club"),
        ("lendingclub", "kaggle_dataset", "owner/name; id"),
        ("heart", "urls", ["file:///etc/passwd"]),
        ("heart", "urls", ["http://archive.ics.uci.edu/processed.cleveland.data"]),
        ("heart", "urls", ["https://archive.ics.uci.edu/$(id)"]),
        ("heart", "urls", ["https://archive.ics.uci.edu/a b"]),
    ],
)
def test_config_strings_that_reach_a_command_must_be_plain(section, key, value):
    config = copy.deepcopy(BASE)
    config["datasets"][section][key] = value
    with pytest.raises(ConfigError, match=rf"datasets\.{section}\.{key}.* is not allowed; "):
        validate_config(config)


def _shell_commands() -> list[tuple[str, str]]:
    """(file, line) of every string line of every rule's `shell:` command."""
    found = []
    for smk in sorted((REPO / "workflow" / "rules").glob("*.smk")):
        in_shell = False
        for line in smk.read_text().splitlines():
            stripped = line.strip()
            if stripped.startswith("shell:"):
                in_shell = True
            elif in_shell and stripped.startswith('"'):
                found.append((smk.name, stripped))
            else:
                in_shell = False
    return found


def test_every_value_a_rule_puts_into_a_shell_command_is_quoted():
    commands = _shell_commands()
    assert len(commands) > 20, "the rules' shell commands were found"
    unquoted = [(f, line) for f, line in commands for field in re.findall(r"\{([^{}]*)\}", line) if ":q" not in field]
    assert unquoted == [], "each {...} in a shell command needs :q (lists: each item quoted)"


def test_download_refuses_anything_but_https(tmp_path, capsys):
    code = cli.main(["download", "--dataset", "heart", "--url", "file:///etc/passwd", "--out", str(tmp_path / "x")])
    assert code == 2
    assert "only https:// URLs are downloaded, not file:///etc/passwd" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


# --- 2. no code from data ------------------------------------------------------------------------


class _Payload:
    """Runs code when unpickled, as a hostile checkpoint would."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "code ran"))


def test_a_checkpoint_that_carries_code_is_refused_without_running_it(tmp_path):
    from inferbench.models.registry import load_checkpoint

    marker, evil = tmp_path / "ran", tmp_path / "evil.pt"
    evil.write_bytes(pickle.dumps({"name": "resnet50", "arch": {}, "state_dict": _Payload(marker), "meta": {}}))
    with pytest.raises(CorruptArtifact, match=r"evil\.pt cannot be read"):
        load_checkpoint(evil)
    assert not marker.exists(), "weights_only loading never runs a pickle's code"


def test_an_arch_that_would_load_a_file_is_refused(tmp_path):
    import torch

    from inferbench.models.registry import load_checkpoint

    marker = tmp_path / "ran"
    hostile = tmp_path / "hostile.pth"
    hostile.write_bytes(pickle.dumps(_Payload(marker)))
    checkpoint = tmp_path / "model.pt"  # a well-formed checkpoint whose arch points timm at the pickle
    arch = {"checkpoint_path": str(hostile), "layers": [1, 1, 1, 1]}
    torch.save({"name": "resnet50", "seed": 0, "arch": arch, "state_dict": {}, "meta": {}}, checkpoint)
    with pytest.raises(ValueError, match="resnet50: arch may not set checkpoint_path"):
        load_checkpoint(checkpoint)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("workload", "arch", "message"),
    [
        ("resnet50", {"pretrained": True}, "arch may not set pretrained"),
        ("vit_b16", {"depht": 2}, r"arch keys depht are not taken by this model; allowed: .*\bdepth\b"),
        ("bert_base", {"num_hidden_layer": 1}, r"allowed: .*\bnum_hidden_layers\b"),
        ("hf:roberta", {"num_hidden_layer": 1}, r"hf:roberta: arch keys num_hidden_layer"),
        ("distilbert", {"trust_remote_code": True}, "arch may not set trust_remote_code"),
    ],
)
def test_arch_keys_are_those_the_builder_takes(workload, arch, message):
    from inferbench.models.registry import create_model

    with pytest.raises(ValueError, match=message):
        create_model(workload, **arch)


# --- 3. nothing silently wrong ------------------------------------------------------------------


@pytest.fixture(scope="module")
def heart_file(tmp_path_factory) -> Path:
    from inferbench.data import heart

    return heart.generate(tmp_path_factory.mktemp("heart"))


def _edited_heart(heart_file: Path, tmp_path: Path, edit) -> Path:
    lines = heart_file.read_bytes().splitlines(keepends=True)
    bad = tmp_path / "processed.cleveland.data"
    bad.write_bytes(b"".join(edit(lines)))
    return bad


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda ls: [*ls[:4], ls[4].rsplit(b",", 1)[0] + b"\n", *ls[5:]], r", line 5: 13 values, expected 14"),
        (lambda ls: [*ls[:6], ls[6].rstrip() + b",1.0\n", *ls[7:]], r", line 7: 15 values, expected 14"),
        (lambda ls: [*ls[:9], ls[9].rsplit(b",", 1)[0] + b",?\n", *ls[10:]], r", line 10: no target"),
        (lambda ls: [*ls[:2], b"63.0,1.0,\xff\xfe\n", *ls[3:]], r": not a text file \(undecodable byte b'\\xff' at"),
        (lambda ls: [], r": the file is empty"),
        (lambda ls: [b"\n", b"  \n"], r": the file is empty"),
    ],
    ids=["short row", "long row", "missing target", "not UTF-8", "empty", "blank lines"],
)
def test_a_bad_heart_file_is_named_with_its_line(heart_file, tmp_path, edit, message):
    from inferbench.data import heart

    bad = _edited_heart(heart_file, tmp_path, edit)
    with pytest.raises(ValueError, match=re.escape(str(bad)) + message):
        heart.clean(bad)


def test_a_bad_heart_file_stops_prepare_data_with_its_name(heart_file, tmp_path, capsys):
    bad = _edited_heart(heart_file, tmp_path, lambda ls: [*ls[:4], ls[4].rsplit(b",", 1)[0] + b"\n", *ls[5:]])
    out = tmp_path / "heart.parquet"
    args = [
        "--raw",
        str(bad),
        "--out",
        str(out),
        "--encoders",
        str(tmp_path / "e.json"),
        "--stats",
        str(tmp_path / "s.json"),
    ]
    assert cli.main(["prepare-data", "--dataset", "heart", "--options", '{"source": "uci"}', *args]) == 2
    assert f"{bad}, line 5: 13 values, expected 14" in capsys.readouterr().err
    assert not out.exists(), "nothing is written from a bad file"


@pytest.fixture(scope="module")
def lendingclub_header(tmp_path_factory) -> bytes:
    import gzip

    from inferbench.data import lendingclub

    raw = lendingclub.generate(tmp_path_factory.mktemp("lc"), rows=200)
    with gzip.open(raw, "rb") as fh:
        return fh.readline()


def test_a_lendingclub_file_with_no_loans_stops_cleaning(lendingclub_header, tmp_path):
    import gzip

    from inferbench.data import lendingclub

    header_only = tmp_path / "accepted_2007_to_2018Q4.csv.gz"
    header_only.write_bytes(gzip.compress(lendingclub_header))
    with pytest.raises(ValueError, match=re.escape(str(header_only)) + r": no loans left to train on \(0 rows read"):
        lendingclub.clean(header_only)


def test_a_lendingclub_file_that_is_not_text_is_named(lendingclub_header, tmp_path):
    import gzip

    from inferbench.data import lendingclub

    garbled = tmp_path / "accepted_2007_to_2018Q4.csv.gz"
    garbled.write_bytes(gzip.compress(lendingclub_header + b"\xff\xfe\xfa," * 40 + b"\n"))
    with pytest.raises(ValueError, match=re.escape(str(garbled)) + r": not UTF-8 text after decompression"):
        lendingclub.clean(garbled)


# --- 4. nothing stuck behind a damaged file ------------------------------------------------------


def _record(path: Path, status: str = "ok") -> Path:
    key = CellKey("mlp_heart", "torch_eager", "fp32", "cpu", 1, 0, 1)
    CellRecord(key, status, "torch_eager", reason=None if status == "ok" else "broke").save(path)
    return path


def test_an_unreadable_record_is_named_and_clean_removes_it(tmp_path, capsys):
    cells = tmp_path / "cells"
    good = _record(cells / "a" / "good.json")
    failed = _record(cells / "b" / "failed.json", status="failed")
    torn = cells / "c" / "torn.json"
    torn.parent.mkdir(parents=True)
    torn.write_text(good.read_text()[: len(good.read_text()) // 2])  # a record cut off mid-write
    with pytest.raises(UserError, match=r"(?s)1 cell record\(s\) cannot be read:.*torn\.json.*inferbench clean"):
        summary_frame([good, failed, torn])
    out = tmp_path / "summary.csv"
    assert cli.main(["aggregate", str(good), str(torn), "--out-csv", str(out), "--out-parquet", str(out) + ".pq"]) == 2
    assert "torn.json" in capsys.readouterr().err
    assert cli.main(["clean", "--cells-dir", str(cells)]) == 0  # default: failed and unreadable
    assert good.exists() and not torn.exists() and not failed.exists()
    assert len(summary_frame([good])) == 1


def test_a_record_copied_onto_another_cells_path_is_refused_by_name_and_clean_removes_it(tmp_path, capsys):
    """A b1 record on the b2 path would publish b1's numbers twice and b2's never (issue 32)."""
    cells = tmp_path / "cells"
    b1 = CellKey("mlp_heart", "ort_cpu", "fp32", "cpu", 1, 0, 2)
    right = cells / b1.relpath
    CellRecord(b1, "ok", "ort_cpu").save(right)
    wrong = cells / replace(b1, batch_size=2).relpath
    wrong.parent.mkdir(parents=True, exist_ok=True)
    wrong.write_text(right.read_text())
    assert CellRecord.load(right).key == b1
    colon = CellKey("timm:convnext_tiny", "torch_eager", "fp32", "cpu", 1, 0, 2)  # any workload name
    CellRecord(colon, "ok", "torch_eager").save(cells / colon.relpath)
    assert CellRecord.load(cells / colon.relpath).key == colon
    pattern = r"(?s)1 cell record\(s\) cannot be read:.*b2-s0-t2\.json.*record of mlp_heart/ort_cpu-fp32/cpu/b1-s0-t2,"
    with pytest.raises(UserError, match=pattern):
        summary_frame([right, wrong])
    assert cli.main(["clean", "--cells-dir", str(cells)]) == 0
    assert right.exists() and not wrong.exists() and (cells / colon.relpath).exists()


def test_a_damaged_checkpoint_is_named_with_the_command_that_rebuilds_it(tmp_path):
    from inferbench.models.registry import load_checkpoint

    garbage = tmp_path / "resnet50.pt"
    garbage.write_bytes(os.urandom(4096))
    with pytest.raises(CorruptArtifact, match=r"resnet50\.pt cannot be read .* --forcerun .*resnet50\.pt"):
        load_checkpoint(garbage)


def test_a_truncated_onnx_model_is_named_with_the_command_that_rebuilds_it(tmp_path):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from inferbench.engines.ort.engine import _unreadable_model
    from inferbench.models.export import read_onnx

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor("w", TensorProto.FLOAT, [256], np.ones(256, np.float32).tolist())],
    )
    whole = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph), str(whole))
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(whole.read_bytes()[:-200])
    with pytest.raises(CorruptArtifact, match=r"truncated\.onnx cannot be read .* --forcerun"):
        read_onnx(truncated)
    with pytest.raises(Exception) as raised:
        ort.InferenceSession(str(truncated), providers=["CPUExecutionProvider"])
    assert _unreadable_model(raised.value), "ORT's message for a truncated file is recognised"
    assert not _unreadable_model(RuntimeError("Could not find an implementation for Foo(1) node"))


# --- 5. nothing lost -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "oom"),
    [
        (MemoryError(), True),
        (OSError(errno.ENOMEM, "Cannot allocate memory"), True),
        (RuntimeError("std::bad_alloc"), True),
        (RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Failed to allocate memory"), True),
        (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
        (RuntimeError("mat1 and mat2 shapes cannot be multiplied"), False),
    ],
)
def test_host_and_device_out_of_memory_are_recognised(error, oom):
    assert is_oom(error) is oom


def _cell_args(tmp_path: Path) -> tuple:
    from inferbench.machine.lock import MachineLock

    key = CellKey("mlp_heart", "noop", "fp32", "cpu", 1, 0, 1)
    lock = MachineLock(tmp_path / "lock")
    lock.shared()
    return CellRequest(key, {"engine": "noop"}, CellInputs(), MeasureSettings()), tmp_path / "cells" / "r.json", lock


def test_a_host_out_of_memory_cell_is_recorded_oom(tmp_path, monkeypatch):
    def exhausted(*_args: object) -> None:
        raise MemoryError

    monkeypatch.setattr(cell_runner, "_measure", exhausted)
    record = cell_runner.run_cell(*_cell_args(tmp_path))
    assert record.status == "oom" and CellRecord.load(tmp_path / "cells" / "r.json").status == "oom"


def test_a_write_error_after_measuring_keeps_the_measurement(tmp_path, monkeypatch):
    request, out, lock = _cell_args(tmp_path)
    measured = CellRecord(request.key, "ok", "noop", latency_ms={"p50": 1.25}, n_iters=7)
    monkeypatch.setattr(cell_runner, "_measure", lambda *_: (measured, {"device": np.ones(7)}))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    disk_full_at(monkeypatch, out)
    with pytest.raises(
        UserError, match=r"cannot write .*r\.json: No space left on device; the measurement \(ok\) is kept in"
    ):
        cell_runner.run_cell(request, out, lock)
    kept = next((tmp_path / f"inferbench-{os.getuid()}" / "unsaved").rglob("r.json"))
    assert CellRecord.load(kept).latency_ms["p50"] == 1.25, "nothing measured is lost"
    # one process of a cell writes its record in the job's scratch folder, which goes with the job: the
    # message sends the user to the cell, not to copy anything into that folder
    scratch = tmp_path / "repeats-1@host-x" / "repeat0.json"
    scratch.parent.mkdir()
    disk_full_at(monkeypatch, scratch)
    with pytest.raises(UserError) as error:
        cell_runner.run_cell(request, scratch, lock, cell_path=out)
    assert f"one of the processes of the cell {out}: re-run it once there is room" in str(error.value)
    assert "copy it to" not in str(error.value)


def test_work_that_is_not_measuring_takes_the_machine_lock():
    for verb in ("aggregate", "plot", "report", "run-cell", "prepare-data"):
        assert VERBS[verb].lock, verb


@pytest.mark.slow
def test_the_measuring_process_ends_with_its_jobs_shell(tmp_path):
    """Snakemake cancels a job by signalling the shell it started; the measuring process must go
    with it, or it writes its record after the job was reported failed."""
    out = tmp_path / "cells" / "r.json"
    measure = json.dumps({"warmup_s": 0, "min_time_s": 60, "repeats": 2})
    command = (
        f"{sys.executable} -m inferbench run-cell --workload mlp_heart --engine noop --engine-options "
        f"'{{\"engine\": \"noop\"}}' --precision fp32 --device cpu --batch 1 --threads 1 --measure '{measure}' "
        f"--out {out} 2> {tmp_path / 'log'}; echo after"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "INFERBENCH_LOCK_FILE": str(tmp_path / "lock")}
    env.pop("INFERBENCH_WARM_SOCKET", None)
    shell = subprocess.Popen(["bash", "-c", command], env=env)
    deadline = time.monotonic() + 120
    while "fresh" not in ((tmp_path / "log").read_text() if (tmp_path / "log").exists() else ""):
        assert time.monotonic() < deadline and shell.poll() is None, "the cell never started measuring"
        time.sleep(0.1)
    shell.send_signal(signal.SIGTERM)
    shell.wait(10)
    deadline = time.monotonic() + 15
    while _processes_writing(out):
        assert time.monotonic() < deadline, f"processes {_processes_writing(out)} outlived their job's shell"
        time.sleep(0.1)
    time.sleep(1)
    assert not out.exists(), "no record appears after the job ended"


def _processes_writing(out: Path) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if str(out).encode() in (proc / "cmdline").read_bytes():
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


def test_clean_keeps_records_a_newer_inferbench_wrote_and_names_them(tmp_path, capsys):
    """Issue 71: `clean` (default) deleted valid records of a newer schema with their samples."""
    cells = tmp_path / "cells"
    good = _record(cells / "a" / "good.json")
    newer_version = cells / "b" / "v3.json"
    newer_field = cells / "c" / "extra.json"
    for path, change in ((newer_version, {"schema_version": SCHEMA_VERSION + 1}), (newer_field, {"joules": 1.0})):
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({**json.loads(good.read_text()), **change}))
    with pytest.raises(
        NewerRecord,
        match=rf"schema_version {SCHEMA_VERSION + 1} is newer than this checkout reads .* update the checkout",
    ):
        CellRecord.load(newer_version)
    with pytest.raises(NewerRecord, match=r"fields this checkout does not know \(joules\)"):
        CellRecord.load(newer_field)
    summary = tmp_path / "results" / "summary.csv"
    report = tmp_path / "results" / "report.md"
    for made in (summary, report):
        made.parent.mkdir(exist_ok=True)
        made.write_text("made from the records\n")
    failed = _record(cells / "d" / "failed.json", status="failed")
    args = ["clean", "--cells-dir", str(cells), "--summary", str(summary), str(report)]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert newer_version.exists() and newer_field.exists() and good.exists() and not failed.exists()
    assert "kept 2 record(s) a newer inferbench wrote" in out and "update the checkout" in out
    # a cell removed: no page left publishing it
    assert not summary.exists() and not report.exists()


@pytest.mark.parametrize(
    ("engine", "artifact", "message"),
    [
        ("ort_cpu", "mlp_heart.pt", r"is a PyTorch checkpoint, but engine ort_cpu \(ort_cpu\) runs an ONNX model"),
        ("torch_eager", "mlp_heart.onnx", r"is an ONNX model, but engine torch_eager \(torch_eager\) runs a PyTorch"),
        ("ort_cpu", "mlp_heart.bin", r"is a '\.bin' file, but engine ort_cpu"),
    ],
)
def test_an_artifact_of_the_wrong_kind_is_named_as_such_not_as_damaged(tmp_path, capsys, engine, artifact, message):
    (tmp_path / artifact).write_bytes(b"PK\x03\x04 not what the engine reads")
    out = tmp_path / "cells" / "r.json"
    code = cli.main(
        ["run-cell", "--workload", "mlp_heart", "--engine", engine, "--engine-options", json.dumps({"engine": engine}),
         "--precision", "fp32", "--device", "cpu", "--batch", "1", "--threads", "1",
         "--artifact", str(tmp_path / artifact), "--out", str(out)]
    )  # fmt: skip
    error = capsys.readouterr().err
    assert code == 2 and re.search(message, error) and "damaged" not in error and not out.exists()
