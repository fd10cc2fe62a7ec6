"""The report's ``## Where these numbers come from``: what the data and the models' weights are, which code
measured, the machine and the libraries of the run's engines, when, and the spread the intervals rest on.

The code's identity is the package hash (``code_package``: every source file of the package). A commit is
named only where the record found the package in a git checkout; its tree is clean or has uncommitted
changes, as the record says. The details page's environment section reads the same helpers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from inferbench.analysis.calibration import calibrate, calibration_text
from inferbench.analysis.decisions import ClaimBasis
from inferbench.analysis.summary import measured
from inferbench.catalog.workloads import WorkloadInfo, workload_info
from inferbench.core.environment import engine_libraries, parse_libraries
from inferbench.data import DATASETS
from inferbench.engines.registry import ENGINES
from inferbench.report.studies import study_rows
from inferbench.report.tables import distinct
from inferbench.report.text import escape_markdown, inline_code

#: each class of cells (inferbench.analysis.comparison.spread_class), in a few words
SPREAD_NAMES = {"device": "device-bound GPU cells", "host": "host-bound GPU cells", "cpu": "CPU cells"}
#: the library columns of every summary, also of those written before the ``libraries`` column
FIXED_LIBRARIES = ("torch", "onnxruntime", "openvino")
#: a record's ``git_dirty`` as a summary gives it back: a bool, or its text
_FLAGS = {"true": True, "1": True, "1.0": True, "false": False, "0": False, "0.0": False}


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    """A summary column, or one of None where an older summary lacks it."""
    return frame[name] if name in frame else pd.Series(None, index=frame.index, dtype=object)


def _cells(n: int) -> str:
    return f"{n} cell" if n == 1 else f"{n} cells"


def _counted(states: pd.Series) -> list[str]:
    """Each distinct value; with its number of cells where there are several."""
    counts = states.value_counts()
    if len(counts) == 1:
        return [str(counts.index[0])]
    return [f"{state}: {_cells(n)}" for state, n in sorted(counts.items())]


def git_state(commit: Any, dirty: Any, named: str = "") -> str:
    """One record's commit and tree. Unknown is never a clean tree: no commit means no git checkout."""
    if not isinstance(commit, str) or not commit.strip():
        return "commit unknown, no git checkout"
    flag = dirty if isinstance(dirty, bool) else _FLAGS.get(str(dirty).strip().lower())
    tree = {True: "with uncommitted changes", False: "a clean tree", None: "tree state not recorded"}[flag]
    return f"{named}{escape_markdown(commit.strip()[:12])}, {tree}"


def git_states(everything: pd.DataFrame, named: str = "") -> list[str]:
    """The commits and trees the cells recorded; ``named`` goes before a known commit's hash."""
    commits, dirty = _column(everything, "git_commit"), _column(everything, "git_dirty")
    states = pd.Series([git_state(c, d, named) for c, d in zip(commits, dirty, strict=True)], dtype=object)
    return _counted(states) if not states.empty else ["commit unknown, no git checkout"]


def package_text(everything: pd.DataFrame) -> str:
    """The package hashes that measured. A hash names the code whatever git says."""
    hashes = _column(everything, "code_package").dropna().astype(str)
    if hashes.empty:
        return "package hash not recorded"
    counts = hashes.value_counts()
    if len(counts) == 1:
        return f"package hash {inline_code(counts.index[0])}"
    listed = ", ".join(f"{inline_code(h)} for {_cells(n)}" for h, n in sorted(counts.items()))
    return f"{len(counts)} package hashes, {listed}"


def package_sentence(everything: pd.DataFrame) -> str:
    """The first page's sentence on the package hash, with what it hashes where there is one."""
    text = package_text(everything)
    recorded = _column(everything, "code_package").notna().any()
    return f"{text[:1].upper()}{text[1:]}" + (", over every source file." if recorded else ".")


