"""Exporters: the summary written where users keep results (CSV and Parquet here)."""
