"""Generators against the real raw formats, and cleaning on small hand-made files."""

from __future__ import annotations

import gzip
import re

import numpy as np
import pandas as pd
import pytest

from inferbench.data import heart, lendingclub
from inferbench.data.encoding import TabularEncoder
from inferbench.data.lendingclub_columns import ACCEPTED_COLUMNS

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)


@pytest.fixture(scope="module")
def lc_raw(tmp_path_factory):
    return lendingclub.generate(tmp_path_factory.mktemp("lc"), rows=3000, seed=1)


def test_lendingclub_generator_writes_the_real_layout(lc_raw):
    assert lc_raw.name == "accepted_2007_to_2018Q4.csv.gz"
    with gzip.open(lc_raw, "rt") as fh:  # really gzip
        header = fh.readline().rstrip("\n").split(",")
    assert header == list(ACCEPTED_COLUMNS) and len(header) == 151
    raw = pd.read_csv(lc_raw, dtype={"id": "string"}, low_memory=False)
    assert len(raw) == 3000 + 33
    footer = raw.tail(33)
    assert footer["id"].str.startswith("Total amount funded in policy code").all()
    assert footer.drop(columns="id").isna().all().all()  # every other column empty
    loans = raw.head(3000)
    assert loans["id"].str.fullmatch(r"\d+").all()
    assert loans["member_id"].isna().all()
    assert set(loans["term"]) == {" 36 months", " 60 months"}  # the leading space
    assert pd.api.types.is_float_dtype(loans["int_rate"])  # numbers in the 2018 file
    assert loans["issue_d"].str.fullmatch(r"[A-Z][a-z]{2}-\d{4}").all()
    assert (loans["fico_range_high"] - loans["fico_range_low"] == 4).all()
    assert set(loans["emp_length"].dropna()) <= set(lendingclub.EMP_LENGTHS)
    assert 0.02 < loans["emp_length"].isna().mean() < 0.12
    assert set(loans["loan_status"]) <= set(lendingclub.STATUS_SHARES)
    assert set(loans["purpose"]) <= set(lendingclub.PURPOSES)
    assert loans["sub_grade"].str.fullmatch(r"[A-G][1-5]").all()


def test_lendingclub_generator_is_seeded(tmp_path):
    a = lendingclub.generate(tmp_path / "a", rows=200, seed=3)
    b = lendingclub.generate(tmp_path / "b", rows=200, seed=3)
    assert pd.read_csv(a).equals(pd.read_csv(b))


def test_lendingclub_cleaning_on_generated_file(lc_raw):
    table, encoder, stats = lendingclub.clean(lc_raw)
    raw = pd.read_csv(lc_raw, usecols=["loan_status"]).dropna()
    finished = raw["loan_status"].isin(list(lendingclub.TARGET_BY_STATUS))
    assert stats["rows_raw"] == 3033 and stats["rows_loans"] == 3000
    assert stats["rows_clean"] == int(finished.sum()) == len(table)
    charged = raw["loan_status"].str.endswith("Charged Off")
    assert table["target"].sum() == int(charged.sum())
    features = table.drop(columns="target")
    assert list(features.columns) == encoder.feature_names
    assert features.notna().all().all() and (features.dtypes == np.float32).all()


def _write_lc(path, rows):
    frame = pd.DataFrame([{c: r.get(c) for c in ACCEPTED_COLUMNS} for r in rows], columns=list(ACCEPTED_COLUMNS))
    frame.to_csv(path, index=False, compression="gzip")
    return path


def _loan(i, status, int_rate="13.99", **extra):
    return {
        "id": str(1000 + i),
        "loan_status": status,
        "loan_amnt": 10000.0,
        "term": " 36 months",
        "int_rate": int_rate,
        "installment": 341.7,
        "grade": "C",
        "sub_grade": "C4",
        "emp_length": "10+ years",
        "home_ownership": "RENT",
        "annual_inc": 55000.0,
        "verification_status": "Verified",
        "issue_d": "Dec-2015",
        "purpose": "debt_consolidation",
        "dti": 18.2,
        "earliest_cr_line": "Aug-2003",
        "fico_range_low": 690.0,
        "fico_range_high": 694.0,
        "open_acc": 9.0,
        "pub_rec": 0.0,
        "revol_util": "45.1%",
        "total_acc": 20.0,
        "mort_acc": 1.0,
        "application_type": "Individual",
        **extra,
    }


