"""The cell list: the product of each study's axes, minus combinations that can never make sense.

Left out (also listed in the README):
- an engine on a device or at a precision its implementation does not support (e.g. ort_cpu on cuda),
  or on a device or precision its variant's ``devices`` / ``precisions`` options leave out;
- an engine on a workload kind it cannot run (the epoch-training engine needs a tabular dataset);
- sequence lengths on non-text workloads (their cells have seq_len 0);
- the thread axis on cuda (cuda cells have threads 0: the host thread count is not swept there).
Cells that could run on another machine (cuda without a GPU) stay in and are recorded `unavailable`.
"""

from __future__ import annotations

import itertools
from typing import Any

from inferbench.catalog.layouts import study_percentiles
from inferbench.catalog.scenarios import SCENARIOS, drives
from inferbench.catalog.targets import load_target
from inferbench.catalog.workloads import workload_info
from inferbench.core.cells import CellKey
from inferbench.core.percentiles import samples_needed
from inferbench.core.settings import schema_defaults
from inferbench.engines.registry import engine_info


def cuda_present() -> bool:
    import torch  # imported only when a study asks for `auto`

    return bool(torch.cuda.is_available())


def resolve_devices(devices: list[str], has_cuda: bool | None = None) -> list[str]:
    """Replace ``auto`` with cuda when a GPU is present here, else cpu; keep order, drop duplicates."""
    out: list[str] = []
    for device in devices:
        if device == "auto":
            has_cuda = cuda_present() if has_cuda is None else has_cuda
            device = "cuda" if has_cuda else "cpu"
        if device not in out:
            out.append(device)
    return out


def _axes(study: dict[str, Any], workload: str, device: str) -> tuple[list[int], list[int]]:
    """A study's sequence lengths and thread counts for one workload and device: sequence lengths for
    text workloads only (0 otherwise), threads on the CPU only (0 on the GPU)."""
    seq_lens = study["seq_lens"] if workload_info(workload).has_seq_len else [0]
    threads = study["threads"] if device == "cpu" else [0]
    return seq_lens, threads


def with_defaults(study: dict[str, Any]) -> dict[str, Any]:
    """The study with the schema's defaults filled in where it leaves a key out."""
    return {**schema_defaults("studies", "additionalProperties"), **study}


def in_study(key: CellKey, study: dict[str, Any]) -> bool:
    """Whether a cell belongs to ``study`` (its ``devices`` resolved): every axis among the study's values,
    by the rules that make the study's cells (``study_cells``), which also leave out what an engine
    cannot run. The report's sections take their rows by this rule."""
    study = with_defaults(study)
    seq_lens, threads = _axes(study, key.workload, key.device)
    return (
        key.workload in study["workloads"]
        and key.engine in study["engines"]
        and key.precision in study["precisions"]
        and key.device in study["devices"]
        and key.batch_size in study["batch_sizes"]
        and key.seq_len in seq_lens
        and key.threads in threads
        and key.scenario in study["scenarios"]
    )


def study_cells(
    study: dict[str, Any], variants: dict[str, dict[str, Any]], has_cuda: bool | None = None
) -> set[CellKey]:
    cells: set[CellKey] = set()
    if study.get("requires_gpu") or study.get("skip_with_gpu"):
        has_cuda = cuda_present() if has_cuda is None else has_cuda
        if bool(has_cuda) != bool(study.get("requires_gpu")):
            return cells
    study = {**with_defaults(study), "devices": resolve_devices(study["devices"], has_cuda)}
    axes = itertools.product(study["workloads"], study["engines"], study["precisions"], study["devices"])
    for workload, variant, precision, device in axes:
        info = engine_info(variants[variant]["engine"])
        allowed_devices = variants[variant].get("devices", info.devices)
        allowed_precisions = variants[variant].get("precisions", info.precisions)
        if device not in info.devices or device not in allowed_devices:
            continue
        if precision not in info.precisions or precision not in allowed_precisions:
            continue
        if workload_info(workload).kind not in info.workload_kinds:
            continue
        seq_lens, threads = _axes(study, workload, device)
        # each scenario drives the engine modes it declares: training engines are timed one step or epoch at a
        # time (no queries to serve), generation engines one request at a time or under load
        scenarios = [s for s in study["scenarios"] if drives(s, info.mode)]
        for batch, seq, n_threads, scenario in itertools.product(study["batch_sizes"], seq_lens, threads, scenarios):
            cells.add(CellKey(workload, variant, precision, device, batch, seq, n_threads, scenario))
    return cells


def run_has_cuda(config: dict[str, Any]) -> bool | None:
    """Whether a GPU is visible here, asked only when a study of the run depends on it (else None)."""
    studies = [config["studies"][name] for name in config["run"]]
    if any("auto" in s["devices"] or s.get("requires_gpu") or s.get("skip_with_gpu") for s in studies):
        return cuda_present()
    return None


def config_cells(config: dict[str, Any], has_cuda: bool | None = None) -> list[CellKey]:
    """All cells of the studies named in ``config['run']``; a cell shared by two studies is one cell."""
    has_cuda = run_has_cuda(config) if has_cuda is None else has_cuda
    cells: set[CellKey] = set()
    for name in config["run"]:
        cells |= study_cells(config["studies"][name], config["engines"], has_cuda)
    return sorted(cells)


