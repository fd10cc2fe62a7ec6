"""Atomic file writes (a killed job never leaves a half-written file that looks complete, and outputs
follow the umask), and the directory of the user's own for locks and scratch files."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from inferbench.core.errors import UserError


def _umask() -> int:
    """The process's umask: read from /proc without changing it (Linux 4.7+), else by setting it and
    back (os.umask can only be read so, for the whole process: done once, at import)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    found = os.umask(0o077)
    os.umask(found)
    return found


#: the mode new files get: outputs written through a temporary file (mkstemp: 0600) take it
NEW_FILE_MODE = 0o666 & ~_umask()


def _what_it_is(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file"


def refuse_non_regular(path: Path) -> None:
    """A UserError where ``path`` exists and is not a regular file (os.lstat: a symbolic link is one, whatever
    it points to): an output renamed onto it would replace the link, the device (as root, /dev/null
    itself) or the directory with a regular file. A missing ``path`` is fine."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISREG(info.st_mode):
        return
    what = _what_it_is(info.st_mode)
    target = f" (to {os.readlink(path)})" if stat.S_ISLNK(info.st_mode) else ""
    raise UserError(
        f"{path} is {what}{target}, not a regular file: inferbench writes an output as a regular file of its own "
        f"and refuses to replace {what} with it. Give the output another path, or remove {path} first if it is "
        "yours to replace"
    )


def refuse_linked_folders(root: Path, folder: Path) -> None:
    """A UserError where ``folder`` (inside ``root``), a folder between the two or a folder inside ``folder`` is
    a symbolic link: what is written there would land wherever the link points, outside the run."""
    candidates = [folder, *(p for p in folder.parents if p.is_relative_to(root) and p != root)]
    if folder.is_dir() and not folder.is_symlink():
        candidates += [child for child in folder.iterdir() if child.is_symlink()]
    for path in candidates:
        if path.is_symlink():
            raise UserError(
                f"{path} is a symbolic link (to {os.readlink(path)}): inferbench writes its outputs inside the run's "
                f"own folders, never through a link. Replace {path} with a folder of its own"
            )


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds. The
    file has the mode the user's umask gives new files. A ``path`` that exists and is not a regular file
    (a symbolic link, a device, a directory) is refused by name (a UserError), before the block and again
    just before the rename."""
    path = Path(path)
    refuse_non_regular(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        try:
            # mkstemp makes it 0600; an output gets the mode any new file of the user gets (0644 for umask
            # 022). A filesystem that refuses chmod (FAT, some network mounts) leaves it 0600, as before.
            with suppress(OSError):
                os.fchmod(fd, NEW_FILE_MODE)
        finally:
            os.close(fd)
        yield tmp
        refuse_non_regular(path)  # one made while the block wrote
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: str | Path, writer: Callable[[Path], Any]) -> None:
    """Call ``writer(tmp_path)`` and move the result onto ``path`` atomically."""
    with atomic_path(path) as tmp:
        writer(tmp)


def write_json(path: str | Path, obj: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False, allow_nan=True) + "\n")


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text())


def user_dir() -> Path:
    """This user's directory for locks and scratch files, created (0700) if missing. A UserError
    says why an existing one cannot be trusted and how to fix it."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and _usable_runtime_dir(Path(runtime)):
        return private_dir(Path(runtime) / "inferbench")
    return private_dir(Path(tempfile.gettempdir()) / f"inferbench-{os.getuid()}")


def _usable_runtime_dir(path: Path) -> bool:
    # e.g. under sudo it is still the invoking user's: then the temp directory is used instead
    try:
        info = os.stat(path)
    except OSError:
        return False
    return (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == os.getuid()
        and not info.st_mode & 0o022
        and os.access(path, os.W_OK | os.X_OK)
    )


def private_dir(path: Path) -> Path:
    """``path`` as a directory only this user can change: created mode 0700, or an existing one
    checked (not a symlink, a directory, owned by this uid, not group- or world-writable)."""
    with suppress(FileExistsError):
        os.mkdir(path, 0o700)  # the umask can only take bits away: never more open than 0700
    info = os.lstat(path)
    fix = f"remove it (`rm -r {path}`, as its owner or root) and run again, or set TMPDIR to a directory of your own"
    if stat.S_ISLNK(info.st_mode):
        raise UserError(
            f"{path} is a symbolic link, not inferbench's directory for its locks and scratch files "
            f"(another user may have placed it to redirect them): {fix}"
        )
    if not stat.S_ISDIR(info.st_mode):
        raise UserError(f"{path} is not a directory; inferbench keeps its locks and scratch files there: {fix}")
    if info.st_uid != os.getuid():
        raise UserError(
            f"{path} belongs to uid {info.st_uid}, not to this user (uid {os.getuid()}); inferbench keeps "
            f"its locks and scratch files there and trusts only a directory of its own: {fix}"
        )
    if info.st_mode & 0o022:
        raise UserError(
            f"{path} is writable by other users (mode {stat.S_IMODE(info.st_mode):o}); inferbench keeps its "
            f"locks and scratch files there: make it private with `chmod 700 {path}`"
        )
    return path
