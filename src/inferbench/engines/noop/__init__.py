"""The no-op engine: returns a constant, so the harness's own per-call overhead can be measured."""

from inferbench.catalog.engines import ALL_PRECISIONS, EngineInfo

ENGINES = {
    "noop": EngineInfo(
        "inferbench.engines.noop.engine:NoopEngine",
        ("cpu", "cuda"),
        ALL_PRECISIONS,
        "none",
        "returns a constant: measures the harness's own overhead",
        libraries=(),
        harness=True,
    ),
}
