"""Datasets: generators that write the real raw formats, and cleaning/encoding that works on the real files."""
