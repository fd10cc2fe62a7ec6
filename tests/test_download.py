"""Downloads against local fakes of Kaggle and the UCI archive (no network), and the errors users see."""

from __future__ import annotations

import gzip
import http.server
import io
import shutil
import threading
import zipfile
from pathlib import Path

import pytest
import requests

from inferbench.data import heart, lendingclub
from inferbench.data.download import (
    CredentialsError,
    DownloadError,
    download_heart,
    download_lendingclub,
    kaggle_api,
    kaggle_credentials_source,
)

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)


@pytest.fixture(scope="module")
def real_format_lc(tmp_path_factory) -> Path:
    return lendingclub.generate(tmp_path_factory.mktemp("lc"), rows=500, seed=2)


class FakeKaggle:
    """Stands in for ``KaggleApi``: writes what the real one would, or fails as the real one does."""

    def __init__(self, payload: Path | None = None, error: Exception | None = None, zipped: bool = False):
        self.payload, self.error, self.zipped, self.calls = payload, error, zipped, []

    def dataset_download_file(self, dataset, file_name, path=None, force=False, quiet=True):
        self.calls.append((dataset, file_name))
        if self.error:
            raise self.error
        if self.zipped:
            with zipfile.ZipFile(Path(path) / f"{file_name}.zip", "w") as zf:
                zf.write(self.payload, arcname=file_name)
        else:
            shutil.copy(self.payload, Path(path) / file_name)
        return True


def _http_error(status: int) -> requests.HTTPError:
    response = requests.Response()
    response.status_code = status
    return requests.HTTPError(f"{status} Client Error", response=response)


def test_kaggle_download_lands_verified_file(real_format_lc, tmp_path):
    api = FakeKaggle(real_format_lc)
    out = download_lendingclub(tmp_path / "kaggle" / lendingclub.RAW_FILE, api=api)
    assert api.calls == [("wordsforthewise/lending-club", "accepted_2007_to_2018Q4.csv.gz")]
    assert out.read_bytes() == real_format_lc.read_bytes()
    assert [p.name for p in out.parent.iterdir()] == [lendingclub.RAW_FILE]  # no temporary left


def test_kaggle_zip_delivery_is_unwrapped(real_format_lc, tmp_path):
    out = download_lendingclub(tmp_path / lendingclub.RAW_FILE, api=FakeKaggle(real_format_lc, zipped=True))
    assert out.read_bytes() == real_format_lc.read_bytes()


@pytest.mark.parametrize(
    ("error", "kind", "message"),
    [
        (requests.ConnectionError("Max retries exceeded"), DownloadError, "Kaggle is unreachable"),
        (_http_error(404), DownloadError, "no file 'accepted_2007_to_2018Q4.csv.gz' in dataset 'someone/typo'"),
        (_http_error(401), CredentialsError, "Kaggle rejected the credentials"),
    ],
)
def test_kaggle_failures_say_which(error, kind, message, tmp_path):
    out = tmp_path / lendingclub.RAW_FILE
    out.write_bytes(b"earlier good file")
    with pytest.raises(kind, match=message):
        download_lendingclub(out, dataset="someone/typo", api=FakeKaggle(error=error))
    assert out.read_bytes() == b"earlier good file"  # an earlier output stays intact
    assert [p.name for p in tmp_path.iterdir()] == [lendingclub.RAW_FILE]


