"""The llm_load scenario, end to end: a decoder serving requests under load (its declaration:
inferbench.catalog.scenarios). Its settings and the requests they plan (``arrivals``), the timed sweep and the
merge of a cell's processes (``measure``), the figures of each request and load (``metrics``), the table of every
load beside the summary (``loads``), its summary columns (``columns``), and its face: the study's answer and the
appendix section (``answer``), the serving plot (``plots``). ``answer`` and ``plots`` stand on the report's
floor: only the report reaches them, through the declaration."""

#: the scenario's name, in its cells' keys and the records it writes
SCENARIO = "llm_load"
#: the name of its figures in a record (CellRecord.sections; ScenarioInfo.section: its folder's)
SECTION = SCENARIO
