"""UCI Heart Disease (Cleveland): the raw ``processed.cleveland.data`` format, a generator, cleaning.

Raw format: 303 rows, no header, comma-separated, floats written like ``63.0``, ``?`` for missing
values (4 in ``ca``, 2 in ``thal``), target ``num`` in 0..4. Target used here: ``num > 0``.
Missing values are kept and imputed by the encoder (median for ``ca``; ``thal`` missing encodes as no
category), so all 303 rows are used.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd

from inferbench.core.fsutil import atomic_path
from inferbench.data import DATASETS
from inferbench.data.encoding import TabularEncoder

RAW_FILE = DATASETS["heart"].raw_name
COLUMNS = (
    "age",
    "sex",
    "cp",
    "trestbps",
    "chol",
    "fbs",
    "restecg",
    "thalach",
    "exang",
    "oldpeak",
    "slope",
    "ca",
    "thal",
    "num",
)
NUMERIC = ["age", "sex", "trestbps", "chol", "fbs", "thalach", "exang", "oldpeak", "ca"]
CATEGORICAL = {"cp": [1, 2, 3, 4], "restecg": [0, 1, 2], "slope": [1, 2, 3], "thal": [3, 6, 7]}
ROWS, POSITIVES, MISSING = 303, 139, {"ca": 4, "thal": 2}


def generate(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a synthetic ``processed.cleveland.data`` with the real layout, ranges, class balance and
    missing-value counts; the target depends on the features so a model can learn it."""
    rng = np.random.default_rng(seed)
    n = ROWS
    risk = rng.normal(size=n)
    frame = pd.DataFrame(
        {
            "age": np.clip(np.round(54 + 9 * rng.normal(size=n) + 2 * risk), 29, 77),
            "sex": (rng.random(n) < 0.68 + 0.1 * np.tanh(risk)).astype(float),
            "cp": np.where(risk + rng.normal(size=n) > 0.5, 4.0, rng.integers(1, 4, n).astype(float)),
            "trestbps": np.clip(np.round(131 + 17 * rng.normal(size=n)), 94, 200),
            "chol": np.clip(np.round(246 + 51 * rng.normal(size=n)), 126, 564),
            "fbs": (rng.random(n) < 0.15).astype(float),
            "restecg": rng.choice([0.0, 1.0, 2.0], n, p=[0.5, 0.02, 0.48]),
            "thalach": np.clip(np.round(150 - 12 * risk + 18 * rng.normal(size=n)), 71, 202),
            "exang": (risk + rng.normal(size=n) > 0.8).astype(float),
            "oldpeak": np.clip(np.round(np.abs(1.0 + 0.8 * risk + rng.normal(size=n)), 1), 0, 6.2),
            "slope": rng.choice([1.0, 2.0, 3.0], n, p=[0.47, 0.46, 0.07]),
            "ca": np.clip(np.round(0.7 + 0.6 * risk + 0.7 * rng.normal(size=n)), 0, 3),
            "thal": np.where(risk + rng.normal(size=n) > 0.6, 7.0, rng.choice([3.0, 6.0], n, p=[0.9, 0.1])),
        }
    )
    # exactly the real class balance: the POSITIVES highest-risk rows are ill, severity 1..4
    order = np.argsort(-(risk + 0.5 * rng.normal(size=n)))
    num = np.zeros(n, dtype=int)
    num[order[:POSITIVES]] = rng.integers(1, 5, POSITIVES)
    frame["num"] = num
    lines = []
    missing = {col: set(rng.choice(n, k, replace=False)) for col, k in MISSING.items()}
    for i, row in enumerate(frame.itertuples(index=False)):
        fields = [
            "?" if i in missing.get(col, ()) else (str(int(val)) if col == "num" else f"{float(val):.1f}")
            for col, val in zip(COLUMNS, row, strict=True)
        ]
        lines.append(",".join(fields))
    path = Path(out_dir) / RAW_FILE
    with atomic_path(path) as tmp:
        tmp.write_text("\n".join(lines) + "\n")
    return path


#: what to do about a raw file that is not as published
REMEDY = "delete it and re-run: the workflow downloads (or generates) it again"


def read_raw(path: str | Path) -> pd.DataFrame:
    """The raw rows, checked: text, every row with its 14 values, a target on each (errors name the
    file and the line, counted from 1, as an editor shows it)."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{path}: not a text file (undecodable byte {error.object[error.start : error.start + 1]!r} at "
            f"offset {error.start}); expected UCI's {RAW_FILE}: {REMEDY}"
        ) from None
    lines = [(number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise ValueError(f"{path}: the file is empty; expected UCI's {RAW_FILE}: {REMEDY}")
    for number, line in lines:  # pandas would pad a short row with missing values: a silent target 0
        values = line.count(",") + 1
        if values != len(COLUMNS):
            raise ValueError(
                f"{path}, line {number}: {values} values, expected {len(COLUMNS)} ({', '.join(COLUMNS)}): {REMEDY}"
            )
    frame = pd.read_csv(io.StringIO(text), header=None, na_values="?")
    frame.columns = list(COLUMNS)
    missing_target = [lines[i][0] for i in np.flatnonzero(frame["num"].isna().to_numpy())]
    if missing_target:
        raise ValueError(
            f"{path}, line {missing_target[0]}: no target (`num` is missing) on {len(missing_target)} row(s), "
            f"lines {', '.join(map(str, missing_target[:10]))}: {REMEDY}"
        )
    non_numeric = [c for c in COLUMNS if not pd.api.types.is_numeric_dtype(frame[c])]
    if non_numeric:
        raise ValueError(f"{path}: non-numeric values (other than '?') in columns {', '.join(non_numeric)}")
    for col in CATEGORICAL:  # 6.0 -> 6, so that values match the documented categories
        frame[col] = frame[col].round().astype("Int64")
    return frame


def clean(raw_path: str | Path) -> tuple[pd.DataFrame, TabularEncoder, dict]:
    """Return (encoded features + ``target``, fitted encoder, stats)."""
    raw = read_raw(raw_path)
    target = (raw["num"] > 0).astype("int64")
    encoder = TabularEncoder.fit(raw, NUMERIC, CATEGORICAL)
    features = encoder.transform(raw)
    features["target"] = target.to_numpy()
    stats = {
        "dataset": "heart",
        "rows_raw": len(raw),
        "rows_clean": len(features),
        "rows_used": len(features),
        "positive_rate": float(target.mean()),
        "missing_values": {col: int(raw[col].isna().sum()) for col in COLUMNS if raw[col].isna().any()},
        "n_features": len(encoder.feature_names),
    }
    return features, encoder, stats
