"""What queueing alone allows a server of one query at a time: the M/D/1 queue.

LoadGen's server scenario sends queries with Poisson arrivals. A server that takes them one at a time,
each in a constant service time ``S`` (an engine at largest batch 1), is an M/D/1 queue: even with no
stall anywhere, queries that arrive in a burst wait behind each other, and the p99 latency grows with
the load. The highest arrival rate whose p99 stays within a bound is then the ceiling of any
batcher-of-one on that engine, a yardstick for the QPS a serving search found: near it, the tail is
queueing; far below it, something stalled (the host, the engine's own tail). It is the steady state's:
a LoadGen run of 2,000 queries starts from an empty queue, so where the bound is many service times
long (50 ms against 1 ms) a run can pass a little above it; at 10 ms against 1-3 ms the two agree.

The latencies are computed rather than approximated: Lindley's recursion over a fixed, seeded stream of
arrivals, W(n+1) = max(0, W(n) + S - A(n+1)), vectorised as a random walk reflected at zero.
"""

from __future__ import annotations

import numpy as np

#: arrivals per evaluation: ~2,000 beyond the p99, so that the percentile moves by well under 1%
ARRIVALS = 200_000
#: the bisection stops once its bracket on the arrival rate is this narrow (relative)
RESOLUTION = 0.002


def md1_latency_quantile(rate_qps: float, service_ms: float, quantile: float, seed: int = 0) -> float:
    """The ``quantile`` of the response time (waiting + service, ms) of an M/D/1 queue with Poisson
    arrivals at ``rate_qps`` and a constant service of ``service_ms``."""
    if rate_qps <= 0 or service_ms <= 0:
        raise ValueError(f"an M/D/1 queue needs a positive rate and service time, not {rate_qps} QPS, {service_ms} ms")
    gaps_ms = np.random.default_rng(seed).exponential(1e3 / rate_qps, ARRIVALS)
    walk = np.cumsum(service_ms - gaps_ms[1:])
    # W(n) = X(n) - min(0, min over k <= n of X(k)): the walk reflected at zero
    waits = np.concatenate(([0.0], walk - np.minimum(np.minimum.accumulate(walk), 0.0)))
    return float(np.quantile(waits + service_ms, quantile))


def md1_rate_within(service_ms: float, bound_ms: float, quantile: float = 0.99) -> float:
    """The highest Poisson arrival rate (QPS) at which a constant ``service_ms`` keeps the response
    time's ``quantile`` within ``bound_ms``; 0 where one service alone exceeds the bound."""
    if service_ms >= bound_ms:
        return 0.0
    low, high = 0.0, 1e3 / service_ms  # at the service rate the queue grows without end
    while high - low > RESOLUTION * high:
        middle = (low + high) / 2
        if md1_latency_quantile(middle, service_ms, quantile) <= bound_ms:
            low = middle
        else:
            high = middle
    return low
