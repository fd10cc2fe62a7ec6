"""Scenarios: how a cell's prepared engine is driven and timed, each in a module of its own that owns its
timed loop and says what its boundaries mean. The scenario axis itself is declared in
inferbench.catalog.scenarios."""
