"""The report section of a study with layout ``llm_load``: decoders serving requests under load
(inferbench.scenarios.llm_load). Per workload and engine: the highest request rate at which the objective held,
with the objective stated, the capacity beside it, the TTFT and TPOT percentiles and the goodput at that rate,
and how far the answer moved between the cell's processes; in the appendix every load of every cell.

A cell's sweep is in its record (``serving``), not in the summary, as a server cell's search is: the answer
reads the records beside the summary (``cells/``), and says so where they are not there.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from inferbench.analysis.summary import with_scenario
from inferbench.core.cells import CellKey, CellRecord
from inferbench.report.studies import CELLS_DIR, records_beside, row_key
from inferbench.report.tables import fmt, fmt_ms, markdown_table
from inferbench.report.text import escape_markdown
from inferbench.scenarios.llm_load import SCENARIO, SECTION
from inferbench.scenarios.llm_load.loads import LOADS_CSV, loads_frame, read_loads

if TYPE_CHECKING:
    from inferbench.analysis.compare_runs import Run

LLM_LOAD_MEASURED = (
    "LLM serving cells (`llm_load`; their own study sections) send a decoder requests that arrive while earlier "
    "ones decode, in fresh processes like every cell, under the machine-wide lock. Each process first measures "
    "the cell's capacity (request throughput with a run's requests all queued at once, the batch size of them "
    "running), then sends the "
    "same seeded requests at each load of its sweep, light to heavy (request rates at shares of that capacity, "
    "Poisson or gamma arrivals, or fixed concurrencies). A load at a rate is judged over a steady window after a "
    "ramp: the requests that arrived in it, what was served in it. It is VALID when enough requests arrived, "
    "spread over the window, and served kept up with arrived (docs/generation.md). Each request is timed on the "
    "host clock from its "
    "scheduled arrival (at a fixed concurrency: from its send) to each of its tokens: TTFT to the first, TPOT "
    "= (e2e - TTFT) / (tokens - 1), ITL between token arrivals, e2e to the last. A VALID load meets the objective "
    "when the objective's percentile of its TTFTs and of its TPOTs are within the bounds; goodput counts the "
    "requests within both. The engine batches continuously up to the batch size (transformers' continuous "
    "batching, vLLM's scheduler)."
)

LOAD_COLUMNS = [
    ("load_text", "load"),
    ("offered_per_s", "offered req/s"),
    ("arrived_per_s", "arrived req/s"),
    ("request_per_s", "served req/s"),
    ("output_tokens_per_s", "output tokens/s"),
    ("mean_in_flight", "in flight"),
    ("ttft_p50_ms", "TTFT p50"),
    ("ttft_p90_ms", "TTFT p90"),
    ("ttft_p99_ms", "TTFT p99"),
    ("tpot_p50_ms", "TPOT p50"),
    ("tpot_p90_ms", "TPOT p90"),
    ("tpot_p99_ms", "TPOT p99"),
    ("itl_p99_ms", "ITL p99"),
    ("e2e_p99_ms", "e2e p99"),
    ("goodput_per_s", "goodput req/s"),
    ("energy_mj_per_token", "mJ per token"),
    ("verdict", "verdict"),
    ("met", "objective met"),
    ("requests", "requests"),
    ("processes", "processes"),
]


def llm_load_rows(cells: pd.DataFrame) -> pd.DataFrame:
    """The summary rows of llm_load cells."""
    cells = with_scenario(cells)
    return cells[cells["scenario"] == SCENARIO]


def _cell_name(key: CellKey) -> str:
    threads = f" {key.threads}t" if key.threads else ""
    return f"{key.engine} {key.precision} {key.device}{threads}"


def _rate(value: float | None) -> str:
    return f"{fmt(value)} requests/s" if value is not None else "–"


def load_label(
    load: Any, concurrency: Any = None, offered_per_s: Any = None, phase: str = "sweep", position: Any = None
) -> str:
    """How the pages name a load: ``capacity``, ``search 2``, ``8 in flight`` (a concurrency with no rate
    offered) or ``0.5× capacity``; from a record's step or a loads.csv row alike."""
    if phase == "capacity":
        return "capacity"
    if phase == "client_floor":
        at = load is not None and not pd.isna(load)
        return f"client floor at {float(load):g}× capacity" if at else "client floor"
    if phase == "search":
        return f"search {int(position) + 1}"
    if concurrency is not None and not pd.isna(concurrency) and (offered_per_s is None or pd.isna(offered_per_s)):
        return f"{int(concurrency)} in flight"
    return f"{float(load):g}× capacity"


