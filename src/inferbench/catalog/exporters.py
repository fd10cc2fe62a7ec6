"""The exporters: where a run's cells also go, besides summary.csv and the report (an experiment tracker).

An exporter is one module of inferbench.exporters, found by its file's name, so adding one is one file:
its docstring's first line says what it does (``inferbench list exporters``), its
``export(summary, cells_dir, plots_dir, out_dir, **options) -> dict`` writes the summary's cells where
they go and returns what it did (the workflow keeps it as ``results/<exporter>/export.json``), and its
``add_arguments(parser)``, where it has options of its own, declares them for the export verb. The
config's ``exporters`` values, the verb's choices and the workflow's ``export_<name>`` rules follow.
Nothing here imports an exporter: the modules are listed and their docstrings read from their files.
"""

from __future__ import annotations

import ast
import importlib.util
import pkgutil
from dataclasses import dataclass
from pathlib import Path

#: where the exporters live (a package, imported only when an export runs)
PACKAGE = "inferbench.exporters"


@dataclass(frozen=True)
class ExporterInfo:
    name: str
    description: str
    path: Path

    @property
    def module(self) -> str:
        return f"{PACKAGE}.{self.name}"

    @property
    def target(self) -> str:
        """``"module:function"``: the export, a root of the export job's code identity (inferbench.plan.code)."""
        return f"{self.module}:export"


def _discover() -> tuple[dict[str, ExporterInfo], dict[str, str]]:
    """The exporters, and the modules skipped with why (one that cannot be parsed, or has no ``export``): one bad
    file leaves the others working, and is named wherever exporters are listed or asked for."""
    spec = importlib.util.find_spec(PACKAGE)
    assert spec is not None and spec.submodule_search_locations is not None, f"{PACKAGE} is part of the package"
    found, skipped = {}, {}
    for module in sorted(pkgutil.iter_modules(spec.submodule_search_locations), key=lambda m: m.name):
        if module.ispkg or module.name.startswith("_"):
            continue
        path = Path(spec.submodule_search_locations[0]) / f"{module.name}.py"
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (SyntaxError, UnicodeDecodeError, OSError, ValueError) as error:
            skipped[module.name] = f"{path} cannot be read as Python ({type(error).__name__}: {str(error)[:200]})"
            continue
        if not any(isinstance(node, ast.FunctionDef) and node.name == "export" for node in tree.body):
            skipped[module.name] = f"{path} has no export(summary, cells_dir, plots_dir, out_dir, **options) function"
            continue
        docstring = ast.get_docstring(tree) or ""
        found[module.name] = ExporterInfo(module.name, docstring.strip().split("\n\n")[0].replace("\n", " "), path)
    return found, skipped


EXPORTERS, SKIPPED = _discover()


def exporter_info(name: str) -> ExporterInfo:
    try:
        return EXPORTERS[name]
    except KeyError:
        if name in SKIPPED:
            raise KeyError(f"exporter {name!r} is skipped: {SKIPPED[name]}") from None
        raise KeyError(f"unknown exporter {name!r}; known: {', '.join(EXPORTERS) or 'none'}") from None
