"""Where a piece of code lives, as text: ``"module:name"`` (an engine's class, a scenario's function, a
verb's, a layout's answer). The registries hold such targets, and import them only when they run, so
that reading a registry stays light."""

from __future__ import annotations

import importlib
from typing import Any


def target_module(target: str) -> str:
    """The module of a ``"module:name"`` target."""
    return target.partition(":")[0]


def load_target(target: str) -> Any:
    """What a ``"module:name"`` target names, its module imported now."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)