def _step_label(step: dict[str, Any]) -> str:
    return load_label(step.get("load"), step.get("concurrency"), step.get("offered_per_s"))


def _shape(serving: dict[str, Any]) -> str:
    settings = serving.get("settings") or {}

    def spread(value: Any, key: str) -> str:
        r = settings.get(key) or 0
        return f"{value}" + (f" ±{r:.0%}" if r else "")

    arrivals = settings.get("arrivals", "poisson")
    how = {"poisson": "Poisson arrivals", "gamma": f"gamma arrivals (burstiness {fmt(settings.get('burstiness'))})",
           "concurrency": "a fixed concurrency"}.get(arrivals, arrivals)  # fmt: skip
    return (
        f"up to {serving['max_running']} running, prompts of {spread(serving['prompt_tokens'], 'prompt_range')} "
        f"tokens, {spread(serving['output_tokens'], 'output_range')} new tokens, {how}"
    )


def _processes_text(serving: dict[str, Any], repeats: dict[str, Any] | None = None) -> str:
    """How far the answer and the capacity moved between the cell's processes; where the record's sweep is one
    process's of several (its processes' sweeps not pooled), that, and how far the answering load's e2e p50
    moved between them (``repeats``: what the cell runner pooled for every cell)."""
    n = serving.get("processes", 1)
    processes = (repeats or {}).get("n", n)
    if n < processes:
        spread = (repeats or {}).get("p50_spread_pct")
        return f"the sweep of the first of its {processes} processes" + (
            f" (their e2e p50 at the answering load: {fmt(spread)}% apart)" if spread is not None else ""
        )
    if n < 2:
        return "1 process"
    parts = [f"{n} processes"]
    offered = serving.get("offered_from") or {}
    by_process = (serving.get("answer") or {}).get("by_process") or {}
    rates = [r for r in by_process.get("rate_per_s") or [] if r is not None]
    if offered.get("same_rates") and offered.get("capacity_per_s"):
        whose = "the settings gave" if offered.get("process") == "settings" else "its first process measured"
        parts[0] += f", each offered the same rates: shares of {_rate(offered['capacity_per_s'])}, the capacity {whose}"
    elif rates:
        spread = ((serving.get("answer") or {}).get("spread_pct") or {}).get("rate_per_s")
        parts.append(
            f"rate meeting the objective {fmt(min(rates))}–{fmt(max(rates))} requests/s"
            + (f" (spread {fmt(spread)}%)" if spread is not None else "")
        )
    capacity = serving.get("capacity") or {}
    values = (capacity.get("by_process") or {}).get("request_per_s") or []
    if values:
        spread = (capacity.get("spread_pct") or {}).get("request_per_s")
        parts.append(
            f"capacity {fmt(min(values))}–{fmt(max(values))} requests/s"
            + (f" (spread {fmt(spread)}%)" if spread is not None else "")
        )
    return "; ".join(parts)


def _capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


