"""The cell runner, above the scenarios: a cell's job (``cell_job.py``), the fresh processes it measures
in (``processes.py``) and the warm start that forks jobs from a process that imported torch once
(``warm.py``)."""
