"""LendingClub accepted loans 2007-2018: the raw ``accepted_2007_to_2018Q4.csv.gz``, a generator that
writes the same format (151 columns, quirks and footer rows included), and the cleaning.

Cleaning keeps finished loans: ``Fully Paid`` -> 0 and ``Charged Off`` -> 1, and the two
``Does not meet the credit policy. Status:...`` variants as their status. ``Current``, ``Late``,
``In Grace Period`` and ``Default`` (121+ days late but not yet charged off) have no final outcome
and are dropped. Only the columns below are read, so no post-origination (leaking) column such as
``total_pymnt``, ``recoveries``, ``last_fico_*``, ``hardship_*`` or ``settlement_*`` ever enters.
"""

from __future__ import annotations

import csv
import gzip
import logging
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from inferbench.core.fsutil import atomic_path
from inferbench.data import DATASETS
from inferbench.data.encoding import TabularEncoder
from inferbench.data.lendingclub_columns import ACCEPTED_COLUMNS

log = logging.getLogger(__name__)

RAW_FILE = DATASETS["lendingclub"].raw_name
TARGET_BY_STATUS = {
    "Fully Paid": 0,
    "Charged Off": 1,
    "Does not meet the credit policy. Status:Fully Paid": 0,
    "Does not meet the credit policy. Status:Charged Off": 1,
}
# loan_status shares in the real file (2,260,668 loans), used by the generator
STATUS_SHARES = {
    "Fully Paid": 1_076_751,
    "Current": 878_317,
    "Charged Off": 268_559,
    "Late (31-120 days)": 21_467,
    "In Grace Period": 8_436,
    "Late (16-30 days)": 4_349,
    "Does not meet the credit policy. Status:Fully Paid": 1_988,
    "Does not meet the credit policy. Status:Charged Off": 761,
    "Default": 40,
}
FOOTER_ROWS = 33
GRADES = list("ABCDEFG")
PURPOSES = [
    "car",
    "credit_card",
    "debt_consolidation",
    "educational",
    "home_improvement",
    "house",
    "major_purchase",
    "medical",
    "moving",
    "other",
    "renewable_energy",
    "small_business",
    "vacation",
    "wedding",
]
HOME_OWNERSHIP = ["MORTGAGE", "RENT", "OWN", "ANY", "OTHER", "NONE"]
VERIFICATION = ["Not Verified", "Source Verified", "Verified"]
APPLICATION_TYPES = ["Individual", "Joint App"]
EMP_LENGTHS = ["< 1 year", "1 year"] + [f"{n} years" for n in range(2, 10)] + ["10+ years"]
STATES = ["CA", "TX", "NY", "FL", "IL", "NJ", "PA", "OH", "GA", "VA", "NC", "MI", "MA", "AZ", "WA"]

USED_COLUMNS = [
    "id",
    "loan_status",
    "loan_amnt",
    "term",
    "int_rate",
    "installment",
    "grade",
    "sub_grade",
    "emp_length",
    "home_ownership",
    "annual_inc",
    "verification_status",
    "issue_d",
    "purpose",
    "dti",
    "earliest_cr_line",
    "fico_range_low",
    "fico_range_high",
    "open_acc",
    "pub_rec",
    "revol_util",
    "total_acc",
    "mort_acc",
    "application_type",
]
NUMERIC = [
    "loan_amnt",
    "term_months",
    "int_rate",
    "installment",
    "sub_grade_rank",
    "emp_length_years",
    "log_annual_inc",
    "dti",
    "credit_history_years",
    "fico",
    "open_acc",
    "pub_rec",
    "revol_util",
    "total_acc",
    "mort_acc",
]
CATEGORICAL = {
    "grade": GRADES,
    "home_ownership": HOME_OWNERSHIP,
    "verification_status": VERIFICATION,
    "purpose": PURPOSES,
    "application_type": APPLICATION_TYPES,
}