def answer_line(record: CellRecord) -> str:
    """One cell's answer: the rate meeting the objective (or that none did), the objective, the capacity, and
    at that rate the objective's percentiles, the goodput; how far it moved between processes."""
    serving, key = record.sections.get(SECTION) or {}, record.key
    objective = serving["objective"]
    level = objective["percentile"]
    answer = serving["answer"]
    sweep = serving["sweep"]
    capacity = serving["capacity"]
    head = f"- **{escape_markdown(key.workload)}** {escape_markdown(_cell_name(key))} ({_shape(serving)}): "
    against = f"{escape_markdown(serving['objective_text'])}"
    cap = (
        f"Capacity {_rate(capacity['request_per_s'])} ({fmt(capacity['output_tokens_per_s'])} output tokens/s, "
        f"all queued, {serving['max_running']} running)."
    )
    processes = f"{_capitalised(_processes_text(serving, record.repeats))}."
    floor = serving.get("client_floor")
    if floor:  # a server's endpoint: what the client alone takes, against the null server
        cap += " " + floor_text(floor)
    if answer["index"] is None:
        first = sweep[0]
        lightest = first["offered_per_s"] if first["offered_per_s"] is not None else first["request_per_s"]
        return (
            f"{head}not even the lightest load ({_step_label(first)}, {_rate(lightest)}) "
            f"met {against}. There TTFT {level} {fmt_ms(first['ttft_ms'][level])}, TPOT {level} "
            f"{fmt_ms(first['tpot_ms'][level])}. {cap} {processes}"
        )
    step, rate = answering(serving)
    if answer["failing_index"] is not None:
        missed = sweep[answer["failing_index"]]
        beyond = (
            f"At {_step_label(missed)} ({_rate(answer['failing_rate_per_s'])}) it missed: TTFT {level} "
            f"{fmt_ms(missed['ttft_ms'][level])}, TPOT {level} {fmt_ms(missed['tpot_ms'][level])}."
        )
        if missed.get("valid") is False:  # no steady rate there: what failed, not its percentiles
            beyond = (
                f"At {_step_label(missed)} ({_rate(answer['failing_rate_per_s'])}) the load was "
                f"{escape_markdown(verdict_text(missed))}."
            )
    else:
        beyond = "Every load of the sweep met it: the answer is a lower bound."
    served = f"served {fmt(step['request_per_s'])} requests/s"
    if step.get("valid") and "window_s" in step:  # judged over a steady window
        served = (
            f"VALID over a {fmt(step['window_s'] / step.get('processes', 1))}-s steady window: {served} of "
            f"{fmt(step['arrived_per_s'])} arrived"
        )
    where = "found by the search" if step.get("load") is None else _step_label(step)
    return (
        f"{head}{against} up to **{_rate(rate)}** ({where}, {served}). "
        f"There TTFT {level} {fmt_ms(step['ttft_ms'][level])}, TPOT "
        f"{level} {fmt_ms(step['tpot_ms'][level])}, goodput {_rate(step['goodput_per_s'])} "
        f"({fmt(100 * (step['good_share'] or 0))}% of requests within both). {beyond} "
        f"{_search_text(serving.get('search'))}{cap} {processes}"
    )


def floor_text(floor: dict[str, Any]) -> str:
    """The client's floor in one sentence: TTFT and ITL at the lightest load, against the null server; and the
    capacity's requests all queued at once, the rate the client alone serves."""
    burst = f"the capacity's requests, all queued at once, at {_rate(floor['request_per_s'])}"
    lightest = (floor.get("sweep") or [None])[0]
    if lightest is None:  # records from before the floor at each load: the burst's, a queue's TTFT
        return (f"Client floor against the null server: {burst}, TTFT p50 {fmt_ms(floor['ttft_ms']['p50'])}, "
                f"ITL p50 {fmt_ms(floor['itl_ms']['p50'])}.")  # fmt: skip
    return (
        f"Client floor against the null server: at {_step_label(lightest)} TTFT p50 "
        f"{fmt_ms(lightest['ttft_ms']['p50'])}, ITL p50 {fmt_ms(lightest['itl_ms']['p50'])}; {burst}."
    )


def answering(serving: dict[str, Any]) -> tuple[dict[str, Any], float | None]:
    """The load that answers a cell, and its rate: the search's load at the rate it met the objective up to,
    where every process ran the search's loads (pooled) and one of them narrowed the answer; else the sweep's
    heaviest load that met it (the lightest where none did: then no rate)."""
    search = serving.get("search") or {}
    if search.get("pooled") and search.get("rate_per_s") is not None:
        for step in search["steps"]:
            if math.isclose(float(step["offered_per_s"]), float(search["rate_per_s"])):
                return step, search["rate_per_s"]
    index = serving["answer"]["index"]
    return serving["sweep"][index if index is not None else 0], serving["answer"]["rate_per_s"]


