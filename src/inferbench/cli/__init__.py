"""The command line: ``python -m inferbench <verb> ...`` (or ``inferbench <verb>``), what every Snakemake
rule calls. ``verbs`` is the table of verbs and their traits, ``main`` builds the parser from it; each
verb's code (its arguments and what it does) lives in the module of its concern."""
