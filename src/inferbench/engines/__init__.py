"""Engines: one package per family (``pytorch``, ``ort``, ``tensorrt``, ``noop``), each declaring its
implementations in its ``__init__.py`` (inferbench.catalog.engines) and running them in modules of its
own behind the small interface in ``base.py``. Engines run a model; how a call is timed is the
scenario's business (inferbench.scenarios)."""