def _search_text(search: dict[str, Any] | None) -> str:
    """The search: where every process ran its loads (pooled), the rate it missed at; else (records from
    before) the median rate the processes' own searches met it up to, how far apart, and missed at."""
    if not search:
        return ""
    steps = search["steps"] if isinstance(search["steps"], int) else len(search["steps"])
    if search.get("pooled"):
        return (
            f"A search of {steps} loads between the two, each offered to every process, missed it at "
            f"{_rate(search['missed_per_s'])}. "
        )
    rates = [r for r in (search.get("by_process") or {}).get("rate_per_s") or [] if r is not None]
    apart = f", processes {fmt(min(rates))}–{fmt(max(rates))}" if len(rates) > 1 else ""
    return (
        f"A search of {steps} loads between the two met it up to {_rate(search['rate_per_s'])}{apart}, and "
        f"missed at {_rate(search['missed_per_s'])}. "
    )


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def bench_block(record: CellRecord) -> list[str]:
    """The answering load (the lightest where none met the objective) as ``vllm bench serve`` prints a result,
    then what inferbench adds: the load's verdict, offered against served, and the spread between processes."""
    serving = record.sections.get(SECTION) or {}
    step, _ = answering(serving)
    processes = step.get("processes", 1)
    summed = step.get("window_s", step.get("duration_s"))  # pooled over the processes: summed, as the requests
    windows = ""
    if "window_s" in step:
        each = f" of {_ms(summed / processes)} s" if processes > 1 else ""
        windows = f" ({processes} steady windows{each})" if processes > 1 else " (steady window)"
    lines = [
        "Successful requests:".ljust(41) + str(step["requests"]),
        "Benchmark duration (s):".ljust(41) + _ms(summed) + windows,
        "Request throughput (req/s):".ljust(41) + f"{step['request_per_s']:.2f}",
        "Output token throughput (tok/s):".ljust(41) + f"{step['output_tokens_per_s']:.2f}",
    ]
    for figure, title in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL")):
        summary = step.get(f"{figure}_ms") or {}
        lines += [f"{kind} {title} (ms):".ljust(41) + _ms(summary.get(key)) for kind, key in
                  (("Mean", "mean"), ("Median", "p50"), ("P99", "p99"))]  # fmt: skip
    lines.append("Request goodput (req/s):".ljust(41) + f"{step['goodput_per_s']:.2f}")
    lines += ["---- added by inferbench ----", "Verdict:".ljust(41) + verdict_text(step)]
    energy = step.get("energy")
    if energy is not None:
        lines.append("Energy per output token (mJ):".ljust(41) + _ms(energy["per_output_token_mj"]))
        lines.append("Energy per request (J):".ljust(41) + _ms(energy["per_request_j"]))
        lines.append("Mean GPU power in the window (W):".ljust(41) + _ms(energy["mean_power_w"]))
    elif serving.get("energy_unavailable"):
        lines.append("Energy:".ljust(41) + "unavailable: " + serving["energy_unavailable"])
    if step.get("offered_per_s") is not None:
        rates = [step["offered_per_s"], step.get("arrived_per_s"), step["request_per_s"]]
        lines.append("Offered / arrived / served (req/s):".ljust(41) + " / ".join(map(_ms, rates)))
    spread = (step.get("spread_pct") or {}).get("request_per_s")
    if spread is not None:
        lines.append("Request throughput spread (%):".ljust(41) + f"{spread:.1f} over {processes} processes")
    return ["", "```", *lines, "```", ""]


def llm_load_answer(
    cells: pd.DataFrame, study: dict[str, Any], basis: Any = None, records: dict[str, CellRecord] | None = None
) -> list[str]:
    """The answer lines of an llm_load study: per cell the rate meeting the objective beside the capacity, and
    per workload the engines ranked by that rate."""
    rows = llm_load_rows(cells)
    ok = rows[rows["status"] == "ok"]
    records = records or {}
    out: list[str] = []
    missing = 0
    for workload, frame in ok.groupby("workload", sort=False):
        found = [
            records[row_key(row).cell_id] for row in frame.itertuples(index=False) if row_key(row).cell_id in records
        ]
        missing += len(frame) - len(found)
        for record in sorted(found, key=lambda r: (r.key.engine, r.key.precision, r.key.batch_size, r.key.seq_len)):
            out += [answer_line(record), *bench_block(record)]
        ranked = [(rate, r) for r in found if (rate := answering(r.sections.get(SECTION) or {})[1])]
        if len(ranked) > 1:
            ranked.sort(key=lambda pair: -pair[0])
            best_rate, best = ranked[0]
            others = ", ".join(
                f"{escape_markdown(_cell_name(r.key))} {fmt(best_rate / rate)}× fewer ({fmt(rate)})"
                for rate, r in ranked[1:]
            )
            out.append(
                f"- **{escape_markdown(workload)}**: the most requests/s within the objective: "
                f"{escape_markdown(_cell_name(best.key))}, {fmt(best_rate)}; {others}."
            )
    if missing:
        out.append(
            f"- {missing} llm_load cell(s) measured ok, but their records (their sweeps) are not beside this "
            f"summary (`{CELLS_DIR}/`): their rate and capacity are in the summary's serving_target_qps and "
            "serving_capacity_qps."
        )
    return [*out, ""]


