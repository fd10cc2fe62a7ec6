"""Plots and the Markdown report."""