def test_truncated_kaggle_download_is_rejected(real_format_lc, tmp_path):
    truncated = tmp_path / "src" / lendingclub.RAW_FILE
    truncated.parent.mkdir()
    truncated.write_bytes(real_format_lc.read_bytes()[: real_format_lc.stat().st_size // 2])
    out = tmp_path / "out" / lendingclub.RAW_FILE
    with pytest.raises(ValueError, match="truncated"):
        download_lendingclub(out, api=FakeKaggle(truncated))
    assert not out.exists() and list(out.parent.iterdir()) == []


def test_no_credentials_names_the_three_ways_and_no_secret(tmp_path, monkeypatch):
    for var in ("KAGGLE_API_TOKEN", "KAGGLE_USERNAME", "KAGGLE_KEY", "KAGGLE_CONFIG_DIR", "KAGGLE_API_V1_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KAGGLE_KEY", "s3cr3t-key-value")  # a key without a username is not a credential
    assert kaggle_credentials_source() is None
    with pytest.raises(CredentialsError) as caught:
        kaggle_api()
    text = str(caught.value)
    assert "KAGGLE_API_TOKEN" in text and "KAGGLE_USERNAME and KAGGLE_KEY" in text and "kaggle auth login" in text
    assert "s3cr3t" not in text


def test_credential_sources_are_named_not_shown(tmp_path):
    assert "KAGGLE_API_TOKEN" in kaggle_credentials_source({"KAGGLE_API_TOKEN": "tok123"}, tmp_path)
    assert "tok123" not in kaggle_credentials_source({"KAGGLE_API_TOKEN": "tok123"}, tmp_path)
    (tmp_path / ".config" / "kaggle").mkdir(parents=True)
    (tmp_path / ".config" / "kaggle" / "kaggle.json").write_text('{"username": "u", "key": "k"}')
    assert kaggle_credentials_source({}, tmp_path).endswith(".config/kaggle/kaggle.json")


@pytest.fixture
def uci_server(tmp_path):
    """A local stand-in for the UCI archive, serving files from a folder on 127.0.0.1."""
    root = tmp_path / "www"
    root.mkdir()
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(root), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.RequestHandlerClass.log_message = lambda *a: None
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def real_format_heart(tmp_path_factory) -> bytes:
    return heart.generate(tmp_path_factory.mktemp("h"), seed=4).read_bytes()


def test_uci_legacy_url(uci_server, real_format_heart, tmp_path):
    root, base = uci_server
    (root / "processed.cleveland.data").write_bytes(real_format_heart)
    out = download_heart(tmp_path / heart.RAW_FILE, urls=[f"{base}/processed.cleveland.data", f"{base}/x.zip"])
    assert out.read_bytes() == real_format_heart


def test_uci_falls_back_to_the_zip(uci_server, real_format_heart, tmp_path):
    root, base = uci_server
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("processed.cleveland.data", real_format_heart)
        zf.writestr("heart-disease.names", "notes")
    (root / "heart+disease.zip").write_bytes(buffer.getvalue())
    out = download_heart(tmp_path / heart.RAW_FILE, urls=[f"{base}/missing.data", f"{base}/heart+disease.zip"])
    assert out.read_bytes() == real_format_heart


def test_uci_failures_list_every_url_and_keep_old_file(uci_server, tmp_path):
    root, base = uci_server
    (root / "page.html").write_text("<html><body>Maintenance</body></html>\n")
    out = tmp_path / heart.RAW_FILE
    out.write_text("old")
    urls = [f"{base}/gone.data", f"{base}/page.html", "http://127.0.0.1:9/closed.zip"]
    with pytest.raises(DownloadError) as caught:
        download_heart(out, urls=urls, timeout_s=5)
    text = str(caught.value)
    assert f"{base}/gone.data: HTTP 404" in text
    assert f"{base}/page.html: not a valid processed.cleveland.data" in text
    assert "closed.zip: unreachable" in text
    assert out.read_text() == "old"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda src: src.read_bytes()[: len(src.read_bytes()) // 3], "truncated"),
        (lambda src: gzip.decompress(src.read_bytes()), "not a gzip file"),
        (lambda src: gzip.compress(b"id,loan_status\n1,Fully Paid\n"), "lacks needed columns: loan_amnt, term"),
    ],
)
def test_bad_raw_lendingclub_files_say_which_file_and_what(real_format_lc, tmp_path, make, message):
    bad = tmp_path / lendingclub.RAW_FILE
    bad.write_bytes(make(real_format_lc))
    with pytest.raises(ValueError, match=message) as caught:
        lendingclub.clean(bad)
    assert str(bad) in str(caught.value)


def test_sample_rows_is_seeded_and_exact(real_format_lc):
    full, _, stats_full = lendingclub.clean(real_format_lc)
    a, _, stats = lendingclub.clean(real_format_lc, sample_rows=100, seed=1)
    b, _, _ = lendingclub.clean(real_format_lc, sample_rows=100, seed=1)
    assert len(a) == 100 and a.equals(b)
    assert stats["rows_clean"] == stats_full["rows_clean"] == len(full) and stats["rows_used"] == 100
    assert sum(stats["status_counts"].values()) == 500


def test_cli_download_without_credentials_is_a_clear_error(tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("KAGGLE_")} | {"HOME": str(tmp_path)}
    out = tmp_path / "raw" / lendingclub.RAW_FILE
    done = subprocess.run(
        [sys.executable, "-m", "inferbench", "download", "--dataset", "lendingclub", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "No Kaggle credentials were found" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()
