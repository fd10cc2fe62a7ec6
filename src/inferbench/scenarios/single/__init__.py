"""The single-call scenario (its declaration: inferbench.catalog.scenarios): calls timed one at a time at two
boundaries (``measure``). Its face is the report's own: the latency and throughput tables and plots every
inference cell has."""
