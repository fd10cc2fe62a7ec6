"""Datasets: generators that write the real raw formats, cleaning and encoding that work on the real
files, and downloads of the real ones. Each dataset is declared once here (light: the Snakefile, the
config schema and the command line read it); its module does the work."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class DatasetInfo:
    #: the module with ``generate(out_dir, **options)`` and ``clean(raw, **options) -> (table, encoder, stats)``
    module: str
    #: the raw file's name, as the real source names it (the generator writes the same)
    raw_name: str
    #: where the real file comes from (config ``datasets.<name>.source``; ``synthetic`` is always allowed)
    download_source: str
    #: the config keys of ``datasets.<name>`` that the generator and the cleaner take
    generate_options: tuple[str, ...]
    clean_options: tuple[str, ...]
    description: str

    @property
    def sources(self) -> tuple[str, ...]:
        return ("synthetic", self.download_source)

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


DATASETS: dict[str, DatasetInfo] = {
    "lendingclub": DatasetInfo(
        "inferbench.data.lendingclub",
        "accepted_2007_to_2018Q4.csv.gz",
        "kaggle",
        ("rows", "seed"),
        ("sample_rows", "seed"),
        "LendingClub accepted loans 2007-2018 (Kaggle wordsforthewise/lending-club)",
    ),
    "heart": DatasetInfo(
        "inferbench.data.heart",
        "processed.cleveland.data",
        "uci",
        ("seed",),
        (),
        "UCI Heart Disease, Cleveland (303 rows)",
    ),
}
