"""The summary columns of generation cells (their declaration's ``columns``), from their record's ``generation``
section. Light: the summary is made where no engine is installed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from inferbench.scenarios.generation import SECTION

if TYPE_CHECKING:
    from inferbench.core.cells import CellRecord


def columns(record: CellRecord) -> dict[str, Any]:
    """A generation cell's figures: TTFT and TPOT, decode rates, memory, the decode roofline, token parity, and where
    a GPU decode step's time goes."""
    gen = record.sections.get(SECTION) or {}
    ttft, tpot = gen.get("ttft_ms") or {}, gen.get("tpot_ms") or {}
    split = gen.get("step_split") or {}
    return {
        "gen_new_tokens": gen.get("new_tokens"),
        **{f"gen_ttft_{k}_ms": ttft.get(k) for k in ("p50", "p99")},
        **{f"gen_tpot_{k}_ms": tpot.get(k) for k in ("p50", "p99")},
        # each process's TPOT p50 (one process: its own), ';'-separated as p50_by_process_ms
        "gen_tpot_p50_by_process_ms": ";".join(
            f"{v:.6g}" for v in gen.get("tpot_p50_by_process_ms") or [tpot.get("p50")] if v is not None
        )
        or None,
        "gen_decode_tokens_per_s_per_sequence": gen.get("decode_tokens_per_s_per_sequence"),
        "gen_decode_tokens_per_s": gen.get("decode_tokens_per_s"),
        "gen_kv_cache_mb": gen.get("kv_cache_mb"),
        "gen_weights_mb": gen.get("weights_mb"),
        "gen_decode_read_mb": gen.get("decode_read_mb"),
        "gen_decode_floor_ms": gen.get("decode_floor_ms"),
        "gen_decode_floor_share": gen.get("decode_floor_share"),
        "gen_token_parity": (gen.get("token_parity") or {}).get("equal"),
        # where a decode step's time goes on a GPU (measure.step_split)
        "gen_kernels_per_step": split.get("kernels_per_step"),
        "gen_gpu_busy_ms_per_step": split.get("gpu_busy_ms_per_step"),
        "gen_gpu_idle_ms_per_step": split.get("gpu_idle_ms_per_step"),
        "gen_host_step_call_ms": split.get("host_step_call_ms_p50"),
        "gen_stepped_over_plain": (gen.get("plain_requests") or {}).get("stepped_over_plain"),
    }
