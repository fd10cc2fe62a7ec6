"""Statistics and the timing loop on inputs with known answers."""

from __future__ import annotations

import time

import numpy as np
import pytest

from inferbench.core.stats import latency_stats
from inferbench.scenarios.timing import HostTimer, measure_calls, warm_up

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)


def test_percentiles_on_known_samples():
    samples = np.arange(1, 101) * 1e-3  # 1 ms .. 100 ms
    stats = latency_stats(samples, batch_size=4)
    lat = stats["latency_ms"]
    assert lat["p50"] == pytest.approx(50.5)
    assert lat["p90"] == pytest.approx(90.1)
    assert lat["p95"] == pytest.approx(95.05)
    assert lat["p99"] == pytest.approx(99.01)
    assert lat["mean"] == pytest.approx(50.5)
    assert lat["std"] == pytest.approx(np.std(np.arange(1, 101), ddof=1))
    assert (lat["min"], lat["max"]) == (pytest.approx(1.0), pytest.approx(100.0))
    assert stats["n_iters"] == 100
    assert stats["throughput_per_s"] == pytest.approx(4 * 100 / 5.050)


def test_tail_percentiles_need_enough_samples():
    lat = latency_stats(np.full(19, 0.002), batch_size=1)["latency_ms"]
    assert lat["p50"] == pytest.approx(2.0) and lat["p90"] == pytest.approx(2.0)
    assert lat["p95"] is None and lat["p99"] is None
    assert latency_stats(np.full(5, 0.002), 1)["latency_ms"]["p90"] is None
    assert latency_stats(np.full(99, 0.002), 1)["latency_ms"]["p99"] is None
    assert latency_stats(np.full(100, 0.002), 1)["latency_ms"]["p99"] == pytest.approx(2.0)


def test_confidence_intervals_cover_the_true_percentile_95_percent_of_the_time():
    # exponential latencies with mean 1 ms: the true median is ln 2 ms, the true p90 ln 10 ms
    rng = np.random.default_rng(3)
    trials = [latency_stats(rng.exponential(1e-3, 200), 1) for _ in range(200)]
    for name, truth in (("p50", np.log(2)), ("p90", np.log(10))):
        covered = np.mean([lo < truth < hi for lo, hi in (t["latency_ci95_ms"][name] for t in trials)])
        assert 0.88 <= covered <= 0.99, (name, covered)
    assert np.median([t["cv"] for t in trials]) == pytest.approx(1.0, abs=0.1)  # exponential: std = mean


def test_confidence_intervals_narrow_with_more_samples():
    rng = np.random.default_rng(4)
    few, many = latency_stats(rng.exponential(1e-3, 200), 1), latency_stats(rng.exponential(1e-3, 20_000), 1)
    width = [s["latency_ci95_ms"]["p50"][1] - s["latency_ci95_ms"]["p50"][0] for s in (few, many)]
    assert width[1] < width[0] / 5  # ~1/sqrt(n): 100x the samples, ~10x narrower
    assert set(few["latency_ci95_ms"]) == {"p50", "p90", "p95", "p99"}
    assert "p99" not in latency_stats(rng.exponential(1e-3, 50), 1)["latency_ci95_ms"]  # no CI where no p99


def test_large_sample_intervals_are_exact_order_statistics_and_cheap():
    # the no-op engine times millions of calls: no bootstrap there, the order-statistic interval
    from inferbench.core.stats import BOOTSTRAP_MAX_SAMPLES, _order_statistic_ci, percentile_ci

    rng = np.random.default_rng(5)
    trials = [percentile_ci(rng.exponential(1.0, BOOTSTRAP_MAX_SAMPLES + 1), ["p50"])["p50"] for _ in range(300)]
    covered = np.mean([lo < np.log(2) < hi for lo, hi in trials])
    assert 0.92 <= covered <= 0.99
    at_threshold = rng.exponential(1.0, BOOTSTRAP_MAX_SAMPLES)  # both methods apply: they agree
    boot = percentile_ci(at_threshold, ["p90"])["p90"]
    exact = _order_statistic_ci(at_threshold, 0.90, 0.95)
    assert boot == pytest.approx(exact, rel=0.01)
    huge = latency_stats(rng.exponential(1e-6, 3_000_000), 1)  # seconds: a 1 µs engine
    low, high = huge["latency_ci95_ms"]["p50"]
    assert low < 1e-3 * np.log(2) < high


def test_confidence_interval_is_seeded_and_degenerate_for_constant_samples():
    samples = np.random.default_rng(0).exponential(1e-3, 500)
    assert latency_stats(samples, 1)["latency_ci95_ms"] == latency_stats(samples, 1)["latency_ci95_ms"]
    constant = latency_stats(np.full(30, 0.002), 1)
    assert constant["latency_ci95_ms"]["p50"] == [2.0, 2.0] and constant["cv"] == 0.0


