"""The M/D/1 yardstick of serving at largest batch 1 (inferbench.core.queueing)."""

import numpy as np
import pytest

from inferbench.core.queueing import md1_latency_quantile, md1_rate_within

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)


def test_the_md1_queue_matches_its_textbook_mean_and_a_direct_simulation():
    """Pollaczek-Khinchine: an M/D/1 queue at load rho waits rho S / (2 (1 - rho)) on average; and the p99
    equals that of a plain event-by-event simulation of the same arrivals."""
    service_ms, rate = 1.0, 600.0  # rho 0.6
    rng = np.random.default_rng(0)
    arrivals = np.cumsum(rng.exponential(1e3 / rate, 200_000))
    free, latencies = 0.0, []
    for arrival in arrivals:
        free = max(free, arrival) + service_ms
        latencies.append(free - arrival)
    assert np.mean(latencies) - service_ms == pytest.approx(0.6 * service_ms / (2 * 0.4), rel=0.03)
    assert md1_latency_quantile(rate, service_ms, 0.99) == pytest.approx(np.quantile(latencies, 0.99), rel=0.03)


def test_the_rate_within_a_bound_is_the_highest_that_keeps_it():
    service_ms, bound_ms = 1.1, 10.0
    rate = md1_rate_within(service_ms, bound_ms)
    assert 0.5 * 1e3 / service_ms < rate < 1e3 / service_ms, "queueing takes a share, never all, of the capacity"
    assert md1_latency_quantile(rate, service_ms, 0.99) <= bound_ms
    assert md1_latency_quantile(rate * 1.02, service_ms, 0.99) > bound_ms
    # slower service, lower rate; a looser bound, a higher one; a service above the bound: none
    assert md1_rate_within(2 * service_ms, bound_ms) < rate < md1_rate_within(service_ms, 2 * bound_ms)
    assert md1_rate_within(12.0, bound_ms) == 0.0
    with pytest.raises(ValueError, match="positive rate and service time"):
        md1_latency_quantile(0.0, 1.0, 0.99)


def test_a_serving_run_s_queueing_limit_takes_the_phases_one_batch_at_a_time_holds():
    from inferbench.scenarios.serving.measure import queueing_limit

    phases = {name: {"p50": ms, "p99": None} for name, ms in
              {"wait": 5.0, "stage": 0.3, "call": 0.1, "fetch": 0.8, "complete": 0.05}.items()}  # fmt: skip
    serial = queueing_limit({"phases_ms": phases}, 1, 10.0)
    assert serial["service_ms"] == pytest.approx(1.25), "everything but the queue"
    overlapped = queueing_limit({"phases_ms": phases}, 1, 10.0, overlapped=True)
    assert overlapped["service_ms"] == pytest.approx(0.9), "staging runs beside the other thread's batch"
    assert overlapped["md1_qps"] > serial["md1_qps"]
    assert queueing_limit({"phases_ms": phases}, 8, 10.0) is None, "batching: no M/D/1"
    assert queueing_limit(None, 1, 10.0) is None
