"""Measuring: the timing loop and timers, statistics, memory."""
