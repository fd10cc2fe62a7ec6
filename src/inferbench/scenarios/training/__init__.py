"""The training scenario (its declaration: inferbench.catalog.scenarios): training steps timed one call at a time
as single calls are (``measure``)."""
