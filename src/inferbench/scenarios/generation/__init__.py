"""The generation scenario, end to end: a decoder answering requests one after another, token by token (its
declaration: inferbench.catalog.scenarios.GENERATION; its cells' key names the plain scenario). The timed
requests and the merge of a cell's processes (``measure``), its summary columns (``columns``), and its face: the
study's answer and the appendix section (``answer``), the plot against the batch size (``plots``). ``answer`` and
``plots`` stand on the report's floor: the report reaches them through the declaration."""

#: the name of its figures in a record (CellRecord.sections; ScenarioInfo.section: its folder's)
SECTION = "generation"