def test_lendingclub_cleaning_exact_counts_and_parsing(tmp_path):
    rows = [
        _loan(0, "Fully Paid"),
        _loan(1, "Fully Paid", int_rate="7.5%"),
        _loan(2, "Fully Paid", term=" 60 months"),
        _loan(3, "Charged Off", emp_length="< 1 year"),
        _loan(4, "Charged Off", emp_length=None),
        _loan(5, "Current"),
        _loan(6, "Default"),
        _loan(7, "Late (31-120 days)"),
        _loan(8, "Does not meet the credit policy. Status:Fully Paid"),
        _loan(9, "Does not meet the credit policy. Status:Charged Off", dti=-1.0),
        {"id": "Total amount funded in policy code 1: 6417608175"},
        {"id": "Total amount funded in policy code 2: 1944088810"},
    ]
    path = _write_lc(tmp_path / lendingclub.RAW_FILE, rows)
    table, encoder, stats = lendingclub.clean(path)
    assert stats["rows_raw"] == 12 and stats["rows_loans"] == 10 and stats["rows_clean"] == 7
    assert table["target"].tolist() == [0, 0, 0, 1, 1, 0, 1]
    assert stats["positive_rate"] == pytest.approx(3 / 7)
    # both int_rate forms parse: 13.99 and '7.5%' give different standardised values, all finite
    rates = table["int_rate"].to_numpy()
    assert np.isfinite(rates).all() and rates[1] < rates[0]
    # the term, emp_length and dti sentinel parse as intended (median imputation for the missing)
    numeric = encoder.numeric
    assert numeric["term_months"]["mean"] == pytest.approx((6 * 36 + 60) / 7)
    assert numeric["emp_length_years"]["median"] == 10.0
    assert numeric["dti"]["median"] == 18.2  # -1 is a sentinel, not a ratio
    assert numeric["credit_history_years"]["mean"] == pytest.approx(12.33, abs=0.01)


def test_lendingclub_missing_columns_are_named(tmp_path):
    path = tmp_path / lendingclub.RAW_FILE
    pd.DataFrame({"id": ["1"], "loan_status": ["Fully Paid"]}).to_csv(path, index=False, compression="gzip")
    with pytest.raises(ValueError, match=r"lacks needed columns: loan_amnt, term"):
        lendingclub.clean(path)


def test_heart_generator_writes_the_uci_format(tmp_path):
    path = heart.generate(tmp_path, seed=0)
    lines = path.read_text().splitlines()
    assert path.name == "processed.cleveland.data" and len(lines) == 303
    fields = [line.split(",") for line in lines]
    assert all(len(f) == 14 for f in fields)
    assert not re.search(r"[a-z]", lines[0])  # no header
    assert sum(f[11] == "?" for f in fields) == 4 and sum(f[12] == "?" for f in fields) == 2
    assert all(re.fullmatch(r"\d+\.\d", f[0]) for f in fields)  # floats written like 63.0
    nums = [int(f[13]) for f in fields]
    assert set(nums) <= {0, 1, 2, 3, 4} and sum(n > 0 for n in nums) == 139
    assert {float(f[2]) for f in fields} <= {1.0, 2.0, 3.0, 4.0}
    assert {float(f[12]) for f in fields if f[12] != "?"} <= {3.0, 6.0, 7.0}


def test_heart_cleaning(tmp_path):
    path = tmp_path / heart.RAW_FILE
    path.write_text(
        "63.0,1.0,1.0,145.0,233.0,1.0,2.0,150.0,0.0,2.3,3.0,0.0,6.0,0\n"
        "67.0,1.0,4.0,160.0,286.0,0.0,2.0,108.0,1.0,1.5,2.0,3.0,3.0,2\n"
        "67.0,1.0,4.0,120.0,229.0,0.0,2.0,129.0,1.0,2.6,2.0,?,7.0,1\n"
        "37.0,1.0,3.0,130.0,250.0,0.0,0.0,187.0,0.0,3.5,3.0,0.0,?,0\n"
    )
    table, encoder, stats = heart.clean(path)
    assert stats["rows_raw"] == stats["rows_clean"] == 4
    assert table["target"].tolist() == [0, 1, 1, 0]
    assert stats["missing_values"] == {"ca": 1, "thal": 1}
    assert encoder.numeric["ca"]["median"] == 0.0  # '?' imputed with the median of 0, 3, 0
    assert table.loc[3, ["thal=3", "thal=6", "thal=7"]].sum() == 0  # missing thal: no category
    assert table.loc[0, "thal=6"] == 1.0 and table.loc[1, "cp=4"] == 1.0


def test_heart_rejects_wrong_layout(tmp_path):
    path = tmp_path / heart.RAW_FILE
    path.write_text("1,2,3\n")
    with pytest.raises(ValueError):
        heart.clean(path)


def test_encoder_round_trip(tmp_path):
    frame = pd.DataFrame({"a": [1.0, None, 3.0], "c": ["x", "y", None]})
    enc = TabularEncoder.fit(frame, ["a"], {"c": ["x", "y"]})
    enc.save(tmp_path / "enc.json")
    again = TabularEncoder.load(tmp_path / "enc.json")
    assert again.transform(frame).equals(enc.transform(frame))
    assert enc.feature_names == ["a", "c=x", "c=y"]
