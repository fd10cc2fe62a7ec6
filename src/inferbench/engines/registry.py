"""Engine implementations by name, found in this package's engine families (its subpackages), without
importing the code that runs them.

Each family declares ``ENGINES = {name: EngineInfo(...)}`` in its ``__init__.py`` (inferbench.catalog.engines),
which holds declarations only: the families are found by name and imported as declarations;
heavy libraries (torch, onnxruntime, tensorrt) are imported only when an engine class is loaded, so the
grid and the Snakefile reason about engines in milliseconds. A new family is a new package: nothing
here changes, so no cell of another engine re-runs (a cell's code identity is what its job imports:
inferbench.plan.code).
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any

from inferbench.catalog.engines import VARIANT_KEYS, EngineInfo, is_loopback, url_problem
from inferbench.catalog.targets import load_target

if TYPE_CHECKING:  # the registry stays light: the engine base class is imported only by a type checker
    from inferbench.engines.base import Engine


def _discover() -> tuple[dict[str, EngineInfo], dict[str, str]]:
    """Every family's engines, families in name order, each in its own declaration order; and the families
    skipped, with why (a declaration that raises on import): one broken family leaves the others working, and
    its engines are named unknown with the reason. An engine two families declare stops discovery, naming both."""
    found: dict[str, EngineInfo] = {}
    owner: dict[str, str] = {}
    skipped: dict[str, str] = {}
    package = importlib.import_module("inferbench.engines")
    for family in sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.ispkg):
        try:
            declared = getattr(importlib.import_module(f"inferbench.engines.{family}"), "ENGINES", {})
        except Exception as error:
            where = f"{package.__path__[0]}/{family}/__init__.py"
            skipped[family] = f"{where} raised {type(error).__name__} on import: {str(error)[:300]}"
            continue
        for name, info in declared.items():
            if name in found:
                raise ValueError(
                    f"engine {name!r} is declared by the families {owner[name]} and {family}: rename one of them"
                )
            found[name], owner[name] = info, family
    return found, skipped


ENGINES, SKIPPED_FAMILIES = _discover()
#: the harness's own baselines (``EngineInfo.harness``: the no-op engine), never an engine a study compares
HARNESS_ENGINES = frozenset(name for name, info in ENGINES.items() if info.harness)


def harness_engine() -> str:
    """The harness baseline a batcher's cell measures its floor with: the one engine declared ``harness``."""
    if len(HARNESS_ENGINES) != 1:
        raise ValueError(f"exactly one engine is declared harness=True, not {sorted(HARNESS_ENGINES)}")
    return next(iter(HARNESS_ENGINES))


#: the ONNX exports a cell can be prepared from: the plain one (torch.onnx dynamo exporter + onnxsim),
#: or the one made for ONNX Runtime's transformer fusions (``fusions: true``)
ONNX_EXPORTS = {"plain": "", "fused": ".fused"}


def onnx_path(impl: str, workload: str, precision: str, variant: dict[str, Any] | None = None) -> str:
    """The ONNX file a cell of ``impl`` (with the options of ``variant``) reads:
    results/onnx/<workload>[.fused][.<precision variant>].onnx."""
    export = ONNX_EXPORTS["fused" if (variant or {}).get("fusions") else "plain"]
    converted = engine_info(impl).onnx_variants.get(precision)
    return f"results/onnx/{workload}{export}{f'.{converted}' if converted else ''}.onnx"


def engine_info(impl: str) -> EngineInfo:
    try:
        return ENGINES[impl]
    except KeyError:
        skipped = "; ".join(f"family {family} skipped: {why}" for family, why in SKIPPED_FAMILIES.items())
        raise KeyError(
            f"unknown engine implementation {impl!r}; known: {sorted(ENGINES)}" + (f" ({skipped})" if skipped else "")
        ) from None


def option_problems(impl: str, variant: dict[str, Any]) -> list[str]:
    """What is wrong with a variant's options for its implementation ``impl``: unknown keys (a typo,
    or an option of another engine) with the keys allowed, and values of the wrong type."""
    declared = engine_info(impl).options
    problems = []
    for key, value in variant.items():
        if key in VARIANT_KEYS:
            continue
        if key not in declared:
            owners = sorted(name for name, info in ENGINES.items() if key in info.options)
            elsewhere = f" (an option of {', '.join(owners)})" if owners else ""
            allowed = ", ".join([*declared, *VARIANT_KEYS])
            problems.append(f"{key!r} is not an option of {impl}{elsewhere}; allowed keys: {allowed}")
        elif (problem := declared[key].problem(value)) is not None:
            problems.append(f"{key}: {problem} ({declared[key].help})")
    effective = engine_info(impl).effective_options(variant)
    for key, option in declared.items():
        if option.requires and effective[key] is True and effective.get(option.requires) is not True:
            problems.append(f"{key}: true needs {option.requires}: true ({option.help})")
        if option.url_remote_by is not None:
            problems += _url_problems(key, option.help, effective, option.url_remote_by)
    return problems


def _url_problems(key: str, help: str, effective: dict[str, Any], remote_by: str) -> list[str]:
    """A server's URL: required, and on this machine unless the variant's ``remote_by`` option is true."""
    url = effective[key]
    if not url:
        return [f"{key}: required ({help})"]
    if url_problem(url) is None and not is_loopback(url) and effective.get(remote_by) is not True:
        return [
            f"{key}: {url} is not on this machine, and a remote server's figures include the network: set "
            f"{remote_by}: true to measure it anyway"
        ]
    return []


def load_engine_class(impl: str) -> type[Engine]:
    """The class that runs ``impl`` (an inferbench.engines.base.Engine), its module imported now."""
    engine_class: type[Engine] = load_target(engine_info(impl).target)
    return engine_class
