"""Exporters: each module here sends a run's cells somewhere users keep results (inferbench.catalog.exporters
finds them by name and says what each module provides)."""
