"""MLPerf LoadGen's serving scenarios, server and offline, end to end (their declaration:
inferbench.catalog.scenarios): queries served through the dynamic batcher in front of the engine and LoadGen's
search (``measure``), their summary columns (``columns``), and their face: the study's answer and the appendix
section (``answer``), the server search's plot (``plots``). ``answer`` and ``plots`` stand on the report's floor:
the report reaches them through the declaration."""

#: the name of their figures in a record (CellRecord.sections; ScenarioInfo.section: their folder's)
SECTION = "serving"
