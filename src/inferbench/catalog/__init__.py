"""The ground floor: light declarations that every layer above reads, and that import nothing of the
package but each other. The axes and their values (``workloads``, ``scenarios``; ``engines``: what an
engine declares, found in its family by inferbench.engines.registry), the shapes of the report's answers
(``layouts``), the verbs and their traits (``verbs``), the exporters (``exporters``). A declaration names
the code that runs it as text (``"module:name"``, ``targets``), imported only when it runs: the Snakefile,
the config checks and the CLI read the catalog in milliseconds."""
