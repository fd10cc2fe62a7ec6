# Validate the config, build the cell list, and small helpers for the rules' inputs and params.
import functools
import json
import re
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

# The workflow runs from a checkout whether or not the package is pip-installed (e.g. in the
# conda environments of envs/, one per family of rules): the Snakefile and every job import it from src/.
PACKAGE_SRC = Path(workflow.basedir) / "src"
sys.path.insert(0, str(PACKAGE_SRC))
shell.prefix(f"export PYTHONPATH='{PACKAGE_SRC}'${{{{PYTHONPATH:+:$PYTHONPATH}}}}; ")

from inferbench.catalog.verbs import DISPATCHER, VERBS
from inferbench.core.cells import CellKey
from inferbench.core import env_vars
from inferbench.catalog.workloads import DEVICES, PRECISIONS, ordered, workload_info
from inferbench.data import DATASETS
from inferbench.engines.registry import engine_info
from inferbench.engines.tensorrt import PRECISIONS as TENSORRT_PRECISIONS
from inferbench.machine.run_lock import clear_stale_locks
from inferbench.plan.code import cell_code_roots, code_identity
from inferbench.plan.config import ConfigError, validate_config
from inferbench.plan.grid import no_cells_message, resolved_studies
from inferbench.plan.jobs import RunPlan, input_args
from inferbench.catalog.layouts import GENERATION_PLOT
from inferbench.analysis.leases import lease_spread_problems
from inferbench.catalog.exporters import EXPORTERS
from inferbench.catalog.scenarios import PLAIN, SCENARIOS, declared_targets, path_suffix, record_plots

try:
    validate_config(config)
except ConfigError as error:
    raise WorkflowError(f"{error}\nFix config/config.yaml (or the --config / --configfile given).") from None
# the spread between leases the report counts (a file compare --out-leases wrote), read before any job
LEASE_PROBLEMS = lease_spread_problems(config["report"]["lease_spread"])
if LEASE_PROBLEMS:
    raise WorkflowError(
        "invalid config:\n  " + "\n  ".join(LEASE_PROBLEMS) + "\nFix config/config.yaml (or the --config given)."
    )
# a bad environment variable (INFERBENCH_*, OMP_NUM_THREADS) is refused by name before any job
ENV_PROBLEMS = env_vars.problems()
if ENV_PROBLEMS:
    raise WorkflowError("\n".join(ENV_PROBLEMS) + "\nFix or unset these environment variables.")

# A run killed with kill -9 leaves Snakemake's directory lock behind; when no other run holds this
# directory, it is stale and goes, so that the same command resumes (inferbench.machine.run_lock).
if not (workflow.remote_exec or workflow.subprocess_exec):
    for stale in clear_stale_locks(Path.cwd()):
        print(f"inferbench: removed {stale}, left by a run that was killed", file=sys.stderr)

PLAN = RunPlan.of(config)  # the run's cells, and what each cell's job needs (inferbench.plan.jobs)
HAS_CUDA = PLAN.has_cuda  # None: no study of this run asks
CELLS = PLAN.cells
if not CELLS:
    raise WorkflowError(no_cells_message(config, HAS_CUDA))
PROFILED_CELLS = PLAN.profiled_cells
TRT_TARGET = PLAN.trt_target
CELL_WORKLOADS = PLAN.workloads
ROOFLINE_CELLS = PLAN.roofline_cells
# every workload the config names (timm:<name> and hf:<type> included): the wildcard constraints
NAMED_WORKLOADS = ordered(w for study in config["studies"].values() for w in study["workloads"])


def raw_file(dataset, source=None):
    """Raw files live under their source, so switching the source never reuses the other source's file."""
    source = source or config["datasets"][dataset]["source"]
    return f"data/raw/{dataset}/{source}/{DATASETS[dataset].raw_name}"


def dataset_options(dataset, keys):
    """The settings of config `datasets.<dataset>` that one job takes (JSON): only those, so that
    changing another one does not re-run it."""
    return json.dumps({key: config["datasets"][dataset].get(key) for key in keys}, sort_keys=True)