def test_single_sample_and_bad_samples():
    stats = latency_stats(np.array([0.010]), batch_size=8)
    assert stats["latency_ms"]["std"] == 0.0 and stats["throughput_per_s"] == pytest.approx(800)
    for bad in (np.array([]), np.array([0.1, np.nan]), np.array([-0.1])):
        with pytest.raises(ValueError):
            latency_stats(bad, 1)


def test_measure_stops_at_min_iters_when_time_is_reached():
    calls = []
    result = measure_calls(lambda: calls.append(1), HostTimer(lambda: None), warmup_s=0.0, min_time_s=0.0, min_iters=7)
    assert result.warmup_iters == 1  # at least one warm-up call
    assert len(result.samples_s) == 7 and len(calls) == 8


def test_measure_runs_until_min_time_and_times_the_call():
    sleep_s = 0.004
    result = measure_calls(
        lambda: time.sleep(sleep_s), HostTimer(lambda: None), warmup_s=0.01, min_time_s=0.06, min_iters=2
    )
    assert result.measured_s >= 0.06
    assert len(result.samples_s) >= 2
    assert result.samples_s.min() >= sleep_s  # a sleep can overshoot, never undershoot
    assert result.warmup_iters >= 2


def test_host_timer_includes_synchronisation():
    """Work that completes only at synchronize() (like a GPU queue) is inside the timed interval."""
    pending = []
    timer = HostTimer(lambda: [time.sleep(0.003) for _ in pending.clear() or [0]])
    result = measure_calls(lambda: pending.append(1), timer, warmup_s=0.0, min_time_s=0.0, min_iters=3)
    assert result.samples_s.min() >= 0.003


def test_a_process_p50_is_its_calls_in_the_hosts_fast_phase_and_the_tail_stays_every_calls():
    """A host that runs the same call at 8.4 µs for a while and at 15 µs for the next (its core shared): the
    process's p50 is the fast phase's, its p99 and mean every call's, and the share of fast windows is said."""
    from inferbench.core.stats import fast_phase, latency_stats, phase_windows, with_fast_phase_p50

    rng = np.random.default_rng(0)
    phases = [np.full(3000, 8.4e-6), np.full(6000, 15e-6), np.full(2000, 8.5e-6)]
    samples = np.concatenate(phases) * (1 + rng.normal(0, 0.01, 11_000))
    windows = phase_windows(samples)
    sizes = [samples[w].sum() for w in windows]
    assert min(sizes) >= 0.01 and all(w.stop - w.start >= 10 for w in windows), "each window: 10 ms, 10 calls"
    assert [w.start for w in windows[1:]] == [w.stop for w in windows[:-1]] and windows[-1].stop == samples.size
    mask, share = fast_phase(samples)
    assert 0.3 < share < 0.6 and mask[:2000].all() and not mask[4000:8000].any()
    stats = with_fast_phase_p50(latency_stats(samples, 1), samples)
    plain = latency_stats(samples, 1)
    assert stats["latency_ms"]["p50"] == pytest.approx(8.44e-3, rel=0.01), "the fast phase's p50, in ms"
    assert stats["latency_ms"]["p50_pooled"] == plain["latency_ms"]["p50"] == pytest.approx(15e-3, rel=0.02)
    assert (
        stats["latency_ms"]["p99"] == plain["latency_ms"]["p99"]
        and stats["latency_ms"]["mean"] == plain["latency_ms"]["mean"]
    )
    low, high = stats["latency_ci95_ms"]["p50"]
    assert low <= stats["latency_ms"]["p50"] <= high < 9e-3, "the interval of the figure shown"
    assert stats["fast_phase_share"] == share


def test_a_steady_host_keeps_every_call_in_the_p50():
    from inferbench.core.stats import fast_phase, latency_stats, with_fast_phase_p50

    samples = np.random.default_rng(1).lognormal(np.log(1e-3), 0.02, 2000)  # 1 ms calls, 2% apart
    mask, share = fast_phase(samples)
    assert mask.all() and share == 1.0
    assert with_fast_phase_p50(latency_stats(samples, 1), samples)["latency_ms"]["p50"] == pytest.approx(
        latency_stats(samples, 1)["latency_ms"]["p50"]
    )
    few = np.full(12, 0.5)  # fewer calls than two windows hold: one window, every call
    assert fast_phase(few)[0].all()


def test_the_warm_up_runs_once_at_least_and_then_until_its_time_has_passed():
    rounds: list[int] = []
    assert warm_up(rounds.append, 0.0) == 1 and rounds == [0]
    rounds.clear()
    start = time.perf_counter()
    ran = warm_up(lambda r: (rounds.append(r), time.sleep(0.01)), 0.05)
    assert time.perf_counter() - start >= 0.05 and ran == len(rounds) >= 2
    assert rounds == list(range(ran)), "each round is told its number"
