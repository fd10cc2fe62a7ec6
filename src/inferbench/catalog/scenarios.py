"""The scenario axis, declared once: how a cell's prepared engine is driven and timed (each scenario's
timed loop is a module of inferbench.scenarios). Light: the Snakefile, the config schema's enum, the
cell paths and the CLI read it. Each scenario names the function that measures a prepared cell
(``"module:function"``, imported only when a cell runs, like an engine's class), the files its cells'
jobs write beside their records (the workflow's rule for its cells declares them as outputs), and the
layout its studies' answers take where it needs one of its own.

Cells of training engines are measured by ``TRAINING`` (one call is a training step or an epoch), cells
of generation engines by ``GENERATION`` (one call is a request: a prompt, then tokens one by one); their
key's scenario is ``single``, the value their paths have always had. A scenario of its own for such engines
declares the engine modes it drives (``modes``): ``llm_load`` drives generation engines under load.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferbench.catalog.layouts import GENERATION_PLOT, SERVING_PLOT
from inferbench.catalog.targets import target_module

#: where a serving cell's job keeps LoadGen's logs, beside its record: ``<cell>.loadgen/<run>/``
LOADGEN_LOGS = ".loadgen"


@dataclass(frozen=True)
class ScenarioInfo:
    #: ``"module:function"``: ``function(cell: PreparedCell) -> Measured`` (inferbench.scenarios.prepare)
    target: str
    description: str
    #: queries served through MLPerf LoadGen and a dynamic batcher, rather than calls timed one by one: its
    #: cells get the run's serving settings (config `serving`, their studies' latency bound)
    serves: bool = False
    #: files a cell's job writes beside its record besides the per-call samples every cell has (storage:
    #: inferbench.core.storage), by name: the suffix that replaces the record's ``.json``, ``/`` at the end
    #: for a folder
    outputs: tuple[tuple[str, str], ...] = ()
    #: the layout (inferbench.catalog.layouts) of the studies that list it, where it needs one of its own:
    #: then such a study lists only scenarios of that layout
    layout: str | None = None
    #: the plots of a workload its cells are drawn in, beside those of the workload's kind that cells timed call
    #: by call are drawn in: (file name (inferbench.catalog.layouts), ``"module:function"`` that draws it:
    #: ``function(records, workload, out, variants) -> Path``); the workflow makes a plot's inputs from it
    plots: tuple[tuple[str, str], ...] = ()
    #: the plots of a workload drawn from the run's summary rather than its records (a re-rendered summary draws
    #: them too): (file name, ``"module:function"``: ``function(summary, workload, out, variants) -> Path``)
    summary_plots: tuple[tuple[str, str], ...] = ()
    #: ``"module:function"``: ``function(rows, report_dir) -> list[str]``, the report appendix's section of its
    #: cells (their summary rows; their records and tables beside the report), heading included, where it writes
    #: one of its own; and ``"module:NAME"``, the paragraph the appendix's "What was measured" says of them
    details: str | None = None
    method: str | None = None
    #: ``"module:function"``: ``function(run_a, run_b) -> list[str]``, the lines `inferbench compare` adds for its
    #: cells, from two runs as it loaded them (analysis.compare_runs.Run: their summaries, and the path each was
    #: given as, where their own files sit beside); scenarios that share a hook are compared by it once
    compared: str | None = None
    #: the modes of the engines it drives (EngineInfo.mode): the plain scenario drives every mode (through
    #: TRAINING and GENERATION for train and generate engines), the others inference engines unless they say
    modes: tuple[str, ...] = ("inference",)
    #: the config section holding its settings, where it has some (a study may override them under the same
    #: key): the workflow resolves them per cell and passes them in the measure settings (``scenario_settings``)
    settings: str | None = None
    #: ``"module:Class"``: the type of those settings, resolved for a cell: ``Class.from_dict(values)`` (a ValueError
    #: says what it refuses) and ``.problems()``, what the config check refuses besides; where its requests' lengths
    #: spread, ``Class.longest_request(prompt, new_tokens, prompt_range, output_range)``, what a model must hold;
    #: where a cell takes keys from its study or variant besides, ``Class.for_cell(values, study, variant)``, and
    #: where two studies' settings of one cell may be reconciled, ``Class.combined(a, b)`` (None: they conflict).
    #: A class of inferbench.core.settings.Settings writes its defaults and help texts into the schema
    settings_type: str | None = None
    #: ``"module:function"``: ``function(records) -> dict``, record fields of a cell (e.g. its ``sections``) from its
    #: processes' records, where pooling their per-call samples does not make them (the cell runner replaces
    #: them in the merged record once every process is done)
    merge: str | None = None
    #: ``"module:function"``: ``function(record) -> dict``, the summary columns its cells add to those every cell has
    #: (from their record's section, ``record.sections[section]``, where its measurement keeps its own figures)
    columns: str | None = None
    #: ``"module:NAME"``: the summary columns of numbers among them, in order: a field of one that is not a number
    #: is a damaged summary, refused by name wherever a summary is read (inferbench.analysis.summary_checks)
    numeric: str | None = None
    #: ``"module:function"``: ``function(engine_class, device, precision) -> str | None``, why an engine of this
    #: class cannot be driven by the scenario there (its cell is then ``unavailable`` with that reason), or None
    unavailable: str | None = None

    @property
    def module(self) -> str:
        return target_module(self.target)

    @property
    def section(self) -> str:
        """The name of its figures in a record (``CellRecord.sections``): its folder's, which the scenarios of one
        folder share (LoadGen's server and offline)."""
        return self.module.rsplit(".", 2)[-2]


def _loadgen(description: str, plots: tuple[tuple[str, str], ...] = ()) -> ScenarioInfo:
    """A scenario of MLPerf LoadGen's, served through the dynamic batcher (inferbench.scenarios.serving); the two
    share one appendix section."""
    return ScenarioInfo(
        "inferbench.scenarios.serving.measure:measure",
        description,
        serves=True,
        outputs=(("loadgen", f"{LOADGEN_LOGS}/"),),
        layout="serving",
        plots=plots,
        details="inferbench.scenarios.serving.answer:details_section",
        method="inferbench.scenarios.serving.answer:SERVING_MEASURED",
        columns="inferbench.scenarios.serving.columns:columns",
        numeric="inferbench.scenarios.serving.columns:NUMERIC",
        compared="inferbench.scenarios.serving.answer:compared_cells",
        settings="serving",
        settings_type="inferbench.scenarios.serving.settings:ServingSettings",
        unavailable="inferbench.scenarios.serving.measure:unavailable_reason",
    )


#: the values of a cell's scenario axis (CellKey.scenario)
SCENARIOS: dict[str, ScenarioInfo] = {
    "single": ScenarioInfo(
        "inferbench.scenarios.single.measure:measure",
        "calls timed one at a time: latency and throughput at two boundaries (device, end to end)",
    ),
    "server": _loadgen(
        "MLPerf LoadGen's server scenario: Poisson arrivals; the highest QPS whose p99 stays within the bound",
        # p99 against QPS, every run of the search
        plots=((SERVING_PLOT, "inferbench.scenarios.serving.plots:plot_server"),),
    ),
    "offline": _loadgen("MLPerf LoadGen's offline scenario: every query at once; samples per second"),
    "llm_load": ScenarioInfo(
        "inferbench.scenarios.llm_load.measure:measure",
        "a decoder under load: requests arriving at a rate (or a fixed concurrency) while earlier ones decode, "
        "batched continuously; TTFT, TPOT, ITL, e2e and goodput per load, the highest rate meeting the objective",
        layout="llm_load",
        plots=((SERVING_PLOT, "inferbench.scenarios.llm_load.plots:plot_llm_load"),),  # TTFT, TPOT against the rate
        modes=("generate",),
        settings="llm_load",
        settings_type="inferbench.scenarios.llm_load.arrivals:LoadSettings",
        merge="inferbench.scenarios.llm_load.measure:merged_fields",
        details="inferbench.scenarios.llm_load.answer:details_section",
        method="inferbench.scenarios.llm_load.answer:LLM_LOAD_MEASURED",
        compared="inferbench.scenarios.llm_load.answer:compared_loads",
        columns="inferbench.scenarios.llm_load.columns:columns",
        unavailable="inferbench.scenarios.llm_load.measure:unavailable_reason",
    ),
}
#: the top-level fields in which records before schema 4 kept a scenario's own figures (inferbench.core.cells reads
#: them into ``sections``): names of a past record format, not of today's folders
SECTION_FIELDS_BEFORE_4 = ("serving", "generation", "scenario_section")
#: how cells of training engines (EngineInfo.mode "train") are measured
TRAINING = ScenarioInfo(
    "inferbench.scenarios.training.measure:measure",
    "training steps (or epochs) timed one at a time, like inference calls",
)


#: how cells of generation engines (EngineInfo.mode "generate") are measured
GENERATION = ScenarioInfo(
    "inferbench.scenarios.generation.measure:measure",
    "requests answered one after another: time to first token, time per output token, request latency",
    # per output token and to the first, against the batch
    summary_plots=((GENERATION_PLOT, "inferbench.scenarios.generation.plots:plot_generation"),),
    merge="inferbench.scenarios.generation.measure:merged_fields",
    details="inferbench.scenarios.generation.answer:details_section",
    method="inferbench.scenarios.generation.answer:GENERATION_MEASURED",
    columns="inferbench.scenarios.generation.columns:columns",
)


#: the module of the run's table of every load of every cell served under load, ``loads.csv`` beside the summary:
#: ``write_loads(records, path)`` makes it, ``read_loads(path)`` reads it (None where there is none), ``LOADS_CSV``
LOADS_TABLE = "inferbench.scenarios.llm_load.loads"


#: the scenario of a cell whose path names none
PLAIN = "single"


def path_suffix(scenario: str) -> str:
    """What a cell's path carries after its threads: nothing for the plain scenario, else ``-<scenario>``."""
    return "" if scenario == PLAIN else f"-{scenario}"


def record_plots() -> list[str]:
    """Every plot a scenario declares drawn from its cells' records (``ScenarioInfo.plots``), by file name."""
    return sorted({plot for info in SCENARIOS.values() for plot, _ in info.plots})


def declared_targets(field: str) -> tuple[str, ...]:
    """The ``"module:function"`` targets the scenarios declare in ``field`` (``columns``, ``details``, ``plots``...):
    roots of the code identity of the jobs that reach them through their declaration, which no import follows."""
    values = [getattr(info, field) for info in _every_declaration()]
    targets = [target for value in values if value for target in _targets_of(value)]
    return tuple(sorted(set(targets)))


def _targets_of(value: str | tuple[tuple[str, str], ...]) -> list[str]:
    """A declaration's targets: itself, or the drawer of each (file name, drawer) pair."""
    return [value] if isinstance(value, str) else [target for _, target in value]


def scenario_plots() -> set[str]:
    """Every plot a scenario declares, drawn from its cells' records or from the summary, by file name: the first
    page shows each where it answers a study."""
    return {plot for info in _every_declaration() for plot, _ in (*info.plots, *info.summary_plots)}


def summary_plot_drawer(plot: str) -> str | None:
    """What draws ``plot`` from a summary (``ScenarioInfo.summary_plots``: the first declaration's), or None."""
    drawn = [dict(info.summary_plots)[plot] for info in _every_declaration() if plot in dict(info.summary_plots)]
    return drawn[0] if drawn else None


def _every_declaration() -> tuple[ScenarioInfo, ...]:
    """The scenario axis's declarations and those of the train and generate engines' cells."""
    return (*SCENARIOS.values(), TRAINING, GENERATION)


def drawers(plot: str) -> dict[str, str]:
    """The scenarios whose cells a workload's ``plot`` draws, each with what draws it (``ScenarioInfo.plots``)."""
    return {name: dict(info.plots)[plot] for name, info in SCENARIOS.items() if plot in dict(info.plots)}


def scenario_info(scenario: str, mode: str = "inference") -> ScenarioInfo:
    """What measures a cell of ``scenario`` whose engine runs in ``mode`` (inference, train or generate)."""
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario must be one of {tuple(SCENARIOS)}, got {scenario!r}")
    own = {"train": TRAINING, "generate": GENERATION}
    if mode in own:
        if scenario == PLAIN:
            return own[mode]
        if mode not in SCENARIOS[scenario].modes:
            raise ValueError(f"a {mode} engine's cells are timed by their own scenario, not as {scenario!r}")
    return SCENARIOS[scenario]


def drives(scenario: str, mode: str) -> bool:
    """Whether ``scenario`` drives engines of ``mode`` (the plain scenario: every mode)."""
    return scenario == PLAIN or mode in SCENARIOS[scenario].modes