def load_table(rows: pd.DataFrame) -> pd.DataFrame:
    """A cell's rows of loads.csv (inferbench.scenarios.llm_load.loads) as the appendix shows them: each load named,
    its verdict in words, energy per token."""
    table = rows.copy()
    table["load_text"] = [
        load_label(row.load, row.concurrency, row.offered_per_s, row.phase, row.position)
        for row in rows.itertuples(index=False)
    ]
    table["verdict"] = [_row_verdict(row.valid, row.failed) for row in rows.itertuples(index=False)]
    table["energy_mj_per_token"] = rows["energy_per_output_token_mj"]
    return table


def _row_verdict(valid: Any, failed: Any) -> str:
    if pd.isna(valid):
        return "–"
    if str(valid) in ("True", "1", "1.0"):
        return "VALID"
    failures = str(failed).split("; ") if pd.notna(failed) else []
    constraints = [f for f in failures if f and not f.startswith("objective:")]
    return "INVALID: " + "; ".join(_once_each(constraints))


def _cell_loads(loads: pd.DataFrame | None, record: CellRecord) -> pd.DataFrame:
    """The cell's rows of the run's loads.csv, or made from its record where the file has none of them."""
    if loads is not None:
        rows = loads[loads["cell_id"] == record.key.cell_id]
        if not rows.empty:
            return rows
    return loads_frame([record])


def verdict_text(step: dict[str, Any]) -> str:
    """``VALID``, or ``INVALID`` with the constraints that failed (the objective's are in ``objective met``);
    a dash for a run judged on no steady window (the capacity, records from before the verdict)."""
    return _row_verdict(step.get("valid"), "; ".join(step.get("failed") or []) or None)


def _once_each(failures: list[str]) -> list[str]:
    """Each failed constraint once: records merged before ``pooled_failures`` list one per process that failed it."""
    named: dict[str, list[str]] = {}
    for text in failures:
        named.setdefault(text.split(":", 1)[0], []).append(text)
    return [texts[0] + (f" (in {len(texts)} processes)" if len(texts) > 1 else "") for texts in named.values()]


def llm_load_section(
    cells: pd.DataFrame, records: dict[str, CellRecord], loads: pd.DataFrame | None = None
) -> list[str]:
    """The appendix of llm_load cells: what they measure, then every load of every cell, from ``loads`` (the
    run's loads.csv), or where it lacks a cell, from the cell's record."""
    rows = llm_load_rows(cells)
    out = [LLM_LOAD_MEASURED, ""]
    for row in rows.itertuples(index=False):
        key = row_key(row)
        record = records.get(key.cell_id)
        name = f"{escape_markdown(key.workload)} {escape_markdown(_cell_name(key))}"
        title = f"**{name}**, batch {key.batch_size}, prompt {key.seq_len}"
        if row.status != "ok":
            out += [
                f"{title}: {escape_markdown(row.status)} ({escape_markdown(str(row.reason).splitlines()[0][:300])}).",
                "",
            ]
            continue
        if record is None or not record.sections.get(SECTION):
            out += [f"{title}: its record is not beside this summary (`{CELLS_DIR}/`).", ""]
            continue
        serving = record.sections[SECTION]
        parity = serving.get("token_parity") or {}
        tokens = (
            "served tokens = FP32 eager's" if parity.get("checked") and parity.get("equal")
            else "served tokens not checked" if parity else "no token reference"
        )  # fmt: skip
        out += [
            f"{title} ({escape_markdown(_shape(serving))}; {escape_markdown(serving['objective_text'])}; driven "
            f"{serving['driven']}-wise; timed from each request's {serving['timed_from']}; {tokens}; "
            f"{escape_markdown(_processes_text(serving, record.repeats))}):",
            "",
            markdown_table(load_table(_cell_loads(loads, record)), LOAD_COLUMNS),
            "",
        ]
    return out