def cell_min_iters(config: dict[str, Any], has_cuda: bool | None = None) -> dict[CellKey, int]:
    """Timed calls each cell needs in all (its processes together): ``measure.min_iters``, or more
    where a study the cell belongs to reports a tail percentile (p99: 100 calls)."""
    has_cuda = run_has_cuda(config) if has_cuda is None else has_cuda
    floor = config["measure"]["min_iters"]
    needed: dict[CellKey, int] = {}
    for name in config["run"]:
        study = config["studies"][name]
        calls = max(floor, samples_needed(study_percentiles(study)))
        for cell in study_cells(study, config["engines"], has_cuda):
            needed[cell] = max(needed.get(cell, floor), calls)
    return needed


class SettingsConflict(ValueError):
    """A cell of several studies would get different settings of its scenario from each."""


def deep_merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``override`` over it, mappings merged key by key (a study's section may set one bound of
    an objective and keep the other)."""
    out = dict(base)
    for key, value in override.items():
        out[key] = deep_merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def study_scenario_settings(config: dict[str, Any], study: dict[str, Any], section: str) -> dict[str, Any]:
    """A study's settings of the scenario whose config section is ``section``: the section, the study's own
    ``section`` key over it."""
    return deep_merged(config.get(section) or {}, study.get(section) or {})


def cell_scenario_settings(config: dict[str, Any], has_cuda: bool | None = None) -> dict[CellKey, dict[str, Any]]:
    """The settings of each cell whose scenario has a config section of its own (ScenarioInfo.settings): the
    section with its study's override (a study's key of the same name), and what its settings type takes from
    the study and the variant (``for_cell``). SettingsConflict where two studies of the run give one cell
    different settings that its type cannot reconcile (``combined``)."""
    has_cuda = run_has_cuda(config) if has_cuda is None else has_cuda
    settings: dict[CellKey, tuple[str, dict[str, Any]]] = {}
    for name in config["run"]:
        study = config["studies"][name]
        for cell in sorted(study_cells(study, config["engines"], has_cuda)):
            info = SCENARIOS[cell.scenario]
            if info.settings is None:
                continue
            section, kind = info.settings, load_target(info.settings_type) if info.settings_type else None
            own = study_scenario_settings(config, study, section)
            if hasattr(kind, "for_cell"):  # keys a cell takes from its study or variant (LoadGen's bound, delay)
                own = kind.for_cell(own, study, config["engines"][cell.engine])
            earlier = settings.setdefault(cell, (name, own))
            if earlier[1] == own:
                continue
            both = kind.combined(earlier[1], own) if hasattr(kind, "combined") else None
            if both is None:
                raise SettingsConflict(
                    f"studies.{earlier[0]} and studies.{name} both measure {cell.cell_id} with different `{section}` "
                    f"settings; give the two studies the same `{section}`, or no common cell"
                )
            settings[cell] = (earlier[0], both)
    return {cell: values for cell, (_, values) in settings.items()}


def spans_devices(study: dict[str, Any]) -> bool:
    """Whether a study asks for the CPU and the GPU side by side (``devices`` lists cpu and cuda or auto):
    its question compares them, so a machine with one of them cannot answer it."""
    return "cpu" in study["devices"] and bool({"cuda", "auto"} & set(study["devices"]))


#: why a ``skip_with_gpu`` study has no cell on a GPU machine, and how to measure it there all the same
SKIPPED_WITH_GPU = (
    "a question for CPU machines, left out where a GPU is visible (the study's `skip_with_gpu`: set it false "
    "to measure it here too)"
)


def left_out(study: dict[str, Any], variants: dict[str, dict[str, Any]], has_cuda: bool) -> list[dict[str, str]]:
    """What a study names that has no cell on this machine, and why (``what``, ``why``): the whole study
    where it needs a GPU and there is none, the GPU side of a study that spans devices, and each engine
    variant that runs on none of the study's devices as resolved here (``auto`` became one device)."""
    study = with_defaults(study)
    if study.get("requires_gpu") and not has_cuda:
        return [{"what": "every cell", "why": "needs a GPU, and none is visible here"}]
    if study.get("skip_with_gpu") and has_cuda:
        return [{"what": "every cell", "why": SKIPPED_WITH_GPU}]
    devices = resolve_devices(study["devices"], has_cuda)
    out = []
    no_gpu_side = spans_devices(study) and "cuda" not in devices  # cuda named outright: its cells stay
    if no_gpu_side:
        out.append({"what": "the GPU side", "why": "needs a GPU, and none is visible here"})
    for name in study["engines"]:
        info = engine_info(variants[name]["engine"])
        runs_on = [d for d in info.devices if d in variants[name].get("devices", info.devices)]
        if no_gpu_side and runs_on == ["cuda"]:
            continue  # the GPU side's, said once
        if not set(runs_on) & set(devices) and not info.harness:
            auto = ": devices auto means cuda where a GPU is visible" if "auto" in study["devices"] else ""
            out.append({"what": name, "why": f"{'/'.join(runs_on)}-only, and the study runs on "
                        f"{' and '.join(devices)} here{auto}"})  # fmt: skip
    return out


