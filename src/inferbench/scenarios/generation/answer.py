"""The generation scenario's face in the report: the answer of a study with layout ``generation`` and the
appendix's section. A decoder's requests token by token: time to first token and time per output token
against prompt length and batch, decode tokens per second against batch (where batching pays), engines side
by side, and how far each decode step is from its memory-bandwidth floor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from inferbench.analysis.summary import split_scenarios
from inferbench.analysis.uncertainty import CellSpread, Ratio, ratio
from inferbench.catalog.scenarios import PLAIN
from inferbench.report.answers import ratio_text
from inferbench.report.tables import fmt, markdown_table
from inferbench.report.text import escape_markdown

#: the appendix's "What was measured" paragraph of these cells
GENERATION_MEASURED = (
    "Generation cells (a decoder answering requests token by token; their own study sections) are measured "
    "in fresh processes like every cell (`processes`, more for GPU cells found host-bound) under the "
    "machine-wide lock: each process warms up with whole requests, then times requests one after another "
    "until both the minimum time and its share of the minimum number of requests are reached; the time to "
    "first token and each further token are pooled over the processes."
)

COLUMNS = [
    ("engine", "engine"),
    ("precision", "precision"),
    ("device", "device"),
    ("batch_size", "batch"),
    ("seq_len", "prompt"),
    ("gen_new_tokens", "new tokens"),
    ("status", "status"),
    ("gen_ttft_p50_ms", "TTFT p50"),
    ("gen_ttft_p99_ms", "TTFT p99"),
    ("gen_tpot_p50_ms", "TPOT p50"),
    ("gen_tpot_p99_ms", "TPOT p99"),
    ("gen_decode_tokens_per_s_per_sequence", "tokens/s per sequence"),
    ("gen_decode_tokens_per_s", "tokens/s"),
    ("latency_p50_ms", "request p50"),
    ("gen_decode_floor_ms", "decode floor"),
    ("gen_decode_floor_share", "floor / TPOT"),
    ("gen_kv_cache_mb", "KV cache MB"),
    ("gen_weights_mb", "weights MB"),
    ("gen_decode_read_mb", "read per step MB"),
    ("gen_token_parity", "tokens = FP32 eager"),
    ("n_iters", "requests"),
]
#: where a GPU decode step's time goes (inferbench.scenarios.generation.measure.step_split): shown where a cell has it
SPLIT_COLUMNS = [
    ("gen_kernels_per_step", "kernels a step"),
    ("gen_gpu_busy_ms_per_step", "GPU busy a step"),
    ("gen_gpu_idle_ms_per_step", "GPU idle a step"),
    ("gen_host_step_call_ms", "host in step call"),
]
SPLIT_EXPLAINED = (
    "`GPU busy a step`: the time a kernel ran during a decode step, from one profiled request after the timed "
    "ones (the union of the kernels' intervals); `GPU idle a step`: TPOT p50 less that, the GPU waiting for the "
    "host to schedule, launch or hand back the step. `host in step call`: the host's time inside the engine's "
    "step call, its time to issue a step where the call returns once the step is queued; – where the engine "
    "steps in a process of its own (vLLM)."
)

EXPLAINED = (
    "One timed call is one request: the prompt (`prompt` tokens per row, `batch` rows), then `new tokens` "
    "tokens per row picked greedily, with no stop at EOS. TTFT: the prefill, from the request's start to its "
    "first token; TPOT: each further token, from the one before (on a GPU between CUDA events on the engine's "
    "stream, the host issuing the next step without waiting); `request p50`: token ids in from the host, "
    "generated ids back on the host. Percentiles pool every request (TTFT) and every decode step (TPOT) of "
    "the cell's processes; a p99 from fewer than 100 of them is –. `decode floor`: the bytes of weights "
    "a decode step reads (`read per step MB`: all but the input embedding table, of which it reads a row per "
    "token) over the memory bandwidth a copy reaches in the same process (bytes read + written per second): "
    "the least a step can take; `floor "
    "/ TPOT`: 1 is at the memory bound (above 1 on a CPU whose caches hold the weights). `tokens = FP32 eager`: the "
    "cell's first generated tokens equal those of transformers' `generate` on the FP32 model (else the cell "
    "is invalid)."
)


def one_request_at_a_time(cells: pd.DataFrame) -> pd.DataFrame:
    """The generation cells timed one request at a time (their key's scenario is the plain one), not under
    load (a scenario with a section of its own)."""
    generation = split_scenarios(cells).generating
    return generation[generation["scenario"] == PLAIN]


def generation_answer(cells: pd.DataFrame, study: dict[str, Any], basis: Any = None) -> list[str]:
    """The answer lines of a generation study: per workload, the fastest decode and first token, how far
    each decode step is from its floor, and how tokens per second grow with the batch."""
    generation = one_request_at_a_time(cells)
    ok = generation[generation["status"] == "ok"]
    out: list[str] = []
    for workload, frame in ok.groupby("workload", sort=False):
        name = escape_markdown(workload)
        best = frame.loc[frame["gen_tpot_p50_ms"].idxmin()]
        out.append(
            f"- **{name}**: the shortest time per output token is {fmt(best['gen_tpot_p50_ms'])} ms "
            f"({escape_markdown(_cell(best))}; {_processes(best)}), {fmt(1 / best['gen_decode_floor_share'])}× its "
            f"memory-bandwidth floor ({fmt(best['gen_decode_floor_ms'])} ms)."
        )
        out += _from_the_floor(name, frame)
        first = frame.loc[frame["gen_ttft_p50_ms"].idxmin()]
        out.append(f"- **{name}**: the shortest time to first token is {fmt(first['gen_ttft_p50_ms'])} ms "
                   f"({escape_markdown(_cell(first))}).")  # fmt: skip
        out += _batching(name, frame)
    return [*out, ""]


def details_section(rows: pd.DataFrame, report_dir: Path) -> list[str]:
    """The appendix's section of a decoder's cells answering one request at a time, heading included."""
    return ["## Generation", "", *generation_section(rows, {})]


def generation_section(cells: pd.DataFrame, study: dict[str, Any], basis: Any = None) -> list[str]:
    """A generation study's detail: the table of every cell, and what its columns measure."""
    generation = one_request_at_a_time(cells)
    split = _has_split(generation)
    out = [EXPLAINED + (" " + SPLIT_EXPLAINED if split else ""), ""]
    columns = COLUMNS + (SPLIT_COLUMNS if split else [])
    for workload, frame in generation.groupby("workload", sort=False):
        order = frame.sort_values(["engine", "precision", "device", "batch_size", "seq_len"])
        out += [f"**{escape_markdown(workload)}**:", "", markdown_table(order, columns), ""]
    return out


def _has_split(frame: pd.DataFrame) -> bool:
    """Whether any cell says where its decode step's time goes (summaries before issue 57 do not)."""
    return "gen_gpu_busy_ms_per_step" in frame and frame["gen_gpu_busy_ms_per_step"].notna().any()


def _busy(row: pd.Series) -> str:
    """`` (GPU busy 1.70 of 1.89 ms, idle 0.19 waiting on the host)`` where the cell has its step's split, else
    nothing."""
    busy = row.get("gen_gpu_busy_ms_per_step")
    if busy is None or pd.isna(busy):
        return ""
    idle = row.get("gen_gpu_idle_ms_per_step")
    host = "" if idle is None or pd.isna(idle) else f", idle {fmt(idle)} waiting on the host"
    return f" (GPU busy {fmt(busy)} of {fmt(row['gen_tpot_p50_ms'])} ms{host})"


def _cell(row: pd.Series) -> str:
    return f"{row['engine']} {row['precision']} {row['device']} b{row['batch_size']} prompt {row['seq_len']}"


def _from_the_floor(name: str, frame: pd.DataFrame) -> list[str]:
    """How far each engine's decode step is from its memory-bandwidth floor, at the smallest batch (where a
    step reads every weight for one token each: the floor's own case), per precision, device and prompt."""
    smallest = frame[frame["batch_size"] == frame["batch_size"].min()]
    out = []
    for (precision, device, batch, prompt), series in smallest.groupby(
        ["precision", "device", "batch_size", "seq_len"], sort=True
    ):
        ratios = ", ".join(
            f"{escape_markdown(row['engine'])} {fmt(1 / row['gen_decode_floor_share'])}×{_busy(row)}"
            for _, row in series.sort_values("gen_tpot_p50_ms").iterrows()
        )
        out.append(
            f"- **{name}** {precision} {device} batch {batch}, prompt {prompt}: time per output token over its "
            f"floor, {ratios}."
        )
    return out


def _batching(name: str, frame: pd.DataFrame) -> list[str]:
    """Where batching pays: aggregate decode tokens/s at the largest batch over batch 1, per series."""
    out = []
    for (engine, precision, device, prompt), series in frame.groupby(["engine", "precision", "device", "seq_len"]):
        series = series.sort_values("batch_size")
        if len(series) < 2 or series["batch_size"].iloc[0] != 1:
            continue
        low, high = series.iloc[0], series.iloc[-1]
        gain = batching_gain(low, high)
        out.append(
            f"- **{name}** {escape_markdown(f'{engine} {precision} {device} prompt {prompt}')}: batch "
            f"{high['batch_size']} decodes {ratio_text(gain.value, gain.low, gain.high, gain.significant)} the "
            f"tokens/s of batch 1 ({fmt(high['gen_tpot_p50_ms'])} against {fmt(low['gen_tpot_p50_ms'])} ms per step)."
        )
    return out


def tpot_spread(row: pd.Series) -> CellSpread | None:
    """A generation cell's TPOT p50 across its processes (``gen_tpot_p50_by_process_ms``; one process where
    a summary predates it)."""
    by_process = row.get("gen_tpot_p50_by_process_ms")
    values = [float(v) for v in str(by_process).split(";") if v] if isinstance(by_process, str) else []
    return CellSpread.from_processes(values or [row["gen_tpot_p50_ms"]])


def batching_gain(low: pd.Series, high: pd.Series) -> Ratio:
    """Decode tokens/s at ``high``'s batch over ``low``'s: batch ratio x TPOT ratio, with Welch's interval over
    the processes' TPOT p50s (none where either cell ran in one process)."""
    a, b = tpot_spread(high), tpot_spread(low)
    scale = high["batch_size"] / low["batch_size"]
    tpots = ratio(a, b, low["gen_tpot_p50_ms"] / high["gen_tpot_p50_ms"]) if a and b else Ratio(float("nan"))
    low, high = (v * scale if v is not None else None for v in (tpots.low, tpots.high))
    return Ratio(tpots.value * scale, low, high, tpots.processes, tpots.log_se, tpots.df)


def _processes(row: pd.Series) -> str:
    spread = tpot_spread(row)
    by_process = row.get("gen_tpot_p50_by_process_ms")
    if spread is None or spread.n < 2 or not isinstance(by_process, str):
        return "1 process"
    values = sorted(float(v) for v in by_process.split(";") if v)
    return f"{spread.n} processes: {fmt(values[0])}–{fmt(values[-1])} ms"
