"""What the workflow's rules ask of a run's config, computed once: its cells, and for each cell job its input
files, its arguments, its threads, priority and group. The Snakefile (workflow/rules/common.smk) turns a
job's wildcards into a cell key and asks here; the rules stay wiring."""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from inferbench.catalog.layouts import LAYOUTS, plot_names
from inferbench.catalog.scenarios import PLAIN, SCENARIOS, drawers
from inferbench.catalog.workloads import ordered, workload_info
from inferbench.core.cells import CellKey
from inferbench.engines.registry import engine_info, onnx_path
from inferbench.engines.tensorrt.plans import current_target, plan_path
from inferbench.plan.config import cell_tolerance
from inferbench.plan.grid import (
    cell_min_iters,
    cell_scenario_settings,
    config_cells,
    run_has_cuda,
    study_cells,
)

#: where the workflow keeps the cells' records and the plots
CELLS_DIR = "results/cells"
PLOTS_DIR = "results/plots"
#: the engine modes whose compiling cells are primed in a job of their own: a generation engine's compile (the
#: decode step's, vLLM's) stays in its cell's first process
PRIMED_MODES = ("inference", "train")


@dataclass(frozen=True)
class RunPlan:
    """A validated config's cells and what each cell's job needs."""

    config: dict[str, Any] = field(repr=False)
    #: whether the run's cells go on a GPU (None: no study of this run asks)
    has_cuda: bool | None
    cells: list[CellKey]
    #: timed calls per cell: more where one of its studies reports a tail percentile (p99: 100)
    min_iters: dict[CellKey, int]
    #: cells of a scenario with settings of its own (its config section, their studies' over it); the
    #: config check has refused a cell given different settings by two studies
    scenario_settings: dict[CellKey, dict[str, Any]]
    #: GPU model and TensorRT version naming the engine cache; None where TensorRT or the GPU is missing
    trt_target: str | None
    #: the cells of a study with `interleave: true` that differ only in their engine variant, measured by one job
    #: one process of each in turn (inferbench.launch.cell_job.measure_in_turn): the job's folder, its members
    interleaved: dict[str, list[CellKey]] = field(default_factory=dict)

    @classmethod
    def of(cls, config: dict[str, Any]) -> RunPlan:
        """The plan of ``config``, validated before (inferbench.plan.config.validate_config)."""
        has_cuda = run_has_cuda(config)
        cells = config_cells(config, has_cuda)
        uses_tensorrt = any(config["engines"][c.engine]["engine"] == "tensorrt" for c in cells)
        return cls(
            config,
            has_cuda,
            cells,
            cell_min_iters(config, has_cuda),
            cell_scenario_settings(config, has_cuda),
            current_target() if uses_tensorrt else None,
            interleaved_groups(config, has_cuda),
        )

    @property
    def workloads(self) -> list[str]:
        return ordered(cell.workload for cell in self.cells)

    @property
    def profiled_cells(self) -> list[CellKey]:
        """Cells named (or matched by a glob) in config `profile.cells`; patterns matching no cell here are
        skipped, since one config serves CPU-only and GPU machines."""
        patterns = self.config["profile"]["cells"]
        return [c for c in self.cells if any(fnmatch.fnmatchcase(c.cell_id, p) for p in patterns)]

    @property
    def roofline_cells(self) -> list[CellKey]:
        """Cells of the studies with `roofline: true`: their shapes' costs and their devices' peaks are measured."""
        studies = [self.config["studies"][name] for name in self.config["run"]]
        found = (study_cells(s, self.config["engines"], self.has_cuda) for s in studies if s.get("roofline"))
        return sorted(set().union(*found))

    @staticmethod
    def record(cell: CellKey) -> str:
        """Where the workflow keeps ``cell``'s record."""
        return f"{CELLS_DIR}/{cell.relpath}"

    def timed_records(self, workload: str) -> list[str]:
        """The records of ``workload``'s cells timed call by call: its plots of its kind's are drawn from them."""
        return [self.record(c) for c in self.cells if c.workload == workload and c.scenario == PLAIN]

    def plotted_records(self, workload: str, plot: str) -> list[str]:
        """The records ``plot`` of ``workload`` is drawn from: its cells of the scenarios drawn in it."""
        drawn = drawers(plot)
        return [self.record(c) for c in self.cells if c.workload == workload and c.scenario in drawn]

    def report_records(self) -> list[str]:
        """The records the report reads beside the summary: those of cells whose study's layout needs what no
        summary column holds (an LLM serving cell's sweep)."""
        reads = {name for name, info in SCENARIOS.items() if info.layout and LAYOUTS[info.layout].records}
        return [self.record(c) for c in self.cells if c.scenario in reads]

    def plot_files(self) -> list[str]:
        """Every plot of the run: the plots of each workload's kind where it has cells timed call by call, and
        the plots its other scenarios' cells are drawn in."""
        timed = ordered(c.workload for c in self.cells if c.scenario == PLAIN)
        plots = [f"{PLOTS_DIR}/{w}/{name}" for w in timed for name in plot_names(w)]
        for w in ordered(c.workload for c in self.cells):
            drawn = {plot for c in self.cells if c.workload == w for plot, _ in SCENARIOS[c.scenario].plots}
            plots += [f"{PLOTS_DIR}/{w}/{plot}" for plot in sorted(drawn)]
        return plots

    def variant(self, cell: CellKey) -> dict[str, Any]:
        """The engine variant's options (config `engines.<name>`)."""
        return self.config["engines"][cell.engine]

    def inputs(self, cell: CellKey) -> dict[str, str]:
        """The model description; the checkpoint or ONNX file the engine needs; the parity reference
        (inference and generation); the processed dataset for engines that read it."""
        impl = self.variant(cell)["engine"]
        info = engine_info(impl)
        inputs = {"meta": f"results/models/{cell.workload}.json"}
        if info.artifact == "checkpoint":
            inputs["artifact"] = f"results/models/{cell.workload}.pt"
        elif info.artifact == "onnx":
            inputs["artifact"] = onnx_path(impl, cell.workload, cell.precision, self.variant(cell))
        elif info.artifact == "trt_plan" and self.trt_target and cell.device == "cuda":
            # without TensorRT there is nothing to build: the cell runs without a plan and records why
            plan = plan_path(self.trt_target, cell.engine, cell.workload, cell.precision, cell.batch_size, cell.seq_len)
            inputs["artifact"] = str(plan)
        dataset = workload_info(cell.workload).dataset
        if info.needs_dataset and dataset:
            inputs["data"] = f"data/processed/{dataset}.parquet"
        if info.artifact != "none" and info.mode != "train":
            inputs["reference"] = f"results/reference/{cell.workload}-s{cell.seq_len}.npz"
        return inputs

    def primed(self, cell: CellKey) -> str | None:
        """The record of the cell's priming job, where it has one: a cell timed call by call whose engine
        compiles (torch.compile: inference or training) is compiled from nothing in a job of its own
        (inferbench.launch.cell_job.prime_cell), whose caches its measuring processes load."""
        options = self.variant(cell)
        info = engine_info(options["engine"])
        if cell.scenario != PLAIN or info.mode not in PRIMED_MODES or not info.compiles_with(options):
            return None
        return f"results/primed/{cell.cell_id}.json"

    def tolerance(self, cell: CellKey) -> dict[str, Any]:
        """The cell's parity tolerance against FP32 eager."""
        return cell_tolerance(self.config["parity"]["tolerances"], self.variant(cell), cell.precision, cell.device)

    def measure(self, cell: CellKey) -> dict[str, Any]:
        """The measure settings of one cell: config `measure`, with the timed calls its studies need and, for a
        scenario with settings of its own, its settings as its studies resolve them (only there: the params
        of every other cell stay as they were)."""
        measure = {**self.config["measure"], "min_iters": self.min_iters.get(cell, self.config["measure"]["min_iters"])}
        if cell in self.scenario_settings:
            measure["scenario_settings"] = self.scenario_settings[cell]
        return measure

    def args(self, cell: CellKey) -> list[str]:
        """The arguments naming a cell, shared by run-cell and profile-cell: its axes, the variant's options,
        the measure settings (with its scenario's own settings). They depend on the cell only:
        Snakemake records such params and re-runs the job when they change."""
        scenario: list[str] = []
        if cell.scenario != PLAIN:
            scenario = ["--scenario", cell.scenario]
        return [
            *("--workload", cell.workload, "--engine", cell.engine, "--precision", cell.precision),
            *("--device", cell.device, "--batch", str(cell.batch_size), "--seq", str(cell.seq_len)),
            *("--threads", str(cell.threads)),
            *("--engine-options", json.dumps(self.variant(cell), sort_keys=True)),
            *("--measure", json.dumps(self.measure(cell), sort_keys=True)),
            *scenario,
        ]

    def interleaved_folder(self, cell: CellKey) -> str | None:
        """The folder of the job that measures ``cell`` in turn with others, where it has one."""
        folder = self.interleaved_folder_of(cell)
        return folder if cell in self.interleaved.get(folder, ()) else None

    @staticmethod
    def interleaved_folder_of(cell: CellKey) -> str:
        """The folder of the job of cells measured in turn that would hold ``cell`` (its engine aside)."""
        return f"results/interleaved/{shape_stem(cell)}"

    def interleaved_members(self, folder: str) -> list[str]:
        """run-interleaved's ``--member`` arguments: each cell's run-cell arguments, its record in ``folder``."""
        return [
            arg
            for cell in self.interleaved[folder]
            for arg in ("--member", json.dumps(self.run_cell_argv(cell, f"{folder}/{cell.relpath}")))
        ]

    def run_cell_argv(self, cell: CellKey, out: str) -> list[str]:
        """run-cell's arguments for ``cell`` with its record at ``out``: how a job of cells measured in turn
        names each of them (its rule's inputs are theirs)."""
        primed = self.primed(cell)
        return [
            *self.args(cell),
            *input_args(self.inputs(cell), with_reference=True),
            *("--tolerance", json.dumps(self.tolerance(cell), sort_keys=True)),
            *(["--primed", primed] if primed else []),
            *("--out", out),
        ]

    def interleaved_inputs(self, folder: str) -> list[str]:
        """The files a job of cells measured in turn reads: each member's inputs and priming record."""
        cells = self.interleaved[folder]
        return ordered(path for c in cells for path in [*self.inputs(c).values(), self.primed(c)] if path)

    @staticmethod
    def threads(cell: CellKey) -> int:
        """CPU cells use their `threads` axis; a GPU cell's host side (the launching thread, staging, the
        telemetry sampler) gets 4, which is also what a cluster job of it asks for."""
        return max(1, cell.threads) if cell.device == "cpu" else 4

    def priority(self, cell: CellKey) -> int:
        """GPU jobs run one at a time, so one is always running: GPU cells come before CPU cells (1), and
        cells that compile first of all (2). A GPU cell's preparation (its compile: tens of seconds) then
        overlaps the CPU cells' preparation. At one priority, CPU cell jobs waiting for the measuring lock
        could hold every core while the GPU stands idle."""
        if cell.device != "cuda":
            return 0
        options = self.variant(cell)
        return 1 + int(engine_info(options["engine"]).compiles_with(options))

    #: priming jobs come first of all: they hold no GPU slot, and their compiles (up to a minute or more) then
    #: overlap the run's other preparation, before the measurements that must wait for them begin
    PRIME_PRIORITY = 3

    @staticmethod
    def group(cell: CellKey) -> str | None:
        """CPU cells form the group `cpu_cells`: alone in a cluster job each, unless the submission bundles
        them (--group-components cpu_cells=N). Local runs ignore groups. GPU cells stay alone."""
        return "cpu_cells" if cell.device == "cpu" else None


