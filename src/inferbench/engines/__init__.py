"""Engines: one module per engine behind the small interface in ``base.py``; see ``registry.py``."""
