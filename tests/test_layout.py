"""The package's layout holds: no import cycle anywhere (function-level imports included), registries
that the Snakefile reads stay light, and engines carry no measuring policy."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from inferbench.engines.base import Engine
from inferbench.engines.registry import ENGINES, load_engine_class
from inferbench.plan.code import SOURCE, direct_imports, module_file, package_modules
from tests.conftest import REPO

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_cycles_are_found_where_there_are_some():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_the_package_imports_itself_back():
    modules = package_modules()
    assert len(modules) > 60 and "inferbench.scenarios.single.measure" in modules
    graph = {module: direct_imports(module) for module in modules}
    assert graph["inferbench.scenarios.run"], "the walk sees imports"
    assert _cycles(graph) == []


#: the package's homes, one per axis or concern, in layers from the ground floor up: a package imports
#: only packages of layers below its own (docs/contributing.md draws the same floors)
LAYERS: tuple[tuple[str, ...], ...] = (
    ("catalog",),  # light declarations: the axes, layouts, verbs, exporters; imports nothing of the package
    ("core",),  # the cell key and record, storage, settings, statistics
    ("machine",),  # the machine-wide lock, GPU slots, the host's partition, the watchdog
    ("data", "models"),
    ("trackers",),
    ("engines",),
    ("scenarios",),  # timed loops
    ("launch",),  # the cell runner: a cell's job, its fresh processes, the warm start
    ("plan",),  # config checks, the grid, code identities
    ("analysis",),
    ("report", "exporters"),
    ("cli",),
)
HOMES = tuple(home for layer in LAYERS for home in layer)


#: the modules of a scenario's folder that are its face in the report (its answer, its plots): they stand on the
#: report's floor, reached only through the scenario's declaration (inferbench.catalog.scenarios)
FACE_MODULES = ("answer", "plots")


def _package(module: str) -> str:
    """The home ``module`` counts in: its package's, a scenario folder's face the report's."""
    parts = module.split(".")
    if len(parts) == 4 and parts[1] == "scenarios" and parts[3] in FACE_MODULES:
        return "report"
    return parts[1] if len(parts) > 1 else ""


def test_a_scenario_folders_face_stands_on_the_reports_floor():
    assert _package("inferbench.scenarios.llm_load.answer") == "report"
    assert _package("inferbench.scenarios.llm_load.measure") == "scenarios"
    assert _package("inferbench.report.plots") == "report" and _package("inferbench") == ""


#: calls that import a module named by their first argument: an import the statements do not show
_IMPORTING_CALLS = {"import_module", "__import__", "load_target"}