def details_section(cells: pd.DataFrame, report_dir: Path) -> list[str]:
    """The report appendix's section of the run's llm_load cells: every load of each, from the run's loads.csv
    and the records beside the report (``report_dir``)."""
    rows = llm_load_rows(cells)
    loads = read_loads(report_dir / LOADS_CSV)
    return ["## LLM serving under load", "", *llm_load_section(rows, records_beside(rows, report_dir), loads)]


#: what the two runs' loads.csv are joined on: the cell, and which of its loads
LOAD_KEY = ["cell_id", "phase", "position"]
LOAD_SIDES = ("offered_per_s", "request_per_s", "ttft_p99_ms", "tpot_p99_ms", "energy_per_output_token_mj", "valid",
              "met")  # fmt: skip


def paired_loads(loads_a: pd.DataFrame | None, loads_b: pd.DataFrame | None) -> pd.DataFrame | None:
    """The LLM serving loads of two runs' loads.csv side by side (columns ``<figure>_a`` / ``_b``), joined on the
    cell and the load's place in its sweep or search (a search's rates may differ between the runs: both are
    shown), with ``changed``: its verdict or whether it met the objective differs. None where a run has none."""
    if loads_a is None or loads_b is None:
        return None
    sides = [frame[frame["phase"] != "capacity"][[*LOAD_KEY, "load", *LOAD_SIDES]] for frame in (loads_a, loads_b)]
    paired = sides[0].merge(sides[1].drop(columns="load"), on=LOAD_KEY, suffixes=("_a", "_b"))
    same = [paired[f"{name}_a"].astype(str) == paired[f"{name}_b"].astype(str) for name in ("valid", "met")]
    return paired.assign(changed=~(same[0] & same[1]))


def loads_markdown(loads: pd.DataFrame) -> list[str]:
    """The LLM serving loads in both runs: how many changed their verdict or their objective, then each load."""
    changed = int(loads["changed"].sum())
    columns = [("cell_id", "cell"), ("phase", "run"), ("load", "share"), ("offered_per_s_a", "offered A"),
               ("offered_per_s_b", "offered B"), ("request_per_s_a", "served A"), ("request_per_s_b", "served B"),
               ("ttft_p99_ms_a", "TTFT p99 A"), ("ttft_p99_ms_b", "TTFT p99 B"), ("tpot_p99_ms_a", "TPOT p99 A"),
               ("tpot_p99_ms_b", "TPOT p99 B"), ("energy_per_output_token_mj_a", "mJ/token A"),
               ("energy_per_output_token_mj_b", "mJ/token B"), ("valid_a", "VALID A"), ("valid_b", "VALID B"),
               ("met_a", "met A"), ("met_b", "met B")]  # fmt: skip
    return [
        "## LLM serving loads",
        "",
        f"{len(loads)} loads of {loads['cell_id'].nunique()} LLM serving cells in both runs' loads.csv: {changed} "
        "change their verdict (VALID or INVALID) or whether they met the objective.",
        "",
        markdown_table(loads.sort_values(LOAD_KEY), columns),
        "",
    ]


def _loads_of(path: str | Path | None) -> pd.DataFrame | None:
    """The loads.csv of a run given as its results directory or its summary CSV (beside it)."""
    if path is None:
        return None
    path = Path(path)
    return read_loads((path if path.is_dir() else path.parent) / LOADS_CSV)


def compared_loads(run_a: Run, run_b: Run) -> list[str]:
    """What `inferbench compare` says of two runs' LLM serving loads (the loads.csv beside each): nothing where a
    run has none."""
    paired = paired_loads(*(_loads_of(run.given or run.source) for run in (run_a, run_b)))
    return loads_markdown(paired) if paired is not None and not paired.empty else []
