"""A small, JSON-serialisable encoder for tabular features: median imputation + standardisation for
numeric columns, one-hot for categorical ones. Fitted without the target."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from inferbench.core.fsutil import read_json, write_json


@dataclass
class TabularEncoder:
    numeric: dict[str, dict[str, float]] = field(default_factory=dict)
    categorical: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def fit(cls, frame: pd.DataFrame, numeric: list[str], categorical: dict[str, list[Any]]) -> TabularEncoder:
        """``categorical`` maps a column to its known categories (fixed by the source's documentation,
        so the feature layout does not depend on which categories a sample happens to contain)."""
        stats: dict[str, dict[str, float]] = {}
        for col in numeric:
            values = pd.to_numeric(frame[col], errors="coerce").astype("float64")
            median = float(values.median()) if values.notna().any() else 0.0
            filled = values.fillna(median)
            std = float(filled.std(ddof=0))
            stats[col] = {"median": median, "mean": float(filled.mean()), "std": std if std > 0 else 1.0}
        return cls(stats, {col: [str(c) for c in cats] for col, cats in categorical.items()})

    @property
    def feature_names(self) -> list[str]:
        names = list(self.numeric)
        for col, cats in self.categorical.items():
            names += [f"{col}={c}" for c in cats]
        return names

    def transform(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Encode ``frame`` into float32 features. Unknown or missing categories encode as all zeros."""
        columns: dict[str, np.ndarray] = {}
        for col, s in self.numeric.items():
            values = pd.to_numeric(frame[col], errors="coerce").astype("float64").fillna(s["median"])
            columns[col] = ((values - s["mean"]) / s["std"]).to_numpy(np.float32)
        for col, cats in self.categorical.items():
            as_text = frame[col].astype("string")
            for cat in cats:
                columns[f"{col}={cat}"] = (as_text == cat).fillna(False).to_numpy(np.float32)
        return pd.DataFrame(columns, index=frame.index)

    def save(self, path: str | Path) -> None:
        write_json(path, asdict(self))

    @classmethod
    def load(cls, path: str | Path) -> TabularEncoder:
        return cls(**read_json(path))