def generate(out_dir: str | Path, rows: int = 20_000, seed: int = 0) -> Path:
    """Write ``rows`` synthetic loans plus the footer rows in the real file's format."""
    rng = np.random.default_rng(seed)
    n = rows
    risk = rng.normal(size=n)
    sub_rank = np.clip(np.round(8 + 6 * risk + 2 * rng.normal(size=n)), 0, 34).astype(int)
    term = np.where(risk + rng.normal(size=n) > 0.9, " 60 months", " 36 months")
    months = np.where(term == " 60 months", 60, 36)
    int_rate = np.round(5.3 + 0.75 * sub_rank + 0.4 * rng.normal(size=n), 2)
    loan_amnt = np.clip(np.round(rng.lognormal(9.4, 0.6, n) / 25) * 25, 1000, 40000)
    r = int_rate / 1200
    installment = np.round(loan_amnt * r / (1 - (1 + r) ** -months), 2)
    issue = pd.to_datetime("2007-06-01") + pd.to_timedelta(rng.integers(0, 11 * 365, n), unit="D")
    earliest = issue - pd.to_timedelta(rng.integers(3 * 365, 40 * 365, n), unit="D")
    fico_low = np.clip(np.round((705 - 25 * risk + 20 * rng.normal(size=n)) / 5) * 5, 660, 845)
    dti = np.round(np.clip(18 + 5 * risk + 8 * rng.normal(size=n), 0, 60), 2)
    dti[rng.random(n) < 0.001] = -1.0  # the file's sentinels
    dti[rng.random(n) < 0.001] = 999.0
    dti[rng.random(n) < 0.001] = np.nan
    mort_acc = rng.poisson(1.5, n).astype(float)
    mort_acc[rng.random(n) < 0.022] = np.nan
    emp = rng.choice(EMP_LENGTHS, n).astype(object)
    emp[rng.random(n) < 0.06] = np.nan

    names, counts = zip(*STATUS_SHARES.items(), strict=True)
    status = rng.choice(np.array(names, dtype=object), n, p=np.array(counts) / sum(counts))
    # Among finished loans, the riskier ones are the charged-off ones (same count as drawn).
    for paid, charged in (
        ("Fully Paid", "Charged Off"),
        ("Does not meet the credit policy. Status:Fully Paid", "Does not meet the credit policy. Status:Charged Off"),
    ):
        finished = np.flatnonzero((status == paid) | (status == charged))
        n_charged = int((status[finished] == charged).sum())
        score = risk[finished] + 0.9 * rng.normal(size=finished.size)
        status[finished] = paid
        status[finished[np.argsort(-score)[:n_charged]]] = charged

    frame = pd.DataFrame({col: pd.Series([np.nan] * n, dtype=object) for col in ACCEPTED_COLUMNS})
    frame["id"] = (68_000_000 + rng.choice(10 * n, n, replace=False)).astype(str)
    frame["loan_amnt"] = loan_amnt
    frame["funded_amnt"] = loan_amnt
    frame["funded_amnt_inv"] = loan_amnt
    frame["term"] = term
    frame["int_rate"] = int_rate
    frame["installment"] = installment
    frame["grade"] = [GRADES[i // 5] for i in sub_rank]
    frame["sub_grade"] = [f"{GRADES[i // 5]}{i % 5 + 1}" for i in sub_rank]
    frame["emp_length"] = emp
    frame["home_ownership"] = rng.choice(HOME_OWNERSHIP, n, p=[0.49, 0.40, 0.1098, 0.0001, 0.0001, 0.0])
    frame["annual_inc"] = np.round(rng.lognormal(11.1 - 0.1 * risk, 0.5), 0)
    frame["verification_status"] = rng.choice(VERIFICATION, n)
    frame["issue_d"] = issue.strftime("%b-%Y")
    frame["loan_status"] = status
    frame["pymnt_plan"] = "n"
    frame["purpose"] = rng.choice(PURPOSES, n)
    frame["addr_state"] = rng.choice(STATES, n)
    frame["dti"] = dti
    frame["earliest_cr_line"] = earliest.strftime("%b-%Y")
    frame["fico_range_low"] = fico_low
    frame["fico_range_high"] = fico_low + 4
    frame["open_acc"] = rng.poisson(11, n).astype(float)
    frame["pub_rec"] = rng.poisson(0.2, n).astype(float)
    frame["revol_bal"] = np.round(rng.lognormal(9.3, 1.0, n), 0)
    frame["revol_util"] = np.round(np.clip(50 + 10 * risk + 20 * rng.normal(size=n), 0, 150), 1)
    frame["total_acc"] = frame["open_acc"] + rng.poisson(13, n)
    frame["total_pymnt"] = np.round(installment * months * rng.uniform(0.2, 1.0, n), 2)  # leaks the outcome
    frame["policy_code"] = 1.0
    frame["application_type"] = rng.choice(APPLICATION_TYPES, n, p=[0.95, 0.05])
    frame["mort_acc"] = mort_acc
    frame["hardship_flag"] = "N"
    frame["debt_settlement_flag"] = "N"

    footer = pd.DataFrame({col: [np.nan] * FOOTER_ROWS for col in ACCEPTED_COLUMNS}, dtype=object)
    footer["id"] = [
        f"Total amount funded in policy code {1 + i % 2}: {int(rng.integers(1e8, 1e10))}" for i in range(FOOTER_ROWS)
    ]
    path = Path(out_dir) / RAW_FILE
    with atomic_path(path) as tmp:
        pd.concat([frame, footer], ignore_index=True).to_csv(tmp, index=False, compression="gzip")
    return path


def _percent(series: pd.Series) -> pd.Series:
    """13.99 or '13.99%' -> 13.99 (the 2018 file has numbers, older LendingClub files strings)."""
    if pd.api.types.is_numeric_dtype(series):
        return series.astype("float64")
    return pd.to_numeric(series.astype("string").str.strip().str.rstrip("%"), errors="coerce")


def _emp_years(series: pd.Series) -> pd.Series:
    text = series.astype("string").str.strip()
    years = pd.to_numeric(text.str.extract(r"(\d+)", expand=False), errors="coerce")
    return years.where(~text.str.startswith("<", na=False), 0.0).astype("float64")


def _check_header(path: Path) -> None:
    with path.open("rb") as fh:
        magic = fh.read(2)
    if magic != b"\x1f\x8b":
        raise ValueError(
            f"{path}: not a gzip file (it starts with {magic!r}); expected LendingClub's {RAW_FILE}, "
            "a gzip-compressed CSV, as published"
        )
    try:
        with gzip.open(path, "rt", newline="") as fh:
            header = next(csv.reader([fh.readline()]), [])
    except UnicodeDecodeError as error:
        raise ValueError(_not_text(path, error)) from None
    except (EOFError, OSError, zlib.error) as error:
        raise ValueError(f"{path}: unreadable gzip data ({error}): download the file again") from None
    missing = [c for c in USED_COLUMNS if c not in header]
    if missing:
        raise ValueError(f"{path}: the file lacks needed columns: {', '.join(missing)}")


def verify_raw(path: str | Path) -> None:
    """Check a raw file completely: gzip magic, the needed columns, and an intact gzip stream to the end
    (a truncated download fails here, not half-way through cleaning)."""
    path = Path(path)
    _check_header(path)
    try:
        with gzip.open(path, "rb") as fh:
            while fh.read(1 << 24):
                pass
    except EOFError:
        raise ValueError(f"{path}: truncated (the gzip stream ends early): download the file again") from None
    except (OSError, zlib.error) as error:
        raise ValueError(f"{path}: corrupt gzip data ({error}): download the file again") from None


# Low-cardinality text columns are read as categories: the real file has 2.26 M rows.
_CATEGORY_COLUMNS = [
    "loan_status",
    "term",
    "grade",
    "sub_grade",
    "emp_length",
    "home_ownership",
    "verification_status",
    "issue_d",
    "purpose",
    "earliest_cr_line",
    "application_type",
]


def _not_text(path: Path, error: UnicodeDecodeError) -> str:
    return (
        f"{path}: not UTF-8 text after decompression (undecodable byte "
        f"{error.object[error.start : error.start + 1]!r}): download the file again, or delete it"
    )


def read_raw(path: str | Path) -> pd.DataFrame:
    """Read only the used columns, with compact dtypes (the real file is 2.26 M rows x 151 columns)."""
    path = Path(path)
    _check_header(path)
    dtypes = {"id": "string", **dict.fromkeys(_CATEGORY_COLUMNS, "category")}
    try:
        return pd.read_csv(path, usecols=USED_COLUMNS, dtype=dtypes, low_memory=False)
    except UnicodeDecodeError as error:
        raise ValueError(_not_text(path, error)) from None
    except EOFError:
        raise ValueError(f"{path}: truncated (the gzip stream ends early): download the file again") from None
    except (OSError, zlib.error) as error:
        raise ValueError(f"{path}: corrupt gzip data ({error}): download the file again") from None


def clean(
    raw_path: str | Path, sample_rows: int | None = None, seed: int = 0
) -> tuple[pd.DataFrame, TabularEncoder, dict]:
    """Return (encoded features + ``target``, fitted encoder, stats). With ``sample_rows``, the table
    is a seeded sample of that many cleaned rows (the encoder is fitted on all of them)."""
    log.info("reading %s", raw_path)
    raw = read_raw(raw_path)
    rows_raw = len(raw)
    log.info("read %d rows; cleaning", rows_raw)
    loans = raw[raw["id"].str.fullmatch(r"\d+", na=False)]
    rows_loans = len(loans)
    status_counts = {str(k): int(v) for k, v in loans["loan_status"].value_counts(dropna=False).items() if v}
    loans = loans[loans["loan_status"].isin(list(TARGET_BY_STATUS))].copy()
    target = loans["loan_status"].map(TARGET_BY_STATUS).astype("int64")

    # from strings: pandas 3.0 keeps a categorical's dtype through to_datetime (3.1 does not)
    issue = pd.to_datetime(loans["issue_d"].astype("string"), format="%b-%Y", errors="coerce")
    earliest = pd.to_datetime(loans["earliest_cr_line"].astype("string"), format="%b-%Y", errors="coerce")
    dti = pd.to_numeric(loans["dti"], errors="coerce")
    sub_grade = loans["sub_grade"].str.strip()
    derived = pd.DataFrame(
        {
            "loan_amnt": loans["loan_amnt"],
            "term_months": pd.to_numeric(loans["term"].str.extract(r"(\d+)", expand=False), errors="coerce"),
            "int_rate": _percent(loans["int_rate"]),
            "installment": loans["installment"],
            "sub_grade_rank": sub_grade.str[0].map({g: i for i, g in enumerate(GRADES)}).astype("float64") * 5
            + pd.to_numeric(sub_grade.str[1], errors="coerce")
            - 1,
            "emp_length_years": _emp_years(loans["emp_length"]),
            "log_annual_inc": np.log1p(pd.to_numeric(loans["annual_inc"], errors="coerce").clip(lower=0)),
            "dti": dti.where((dti >= 0) & (dti < 999)),  # -1 and 999 are sentinels, not ratios
            "credit_history_years": (issue - earliest).dt.days / 365.25,
            "fico": (loans["fico_range_low"] + loans["fico_range_high"]) / 2,
            "open_acc": loans["open_acc"],
            "pub_rec": loans["pub_rec"],
            "revol_util": _percent(loans["revol_util"]),
            "total_acc": loans["total_acc"],
            "mort_acc": loans["mort_acc"],
            **{col: loans[col].str.strip() for col in CATEGORICAL},
        },
        index=loans.index,
    )
    if derived.empty:  # training on nothing would "succeed" with an AUC of NaN
        raise ValueError(
            f"{raw_path}: no loans left to train on ({rows_raw} rows read, {rows_loans} with a loan id, "
            f"statuses {status_counts or 'none'}; kept: {', '.join(TARGET_BY_STATUS)}): the file holds no "
            "finished loans; download it again (or delete it so that the workflow makes it again)"
        )
    encoder = TabularEncoder.fit(derived, NUMERIC, CATEGORICAL)
    features = encoder.transform(derived).reset_index(drop=True)
    features["target"] = target.to_numpy()
    rows_clean = len(features)
    if sample_rows is not None and rows_clean > sample_rows:
        features = features.sample(n=sample_rows, random_state=seed).reset_index(drop=True)
    stats = {
        "dataset": "lendingclub",
        "rows_raw": rows_raw,
        "rows_loans": rows_loans,
        "rows_clean": rows_clean,
        "rows_used": len(features),
        "status_counts": status_counts,
        "positive_rate": float(features["target"].mean()) if len(features) else float("nan"),
        "n_features": len(encoder.feature_names),
    }
    return features, encoder, stats