def run_libraries(everything: pd.DataFrame) -> list[str]:
    """The libraries the run's engines use (inferbench.core.environment.engine_libraries)."""
    impls = _column(everything, "engine_impl").fillna(_column(everything, "engine")).dropna()
    used = {m for impl in set(impls.astype(str)) if impl in ENGINES for m in engine_libraries(ENGINES[impl])}
    return sorted(used)


def _versions(everything: pd.DataFrame) -> dict[str, set[str]]:
    """Each library's versions over the cells: the ``libraries`` column, else the fixed columns."""
    found: dict[str, set[str]] = {}
    for _, row in everything.iterrows():
        recorded = parse_libraries(row.get("libraries"))
        for name in FIXED_LIBRARIES:
            value = row.get(name)
            if name not in recorded and value is not None and pd.notna(value) and str(value):
                recorded[name] = str(value)
        for name, version in recorded.items():
            found.setdefault(name, set()).add(version)
    return found


def libraries_text(everything: pd.DataFrame) -> str:
    """``numpy 2.1.3, vllm 0.6.3``: each library of the run's engines with its versions; the rest of the
    fixed columns where an older summary has no engine to go by; then those with no version recorded."""
    versions = _versions(everything)
    names = run_libraries(everything) or [n for n in FIXED_LIBRARIES if n in versions]
    known = [escape_markdown(f"{n} {' and '.join(sorted(versions[n]))}") for n in names if n in versions]
    missing = [escape_markdown(n) for n in names if n not in versions]
    text = ", ".join(known) or "no library version recorded"
    return text + (f"; no version recorded for {', '.join(missing)}" if known and missing else "")


def _info(workload: Any) -> WorkloadInfo | None:
    try:
        return workload_info(str(workload))
    except KeyError:  # a workload this package no longer knows
        return None


def _source(stats: dict[str, Any] | None) -> bool | None:
    """Whether a dataset is generated, by its stats (the data rules write ``source``); None: not given."""
    return None if stats is None else stats.get("source", "synthetic") == "synthetic"


def _real_sentence(name: str, stats: dict[str, Any]) -> str:
    """A real dataset: what it is, and how many rows were used."""
    what = DATASETS[name].description if name in DATASETS else str(stats.get("source"))
    rows = stats.get("rows_used", stats.get("rows_clean"))
    count = f", {rows:,} rows used" if isinstance(rows, int) else ""
    return f"Dataset {inline_code(name)} is real: {escape_markdown(what)}{count}."


def _codes(names: Sequence[str]) -> str:
    return ", ".join(inline_code(n) for n in names)


def _datasets(names: Sequence[str]) -> str:
    """``Dataset `heart` is`` or ``Datasets `heart`, `lendingclub` are``."""
    return f"Dataset {_codes(names)} is" if len(names) == 1 else f"Datasets {_codes(names)} are"


def data_lines(everything: pd.DataFrame, dataset_stats: Sequence[dict[str, Any]]) -> list[str]:
    """Said once: whether the data is generated or real, that the other models have random weights, and
    what parity and AUC mean then. A generated dataset's AUC must not read as a model's quality."""
    infos = {str(w): info for w in _column(everything, "workload").dropna().unique() if (info := _info(w))}
    trained = {w: info.dataset for w, info in sorted(infos.items()) if info.dataset}
    stats = {s.get("dataset"): s for s in dataset_stats}
    generated = {d: _source(stats.get(d)) for d in sorted(set(trained.values()))}
    sentences = []
    if made := [d for d, g in generated.items() if g]:
        sentences.append(f"{_datasets(made)} generated: synthetic rows in the real schema.")
    sentences += [_real_sentence(d, stats[d]) for d, g in generated.items() if g is False]
    if unknown := [d for d, g in generated.items() if g is None]:
        sentences.append(f"{_datasets(unknown)} of unrecorded source.")
    if trained:
        sentences.append("The MLPs are trained on this data.")
    if len(infos) > len(trained):
        sentences.append(f"{'Every other' if trained else 'Every'} model has random weights.")
    weights = "the same weights" if trained else "the same random weights"
    sentences.append(f"Parity: a cell's outputs match FP32 eager's on {weights}.")
    sentences += _auc_sentences(trained, generated)
    return [f"- Data and weights: {' '.join(sentences)}"] if infos else []