@functools.cache
def job_code(*roots):
    """The code identity of the jobs that run ``roots`` (inferbench.plan.code), once per set of roots:
    a param that changes exactly when code the job runs changes."""
    return code_identity(roots, PACKAGE_SRC)


def verb_code(verb):
    """The code identity of a verb's jobs: editing the verb's code re-runs those jobs and no other."""
    return job_code(VERBS[verb].target)


def cell_code(wildcards, scenario=PLAIN):
    """A cell's code identity: its verb's, its engine's and its scenario's code and what they import."""
    return job_code(*cell_code_roots(variant(wildcards)["engine"], scenario))


def prime_code(wildcards):
    """A priming job's code identity: the dispatcher's, the prime-cell verb's and the engine's code."""
    impl = variant(wildcards)["engine"]
    return job_code(DISPATCHER, VERBS["prime-cell"].target, engine_info(impl).module)


def profile_code(wildcards):
    """A profile's code identity: the dispatcher's (it sets up the measuring), the profile-cell verb's and
    the engine's code."""
    impl = variant(wildcards)["engine"]
    return job_code(DISPATCHER, VERBS["profile-cell"].target, engine_info(impl).module)



wildcard_constraints:
    workload="|".join(map(re.escape, NAMED_WORKLOADS)),
    engine="[a-z0-9_]+",
    precision="|".join(PRECISIONS),
    device="|".join(DEVICES),
    batch=r"\d+",
    seq=r"\d+",
    threads=r"\d+",
    dataset="|".join(DATASETS),


def workload_regex(trained=None, kind=None):
    """A wildcard constraint: the named workloads made by training on their dataset (trained=True) or
    built with random weights (False), or those of one input kind (e.g. "text")."""
    names = [
        w
        for w in NAMED_WORKLOADS
        if (trained is None or workload_info(w).trained == trained)
        and (kind is None or workload_info(w).kind == kind)
    ]
    return "|".join(map(re.escape, names)) or "(?!)"  # (?!): matches nothing


def heldout_rows(workload):
    """A trained model's held-out rows (train_mlp), for its reference outputs; none for the others."""
    return [f"results/models/{workload}.heldout.npz"] if workload_info(workload).trained else []


cell_record = PLAN.record


def profile_record(cell):
    return f"results/profiles/{cell.cell_id}/top_ops.json"


def roofline_inputs(wildcards=None):
    """What results/roofline.csv is made from: the cost of each (workload, sequence length) and the
    peaks of each device among the roofline studies' cells."""
    return {
        "costs": [f"results/cost/{w}-s{s}.json" for w, s in sorted({(c.workload, c.seq_len) for c in ROOFLINE_CELLS})],
        "peaks": [f"results/machine/peaks-{d}.json" for d in sorted({c.device for c in ROOFLINE_CELLS})],
    }


def published_outputs(wildcards=None):
    """What publishes the cells' numbers: the summary and the report. A cell's job removes them before it
    measures. A job that fails or is cancelled then leaves no earlier numbers standing, and the plain
    command re-measures its cell: Snakemake re-makes a missing input only for an output it must make."""
    return [*rules.aggregate.output, *rules.report.output]


def cell_rule(scenario):
    """The rule of a scenario's cells (workflow/rules/bench.smk)."""
    return "benchmark_cell" if scenario == PLAIN else f"{scenario}_cell"


def cell_outputs(stem, scenario):
    """The files a cell's job writes (inferbench.core.storage), its scenario's own included, by name."""
    outputs = {"record": f"{stem}.json", "samples": f"{stem}.samples.npy", "e2e_samples": f"{stem}.e2e_samples.npy"}
    for name, suffix in SCENARIOS[scenario].outputs:
        folder = suffix.endswith("/")  # a folder's suffix ends in a slash
        outputs[name] = directory(f"{stem}{suffix[:-1]}") if folder else f"{stem}{suffix}"
    return outputs


