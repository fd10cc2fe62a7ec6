"""The machine's primitives, below everything that measures: the machine-wide lock and the run's lock,
GPU slots, the host's CPU partition, the stall watchdog, and how a process's children end with it."""