def _auc_sentences(trained: dict[str, str], generated: dict[str, bool | None]) -> list[str]:
    """What each trained MLP's AUC means, by where its data came from."""
    meaning = {
        True: "on generated data: it checks that training ran, not model quality.",
        False: "on real data: held-out quality.",
        None: "on data of unrecorded source: read it as a check that training ran.",
    }
    out = []
    for kind, text in meaning.items():
        if models := [w for w, d in trained.items() if generated.get(d) is kind]:
            out.append(f"AUC of {_codes(models)} is {text}")
    return out


def _spread_line(basis: ClaimBasis) -> str:
    """The spread every interval rests on: each class's, between processes and between leases."""
    spreads = [
        f"{SPREAD_NAMES[cls]} {prior.pct:.1f}%"
        for (cls, boundary), prior in sorted(basis.classes.priors.items())
        if boundary == "device"
    ]
    between = [
        f"{SPREAD_NAMES[cls]} {moved.pct:.1f}% ({moved.pairs} A/A pairs)"
        for (cls, boundary), moved in sorted(basis.classes.between.items())
        if boundary == "device"
    ]
    return (
        "- Spread of p50 between processes, one standard deviation: "
        + ("; ".join(spreads) if spreads else "unknown: no single-call or training cell ran in several processes")
        + ". Every ratio between cells counts each cell's own spread moderated by its class's (docs/comparing.md); "
        "an exponent's and a generation gain's intervals count their own processes' spread. "
        + (
            "A/A twins, one configuration measured under two names, moved apart in this run by, one standard "
            "deviation: " + "; ".join(between) + ". "
            if between
            else ""
        )
        + (
            f"They also count how far each class moved between leases, {basis.classes.leases.describe()}."
            if basis.classes.leases is not None
            else "The intervals rest on this lease alone: a claim meant for the next lease needs runs from two."
        )
    )


def provenance_section(
    everything: pd.DataFrame,
    studies: dict[str, dict[str, Any]],
    basis: ClaimBasis,
    dataset_stats: Sequence[dict[str, Any]] = (),
) -> list[str]:
    """``## Where these numbers come from``: data and weights, code, machine, libraries, date, studies, and
    the spread the intervals rest on. ``dataset_stats``: the data rules' stats, which say each source."""
    dates = pd.to_datetime(_column(everything, "created_at"), errors="coerce", utc=True).dropna()
    when = "–" if dates.empty else f"{dates.min():%Y-%m-%d %H:%M}–{dates.max():%H:%M} UTC"
    gpu = "gpu" in everything and everything["gpu"].notna().any()
    ran = [name for name, study in studies.items() if not study_rows(everything, study).empty]  # not re-rendered ones
    return [
        "## Where these numbers come from",
        "",
        *data_lines(everything, dataset_stats),
        f"- Code: inferbench {'; '.join(git_states(everything))}. {package_sentence(everything)}",
        f"- Machine: {distinct(everything, 'cpu')}; "
        + (f"GPU {distinct(everything, 'gpu')}, driver {distinct(everything, 'gpu_driver')}" if gpu else "no GPU")
        + f"; host {distinct(everything, 'hostname')}.",
        f"- Software: Python {distinct(everything, 'python')}; {libraries_text(everything)}.",
        f"- Measured: {when}; studies {', '.join(inline_code(n) for n in ran) or '–'}.",
        _spread_line(basis),
        *([f"- {calibration_text(found)}"] if (found := calibrate(measured(everything), basis.classes)) else []),
        "- Device boundary: inputs staged where the engine computes, outputs left there. End to end: host "
        "arrays in, a host array out. Host-bound: the GPU waits for the thread launching its kernels.",
        "",
    ]