def resolved_studies(config: dict[str, Any], has_cuda: bool | None = None) -> dict[str, dict[str, Any]]:
    """The run's studies with ``auto`` devices resolved as their cells were (for the report's sections),
    each with what it names that has no cell here (``left_out``), whether it spans devices and its cells' ids
    (``cells``)."""
    has_cuda = run_has_cuda(config) if has_cuda is None else has_cuda
    out = {}
    for name in config["run"]:
        study = dict(config["studies"][name])
        study["left_out"] = left_out(study, config["engines"], bool(has_cuda))
        study["cut_from_own_grid"] = cut_from_own_grid(study)
        study["spans_devices"] = spans_devices(study)
        study["devices"] = resolve_devices(study["devices"], has_cuda)
        # the cells the study names here: "every cell ran" is claimed against these, not the summary's rows
        study["cells"] = sorted(cell.cell_id for cell in study_cells(config["studies"][name], config["engines"],
                                                                       bool(has_cuda)))  # fmt: skip
        out[name] = study
    return out


#: the axes of a seed's own grid that a default's cut can leave values out of
OWN_GRID_AXES = ("engines", "precisions", "batch_sizes", "seq_lens", "threads", "percentiles")


def cut_from_own_grid(study: dict[str, Any]) -> dict[str, list[Any]]:
    """What the study's seed asks for (its ``own_grid``) that this run's study leaves out, axis by axis: empty
    where the run measures the own grid (config ``own_grids``) or the study declares none."""
    own = study.get("own_grid") or {}
    study = {**with_defaults(study), "percentiles": study_percentiles(study)}
    cut = {axis: [v for v in own[axis] if v not in study[axis]] for axis in OWN_GRID_AXES if axis in own}
    return {axis: values for axis, values in cut.items() if values}


def no_cells_message(config: dict[str, Any], has_cuda: bool | None = None) -> str:
    """Why a run has no cells on this machine, study by study and, within a study, per workload and engine
    variant; and what to do."""
    has_cuda = run_has_cuda(config) if has_cuda is None else has_cuda
    lines = [f"The studies of this run ({', '.join(config['run'])}) have no cells on this machine:"]
    for name in config["run"]:
        reasons = no_cell_reasons(config["studies"][name], config["engines"], bool(has_cuda))
        lines += [f"  {name}: {reason}" for reason in reasons]
    lines.append("Change the studies (their engines, devices, precisions), choose others (config `run`, or another")
    lines.append("preset), or run them where what they need is (a GPU).")
    return "\n".join(lines)


def no_cell_reasons(study: dict[str, Any], variants: dict[str, dict[str, Any]], has_cuda: bool) -> list[str]:
    """Why ``study`` has no cell of each workload on each engine variant that has none here, one line each
    (the whole study at once where it needs a GPU and there is none)."""
    if study.get("requires_gpu") and not has_cuda:
        return ["every cell needs a GPU, and none is visible here"]
    if study.get("skip_with_gpu") and has_cuda:
        return [f"every cell: {SKIPPED_WITH_GPU}"]
    study = with_defaults(study)
    devices = resolve_devices(study["devices"], has_cuda)
    reasons = []
    for workload, name in itertools.product(study["workloads"], study["engines"]):
        if study_cells({**study, "workloads": [workload], "engines": [name]}, variants, has_cuda):
            continue
        reasons.append(f"{workload} on {name}: {_pair_reason(workload, variants[name], study, devices)}")
    return reasons


def _pair_reason(workload: str, variant: dict[str, Any], study: dict[str, Any], devices: list[str]) -> str:
    """Why an engine variant measures no cell of ``workload`` in ``study`` on ``devices`` (resolved here)."""
    info = engine_info(variant["engine"])
    runs_on = [d for d in info.devices if d in variant.get("devices", info.devices)]
    if not set(runs_on) & set(devices):
        auto = " (devices auto: cuda where a GPU is visible)" if "auto" in study["devices"] else ""
        return f"it runs on {'/'.join(runs_on)}, and the study runs on {' and '.join(devices)} here{auto}"
    precisions = [p for p in info.precisions if p in variant.get("precisions", info.precisions)]
    if not set(precisions) & set(study["precisions"]):
        return f"it runs {'/'.join(precisions)}, and the study asks for {'/'.join(study['precisions'])}"
    kind = workload_info(workload).kind
    if kind not in info.workload_kinds:
        return f"it runs {'/'.join(info.workload_kinds)} workloads, and {workload} is a {kind} workload"
    if not any(drives(scenario, info.mode) for scenario in study["scenarios"]):
        driving = [name for name in SCENARIOS if drives(name, info.mode)]
        article = "an" if info.mode[0] in "aeiou" else "a"
        return (
            f"{article} {info.mode} engine is driven by the scenarios {', '.join(driving)}, and the study lists "
            f"{', '.join(study['scenarios'])}"
        )
    return "no combination of the study's axes suits it"
