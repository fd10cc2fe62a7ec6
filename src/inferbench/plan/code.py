"""A job's code identity: a hash of the package's modules that its job runs, computed from the source.

Snakemake re-runs a job when its params change, and knows nothing of the Python modules a job's command
imports. Each rule's job gets a param with this hash, so that editing any module a job runs re-runs
exactly the jobs that run it: a cell's job runs its verb's function (inferbench.catalog.verbs), its engine's
module and its scenario's module, and every module of the package those import, at the top of a
module or inside a function (what runs in one process may import lazily). Imports under
``if TYPE_CHECKING:`` never run and do not count; importing ``a.b.c`` runs ``a/__init__.py`` and
``a/b/__init__.py``, which do.

The roots are functions or modules: for a verb, its function and what it calls in its own module,
not the whole module (both what is followed for imports and what is hashed), so that a module holding
several verbs' functions (inferbench.cli.models) ties each rule only to its own verb's code. The
dispatcher that routes argv to a verb (``inferbench.__main__`` and ``inferbench.cli.main``) is a root of
the measuring jobs (cells, profiles): it sets up what they measure under (the machine lock, the GPU slot,
the cores kept apart). It computes nothing a preparing job writes, so models and data do not follow it.
Registries that find engines by name (inferbench.engines.registry) import the other families only
through ``importlib``, so a cell's closure holds its own engine's family and no other.

The modules hashed are read, never imported: the hash follows the source tree given (the workflow's
``src/``), whatever version of the package the calling process has imported.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from collections.abc import Iterable
from pathlib import Path

from inferbench.catalog.scenarios import scenario_info
from inferbench.catalog.verbs import DISPATCHER, VERBS
from inferbench.engines.registry import engine_info

PACKAGE = "inferbench"
#: where this module's own source tree is: the default
SOURCE = Path(__file__).resolve().parents[2]


def module_file(module: str, src: Path) -> Path | None:
    """The file of ``module`` under ``src`` (a package's ``__init__.py``), or None if there is none."""
    base = src.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def _tree(path: Path, mtime_ns: int) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _parse(path: Path) -> ast.Module:
    return _tree(path, path.stat().st_mtime_ns)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(nodes: Iterable[ast.AST], module: str, src: Path) -> set[str]:
    """The package's modules that the import statements among ``nodes`` (and below them) load."""
    found: set[str] = set()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == PACKAGE}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the importing module's package
                parts = module.split(".")
                base = ".".join(parts[: len(parts) - node.level] + ([base] if base else []))
            if base.split(".")[0] == PACKAGE:
                # `from a.b import c` loads the module a.b.c where there is one (a.b as its parent),
                # else takes c from the module a.b
                submodules = {f"{base}.{a.name}" for a in node.names if module_file(f"{base}.{a.name}", src)}
                found |= submodules
                if len(submodules) < len(node.names):
                    found.add(base)
        stack.extend(ast.iter_child_nodes(node))
    return {name for name in found if module_file(name, src)}


def package_modules(src: Path = SOURCE) -> list[str]:
    """Every module of the package under ``src``, by name."""
    names = []
    for path in sorted((src / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def direct_imports(module: str, src: Path = SOURCE) -> set[str]:
    """The package's modules that ``module``'s own import statements load (anywhere in it)."""
    path = module_file(module, src)
    if path is None:
        raise ModuleNotFoundError(f"{module} is not under {src}")
    return _imports(_parse(path).body, module, src) - {module}


def _with_parents(module: str) -> set[str]:
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)}


def _function_nodes(tree: ast.Module, name: str) -> list[ast.AST]:
    """The function ``name`` of a module and the module-level functions it refers to (its decorators
    included), transitively: the code a call of it runs within its module."""
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
    if name not in defs:
        raise KeyError(f"no top-level function {name!r}")
    seen: dict[str, ast.AST] = {}
    todo = [name]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen[current] = defs[current]
        todo += [n.id for n in ast.walk(defs[current]) if isinstance(n, ast.Name) and n.id in defs]
    return list(seen.values())


def _closure(roots: Iterable[str], src: Path) -> tuple[set[str], dict[str, set[str]]]:
    """``import_closure``, and the modules of it that run only in part: a ``"module:function"`` root's
    module that nothing else imports whole, with the functions of it that run."""
    closure: set[str] = set()
    walked: set[str] = set()  # modules whose every import has been followed
    partial: dict[str, set[str]] = {}
    todo: list[str] = []
    for root in roots:
        module, _, function = root.partition(":")
        path = module_file(module, src)
        if path is None:
            raise ModuleNotFoundError(f"{module} is not under {src}")
        todo += sorted(_with_parents(module))
        if function:
            todo.remove(module)
            partial.setdefault(module, set()).add(function)
            closure.add(module)
            todo += sorted(_imports(_run_nodes(_parse(path), {function}), module, src))
    while todo:
        module = todo.pop()
        if module in walked:
            continue
        walked.add(module)
        closure.add(module)
        path = module_file(module, src)
        if path is not None:
            todo += sorted((_imports(_parse(path).body, module, src) | _with_parents(module)) - walked)
    return closure, {module: functions for module, functions in partial.items() if module not in walked}


def _run_nodes(tree: ast.Module, functions: set[str]) -> list[ast.stmt]:
    """What of a module runs when ``functions`` of it are called: its top level (but the functions it
    only defines), those functions and what they call in the module; in the file's order."""
    called = {id(node) for name in functions for node in _function_nodes(tree, name)}
    return [n for n in tree.body if not isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) or id(n) in called]


def import_closure(roots: Iterable[str], src: Path = SOURCE) -> set[str]:
    """The package's modules that running ``roots`` loads. A root is ``"module"`` (all of it) or
    ``"module:function"`` (the module's top level, the function and what it calls in its module)."""
    return _closure(roots, src)[0]


def _source(path: Path, functions: set[str] | None) -> bytes:
    """A module's source, or where only ``functions`` of it run, the lines of what runs
    (``_run_nodes``, decorators included): a verb's identity is its own code, not its neighbours'."""
    if functions is None:
        return path.read_bytes()
    lines = path.read_text().splitlines(keepends=True)
    spans = []
    for node in _run_nodes(_parse(path), functions):
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        spans.append("".join(lines[first - 1 : node.end_lineno]))
    return "".join(spans).encode()


def code_identity(roots: Iterable[str], src: Path = SOURCE) -> str:
    """A short hash of the source of every module in ``import_closure(roots)`` (of a function root's
    module, only what runs of it) and of the roots' names, for a rule's param: it changes exactly when
    code the job runs changes."""
    roots = sorted(roots)
    closure, partial = _closure(roots, src)
    digest = hashlib.sha256("\n".join(roots).encode())
    for module in sorted(closure):
        path = module_file(module, src)
        digest.update(module.encode() + b"\0" + (_source(path, partial.get(module)) if path else b"") + b"\0")
    return digest.hexdigest()[:12]


def cell_code_roots(engine_impl: str, scenario: str = "single") -> tuple[str, ...]:
    """What a cell's job runs, as roots of its code identity: the dispatcher, the run-cell verb's function,
    its engine's module and its scenario's module, and what they import."""
    info = engine_info(engine_impl)
    return (DISPATCHER, VERBS["run-cell"].target, info.module, scenario_info(scenario, info.mode).module)
