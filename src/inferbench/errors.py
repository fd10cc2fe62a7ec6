"""Errors caused by the user's input or environment: the CLI prints their message (which says what was
wrong and how to fix it) without a traceback and exits with status 2."""


class UserError(RuntimeError):
    """Bad input or a missing prerequisite; the message says how to fix it."""
