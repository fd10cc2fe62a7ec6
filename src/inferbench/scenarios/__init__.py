"""Scenarios: how a cell's prepared engine is driven and timed, each in a module of its own that owns its
timed loop and says what its boundaries mean.

This module is the scenario axis, declared once (light: the Snakefile, the config schema's enum and
the cell paths read it): each scenario names the function that measures a prepared cell
(``"module:function"``, imported only when a cell runs, like an engine's class) and the suffix its cells'
paths carry. Cells of training engines are measured by ``TRAINING`` (one call is a training step or an
epoch), cells of generation engines by ``GENERATION`` (one call is a request: a prompt, then tokens one
by one); their key's scenario is ``single``, the value their paths have always had.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferbench.core.targets import target_module


@dataclass(frozen=True)
class ScenarioInfo:
    #: ``"module:function"``: ``function(cell: PreparedCell) -> Measured`` (inferbench.scenarios.prepare)
    target: str
    description: str
    #: what a cell's path carries after its threads ("" for calls timed one at a time)
    path_suffix: str = ""
    #: queries served through MLPerf LoadGen and a dynamic batcher, rather than calls timed one by one
    serves: bool = False

    @property
    def module(self) -> str:
        return target_module(self.target)


#: the values of a cell's scenario axis (CellKey.scenario)
SCENARIOS: dict[str, ScenarioInfo] = {
    "single": ScenarioInfo(
        "inferbench.scenarios.single:measure",
        "calls timed one at a time: latency and throughput at two boundaries (device, end to end)",
    ),
    "server": ScenarioInfo(
        "inferbench.scenarios.serving:measure",
        "MLPerf LoadGen's server scenario: Poisson arrivals; the highest QPS whose p99 stays within the bound",
        "-server",
        serves=True,
    ),
    "offline": ScenarioInfo(
        "inferbench.scenarios.serving:measure",
        "MLPerf LoadGen's offline scenario: every query at once; samples per second",
        "-offline",
        serves=True,
    ),
}
#: how cells of training engines (EngineInfo.mode "train") are measured
TRAINING = ScenarioInfo(
    "inferbench.scenarios.training:measure",
    "training steps (or epochs) timed one at a time, like inference calls",
)


#: how cells of generation engines (EngineInfo.mode "generate") are measured
GENERATION = ScenarioInfo(
    "inferbench.scenarios.generation:measure",
    "requests answered one after another: time to first token, time per output token, request latency",
)


def scenario_info(scenario: str, mode: str = "inference") -> ScenarioInfo:
    """What measures a cell of ``scenario`` whose engine runs in ``mode`` (inference, train or generate)."""
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario must be one of {tuple(SCENARIOS)}, got {scenario!r}")
    own = {"train": TRAINING, "generate": GENERATION}
    if mode in own:
        if scenario != "single":
            raise ValueError(f"a {mode} engine's cells are timed by their own scenario, not as {scenario!r}")
        return own[mode]
    return SCENARIOS[scenario]
