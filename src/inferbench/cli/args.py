"""What every verb may use to declare its arguments: ``arguments``, which attaches a verb's argument
declarations to its function, and argument types that check their values."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def arguments(add: Callable[[argparse.ArgumentParser], None]) -> Callable[[F], F]:
    """Declare a verb's arguments beside its function: ``add(parser)`` fills the verb's sub-parser."""

    def attach(function: F) -> F:
        function.add_arguments = add  # type: ignore[attr-defined]
        return function

    return attach


def required_paths(p: argparse.ArgumentParser, *flags: str) -> None:
    """Required file arguments (the files a rule's job reads and writes)."""
    for flag in flags:
        p.add_argument(flag, type=Path, required=True)


def json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not valid JSON: {error}") from None
