"""Downloads of the real datasets: LendingClub through the Kaggle API, UCI Heart Disease over HTTPS.

Every download lands in a temporary file beside its target, is verified (format, header, integrity)
and only then renamed onto the target, so an interrupted or bad download never leaves a file that
looks complete, and an earlier good file stays as it was.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from inferbench.core.errors import UserError
from inferbench.core.fsutil import atomic_path
from inferbench.data import heart, lendingclub

KAGGLE_DATASET = "wordsforthewise/lending-club"
UCI_URLS = (
    "https://archive.ics.uci.edu/ml/machine-learning-databases/heart-disease/processed.cleveland.data",
    "https://archive.ics.uci.edu/static/public/45/heart+disease.zip",
)
KAGGLE_CREDENTIALS_HELP = """\
No Kaggle credentials were found. Provide them in one of three ways:
  1. an API token: set KAGGLE_API_TOKEN (the token, or the path of a file holding it), or save the
     token to ~/.kaggle/access_token (create one at kaggle.com > Settings > API);
  2. a legacy API key: set KAGGLE_USERNAME and KAGGLE_KEY, or put kaggle.json in $KAGGLE_CONFIG_DIR,
     ~/.kaggle/ or ~/.config/kaggle/;
  3. OAuth: run `kaggle auth login` once (it caches ~/.kaggle/credentials.json).
Or keep the generated data: set datasets.lendingclub.source: synthetic in the config."""


class DownloadError(UserError):
    """A download failed; the message says what to check."""


class CredentialsError(DownloadError):
    """No usable credentials."""


def kaggle_credentials_source(env: dict[str, str] | None = None, home: Path | None = None) -> str | None:
    """Where Kaggle credentials would come from (a name, never the secret), or None if nowhere."""
    env = dict(os.environ) if env is None else env
    home = Path.home() if home is None else home
    if env.get("KAGGLE_API_TOKEN"):
        return "the KAGGLE_API_TOKEN environment variable"
    if env.get("KAGGLE_USERNAME") and env.get("KAGGLE_KEY"):
        return "the KAGGLE_USERNAME and KAGGLE_KEY environment variables"
    candidates = [home / ".kaggle" / "access_token", home / ".kaggle" / "credentials.json"]
    config_dirs = [Path(env["KAGGLE_CONFIG_DIR"])] if env.get("KAGGLE_CONFIG_DIR") else []
    candidates += [d / "kaggle.json" for d in [*config_dirs, home / ".kaggle", home / ".config" / "kaggle"]]
    for path in candidates:
        if path.is_file() and path.stat().st_size > 0:
            return str(path)
    return None


def kaggle_api() -> Any:
    """An authenticated ``KaggleApi``. ``import kaggle`` authenticates (and prints help) at import time,
    so it is imported here only, with its output captured and its ``exit(1)`` turned into an error."""
    source = kaggle_credentials_source()
    if source is None:
        raise CredentialsError(KAGGLE_CREDENTIALS_HELP)
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
            from kaggle.api.kaggle_api_extended import KaggleApi

            api = KaggleApi()
            api.authenticate()
    except SystemExit:
        raise CredentialsError(
            f"Kaggle did not accept the credentials from {source} (expired or invalid?).\n{KAGGLE_CREDENTIALS_HELP}"
        ) from None
    return api


def _http_status(error: BaseException) -> int | None:
    response = getattr(error, "response", None)
    return getattr(response, "status_code", None)


def download_lendingclub(out_path: str | Path, dataset: str = KAGGLE_DATASET, api: Any = None) -> Path:
    """Fetch the accepted-loans file of ``dataset`` from Kaggle into ``out_path``, verified."""
    out_path = Path(out_path)
    source = "the given API client"
    if api is None:
        api = kaggle_api()
        source = kaggle_credentials_source() or "Kaggle's own configuration"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_path.parent, prefix=".download-") as tmp:
        try:
            api.dataset_download_file(dataset, lendingclub.RAW_FILE, path=tmp, force=True, quiet=True)
        except Exception as error:
            status = _http_status(error)
            if status in (401, 403):
                raise CredentialsError(
                    f"Kaggle rejected the credentials from {source} (HTTP {status}) for dataset {dataset!r}: "
                    "check the token or key, and that you accepted the dataset's terms on kaggle.com"
                ) from error
            if status == 404:
                raise DownloadError(
                    f"Kaggle has no file {lendingclub.RAW_FILE!r} in dataset {dataset!r} (HTTP 404): check "
                    f"datasets.lendingclub.kaggle_dataset (the LendingClub data is {KAGGLE_DATASET!r})"
                ) from error
            if status is None and isinstance(error, OSError):
                raise DownloadError(
                    f"Kaggle is unreachable ({type(error).__name__}: {error}); credentials were found in "
                    f"{source}. Check the network or proxy, or place the file at {out_path} yourself"
                ) from error
            message = f"downloading {dataset!r} from Kaggle failed: {type(error).__name__}: {error}"
            raise DownloadError(message) from error
        fetched = _unwrap(Path(tmp), lendingclub.RAW_FILE)
        lendingclub.verify_raw(fetched)
        os.replace(fetched, out_path)
    return out_path


def _unwrap(folder: Path, name: str) -> Path:
    """The downloaded file, taken out of a zip archive when Kaggle sent one."""
    files = [p for p in folder.iterdir() if p.is_file()]
    if not files:
        raise DownloadError(f"the Kaggle client reported success but wrote no file for {name}")
    direct = [p for p in files if p.name == name]
    if direct and not zipfile.is_zipfile(direct[0]):
        return direct[0]
    for archive in files:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                members = [m for m in zf.namelist() if Path(m).name.lower() == name.lower()]
                if not members:
                    raise DownloadError(f"{archive.name} holds no {name} (it has {zf.namelist()[:5]}...)")
                target = folder / f".{name}.unzipped"
                with zf.open(members[0]) as src, target.open("wb") as dst:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
                return target
    raise DownloadError(f"Kaggle sent {[p.name for p in files]}, not {name}")


def download_heart(out_path: str | Path, urls: Sequence[str] = UCI_URLS, timeout_s: float = 60.0) -> Path:
    """Fetch ``processed.cleveland.data`` from the first URL that works (plain file or zip), verified."""
    problems = []
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as response:
                payload = response.read()
        except urllib.error.HTTPError as error:
            problems.append(f"{url}: HTTP {error.code}")
            continue
        except (urllib.error.URLError, OSError) as error:
            problems.append(f"{url}: unreachable ({getattr(error, 'reason', error)})")
            continue
        try:
            if payload[:4] == b"PK\x03\x04":
                with zipfile.ZipFile(io.BytesIO(payload)) as zf:
                    members = [m for m in zf.namelist() if Path(m).name == heart.RAW_FILE]
                    if not members:
                        raise ValueError(f"the archive holds no {heart.RAW_FILE}")
                    payload = zf.read(members[0])
            with atomic_path(out_path) as tmp:
                tmp.write_bytes(payload)
                heart.read_raw(tmp)  # verifies the layout before the file takes the real name
        except (ValueError, zipfile.BadZipFile) as error:
            problems.append(f"{url}: not a valid {heart.RAW_FILE} ({error})")
            continue
        return Path(out_path)
    raise DownloadError(
        "could not download UCI Heart Disease:\n  "
        + "\n  ".join(problems)
        + f"\nCheck the network, set datasets.heart.urls, or place the file at {out_path} yourself."
    )
