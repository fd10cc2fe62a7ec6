"""Errors caused by the user's input or environment: the CLI prints their message (which says what was
wrong and how to fix it) without a traceback and exits with status 2; and how a cell that breaks
says why in its record."""

import errno
import sys
import traceback


class UserError(RuntimeError):
    """Bad input or a missing prerequisite; the message says how to fix it."""


class CorruptArtifact(UserError):
    """A file the workflow made (a checkpoint, an ONNX model) that cannot be read back: damaged or
    truncated after it was written. Snakemake sees a file newer than its inputs and would never
    rebuild it, so the message names the command that does."""

    def __init__(self, path: object, error: BaseException) -> None:
        super().__init__(
            f"{path} cannot be read ({type(error).__name__}: {str(error)[:300]}): the file is damaged or "
            f"truncated. Rebuild it and what depends on it with `snakemake --cores 8 --forcerun {path}` "
            "(or delete it and re-run the same command)"
        )
        self.path = path


#: how libraries say that memory ran out: CUDA (torch, ORT), the host (ENOMEM, C++ std::bad_alloc)
OOM_MESSAGES = ("out of memory", "failed to allocate", "cannot allocate memory", "can't allocate memory", "bad_alloc")


def error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def failure_reason(error: BaseException) -> str:
    """Log the traceback of something that broke and return the reason its record keeps."""
    traceback.print_exc(file=sys.stderr)
    return error_text(error)[:2000]


def is_oom(error: BaseException) -> bool:
    """Whether ``error`` says that memory ran out (a cell then records ``oom``, not ``failed``)."""
    if isinstance(error, MemoryError) or (isinstance(error, OSError) and error.errno == errno.ENOMEM):
        return True
    text = error_text(error).lower()
    return "outofmemory" in text.replace(" ", "") or any(m in text for m in OOM_MESSAGES)