def exporter_env(name):
    """An exporter's conda environment: envs/<exporter>.yaml where it needs libraries of its own, else the
    report's."""
    own = Path(workflow.basedir) / "envs" / f"{name}.yaml"
    return f"../../envs/{name}.yaml" if own.exists() else "../../envs/report.yaml"


def final_outputs():
    roofline = ["results/roofline.csv"] if ROOFLINE_CELLS else []
    exported = [f"results/{name}/export.json" for name in config["exporters"]]
    summaries = ["results/summary.csv", "results/summary.parquet", "results/loads.csv"]
    return [*summaries, "results/report.md", *PLAN.plot_files(), *roofline, *exported]


def variant(wildcards):
    return config["engines"][wildcards.engine]


def wildcard_cell(wildcards, scenario=PLAIN):
    """The cell that a job's wildcards name, in the scenario of its rule."""
    return CellKey.of_fields(dict(wildcards.items()), scenario)


def cell_inputs(wildcards):
    return PLAN.inputs(wildcard_cell(wildcards))


def prime_inputs(wildcards):
    """A priming job's inputs: what the cell is prepared from, without the parity reference (it checks none)."""
    return {name: path for name, path in cell_inputs(wildcards).items() if name != "reference"}


def measured_cell_inputs(wildcards, scenario=PLAIN):
    """A cell job's inputs: what the cell is prepared from, for a compiling cell its priming job's record, and for
    a cell measured in turn with others the folder of the job that measured them (interleaved_cells)."""
    cell = wildcard_cell(wildcards, scenario)
    primed = PLAN.primed(cell)
    interleaved = PLAN.interleaved_folder(cell)
    return PLAN.inputs(cell) | ({"primed": primed} if primed else {}) | (
        {"interleaved": interleaved} if interleaved else {}
    )


def interleaved_folder(wildcards):
    """The folder of a job of cells measured in turn (rule interleaved_cells), from its wildcards."""
    return PLAN.interleaved_folder_of(wildcard_cell(wildcards))


def interleaved_code(wildcards):
    """The code identity of a job of cells measured in turn: the verb's and every member's engine and scenario."""
    cells = PLAN.interleaved[interleaved_folder(wildcards)]
    roots = {root for c in cells for root in cell_code_roots(PLAN.variant(c)["engine"], PLAIN)}
    return job_code(VERBS["run-interleaved"].target, *sorted(roots))


def parity_tolerance(wildcards):
    return PLAN.tolerance(wildcard_cell(wildcards))


def cell_threads(wildcards):
    return PLAN.threads(wildcard_cell(wildcards))


def cell_priority(wildcards):
    return PLAN.priority(wildcard_cell(wildcards))


def cell_group(wildcards):
    return PLAN.group(wildcard_cell(wildcards))


def cell_args(wildcards, scenario=PLAIN):
    """The arguments naming a cell (a list: the shell command quotes each item, {params.cell:q})."""
    return PLAN.args(wildcard_cell(wildcards, scenario))


def cell_files(wildcards, input):
    """The files a cell is prepared from (tracked as inputs), the parity reference aside."""
    return input_args(dict(input.items()))


def tensorrt_calibration_data(wildcards):
    """INT8 engines of tabular workloads calibrate on the real (processed) rows of their dataset."""
    dataset = workload_info(wildcards.workload).dataset
    if wildcards.precision == "int8" and dataset:
        return f"data/processed/{dataset}.parquet"
    return []


def model_options(workload):
    return json.dumps(config["models"].get(workload, {}), sort_keys=True)


def used_datasets():
    return sorted({workload_info(w).dataset for w in CELL_WORKLOADS if workload_info(w).trained})


def report_studies():
    """The studies of this run for the report's sections, devices resolved as the cells were (JSON).
    A param of the report: editing a study's axes or question re-makes the report."""
    return json.dumps(resolved_studies(config, HAS_CUDA))  # in run order: the report's order