def runtime_imports(source: str) -> set[str]:
    """The package's modules that calls such as ``importlib.import_module("inferbench.x")`` load, from the
    literal text of their first argument (an f-string's text before its first field, a target's
    ``"module:name"`` before its colon)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        argument = node.args[0]
        if name not in _IMPORTING_CALLS:
            continue
        if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
            text = argument.value
        elif isinstance(argument, ast.JoinedStr) and argument.values and isinstance(argument.values[0], ast.Constant):
            text = str(argument.values[0].value)
        else:
            continue
        module = text.split(":")[0].rstrip(".")
        if module.split(".")[0] == "inferbench":
            found.add(module)
    return found


def test_imports_through_importlib_are_counted():
    source = (
        "import importlib\n"
        "def find(family):\n"
        "    importlib.import_module('inferbench.engines')\n"
        "    return importlib.import_module(f'inferbench.scenarios.{family}')\n"
        "load_target('inferbench.report.tables:table')\n"
        "importlib.import_module(name)\n"
    )
    assert runtime_imports(source) == {"inferbench.engines", "inferbench.scenarios", "inferbench.report.tables"}


def package_graph() -> dict[str, set[str]]:
    """Which of the package's homes each home imports: its import statements (function-level ones
    included) and the modules it loads through importlib by name."""
    graph: dict[str, set[str]] = {home: set() for home in HOMES}
    for module in package_modules():
        home = _package(module)
        if home in graph:
            loaded = runtime_imports(module_file(module, SOURCE).read_text())
            graph[home] |= {_package(other) for other in direct_imports(module) | loaded} - {home, ""}
    return graph


def test_no_package_imports_a_package_that_imports_it_back():
    graph = package_graph()
    assert graph["cli"] >= {"launch", "scenarios", "catalog"}, "the walk sees imports"
    assert _cycles(graph) == []


def test_each_package_imports_only_the_layers_below_it():
    layer_of = {home: level for level, layer in enumerate(LAYERS) for home in layer}
    upward = sorted(
        f"{home} (layer {layer_of[home]}) imports {other} (layer {layer_of[other]})"
        for home, imported in package_graph().items()
        for other in imported
        if layer_of[other] >= layer_of[home]
    )
    assert upward == []
    assert package_graph()["catalog"] == set(), "the ground floor imports nothing of the package"


def test_one_home_per_axis():
    modules = set(package_modules())
    homes = {f"inferbench.{home}" for home in HOMES}
    assert homes <= modules
    # nothing of substance at the top: every module lives in the package of its concern
    assert {m for m in modules if m.count(".") == 1} - {"inferbench.__main__"} == homes


def test_the_registries_the_snakefile_reads_import_nothing_heavy():
    code = (
        "import sys\n"
        "import inferbench.plan.grid, inferbench.plan.config, inferbench.plan.code, inferbench.data\n"
        "import inferbench.engines.registry, inferbench.catalog.scenarios, inferbench.catalog.verbs\n"
        "import inferbench.catalog.layouts, inferbench.catalog.exporters, inferbench.engines.tensorrt.plans\n"
        "import inferbench.launch.cell_job, inferbench.analysis.leases\n"
        "heavy = [m for m in ('torch', 'onnxruntime', 'scipy', 'pandas', 'matplotlib', 'timm') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.strip() == "", f"imported at once: {done.stdout.strip()}"


#: what the scenarios decide: an engine declaring any of these would be choosing how it is timed
MEASURING_POLICY = ("timer", "launches_async", "timing", "timing_description", "items_per_call")


@pytest.mark.parametrize("impl", sorted(ENGINES))
def test_engines_carry_no_measuring_policy(impl):
    cls = load_engine_class(impl)
    assert issubclass(cls, Engine)
    for attribute in MEASURING_POLICY:
        assert not hasattr(cls, attribute), f"{impl} declares {attribute}: the scenario decides how a call is timed"


def test_the_ground_floor_loads_nothing_of_the_package_when_imported():
    # the import statements say so (test_each_package_imports_only_the_layers_below_it); this asks the
    # interpreter, which also sees what a module loads by name while it loads
    catalog = [m for m in package_modules() if m.startswith("inferbench.catalog.")]
    code = (
        "import importlib, sys\n"
        f"for name in {catalog!r}:\n"
        "    importlib.import_module(name)\n"
        "print(','.join(sorted(m for m in sys.modules if m.startswith('inferbench.') "
        "and not m.startswith('inferbench.catalog'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert len(catalog) >= 6 and done.stdout.strip() == ""


#: the most lines (its docstring included) a function of the timed loops' packages may take: a reader follows
#: one on a screen
LONGEST_FUNCTION = 60


def test_the_timed_loops_are_functions_a_reader_can_follow():
    """No function in scenarios/ or launch/ is longer than LONGEST_FUNCTION lines."""
    long = []
    for package in ("scenarios", "launch"):
        for path in sorted((SOURCE / "inferbench" / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > LONGEST_FUNCTION:
                        long.append(f"{path.relative_to(SOURCE)}:{node.lineno} {node.name}: {lines} lines")
    assert not long, "split these into steps a reader can follow:\n" + "\n".join(long)