#: the flag that names each file a cell is prepared from (``RunPlan.inputs``) to run-cell, prime-cell and profile-cell
INPUT_FLAGS = {"meta": "--model-meta", "artifact": "--artifact", "data": "--data", "reference": "--reference"}


def input_args(inputs: Mapping[str, str], with_reference: bool = False) -> list[str]:
    """The arguments naming the files in ``inputs`` (a cell job's inputs, by name), the parity reference only
    ``with_reference``."""
    names = [name for name in INPUT_FLAGS if name != "reference" or with_reference]
    return [arg for name in names if name in inputs for arg in (INPUT_FLAGS[name], inputs[name])]


def shape_stem(cell: CellKey) -> str:
    """A cell's path without its engine variant: what the cells measured in turn share."""
    return f"{cell.workload}/{cell.precision}/{cell.device}/b{cell.batch_size}-s{cell.seq_len}-t{cell.threads}"


def interleaved_groups(config: dict[str, Any], has_cuda: bool | None) -> dict[str, list[CellKey]]:
    """The run's jobs of cells measured in turn: for every study with `interleave: true`, its cells timed call by
    call grouped by all but their engine variant (the groups of two studies with a shape in common joined); a
    group needs two cells. Keyed by the job's folder, ``results/interleaved/<shape_stem>``."""
    groups: dict[str, set[CellKey]] = {}
    for name in config["run"]:
        study = config["studies"][name]
        if not study.get("interleave"):
            continue
        for cell in study_cells(study, config["engines"], has_cuda):
            if cell.scenario == PLAIN:
                groups.setdefault(RunPlan.interleaved_folder_of(cell), set()).add(cell)
    return {folder: sorted(cells) for folder, cells in sorted(groups.items()) if len(cells) > 1}
