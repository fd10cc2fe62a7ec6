"""Aggregation of cell records into tables."""
