"""Errors caused by the user's input or environment: the CLI prints their message (which says what was
wrong and how to fix it) without a traceback and exits with status 2."""


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
