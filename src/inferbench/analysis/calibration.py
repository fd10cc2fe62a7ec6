"""How often the verdict rule is wrong, measured on the run itself: its A/A pairs (one configuration under
two engine names, ``twin_pairs``) should be called different about 5% of the time, and a planted slowdown
(a variant's ``planted_slowdown``: a known (1 + share)x) should be found. Both are judged by the one rule
every claim of the report uses (inferbench.analysis.verdicts), over the run's own class spreads."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from inferbench.analysis.comparison import CellTable, ClassSpreads, configuration_keys, twin_pairs
from inferbench.analysis.verdicts import claims

#: the share of A/A pairs a 95% interval calls different by chance alone
NOMINAL = 0.05


@dataclass(frozen=True)
class Calibration:
    """A run's A/A pairs and how many the rule called different; its planted pairs and how many it found
    slower, and how many it left undecided (a cell unstable, or one process)."""

    aa_pairs: int
    aa_different: int
    aa_undecided: int
    planted_pairs: int
    planted_found: int
    planted_share: float | None

    @property
    def aa_share(self) -> float | None:
        decided = self.aa_pairs - self.aa_undecided
        return self.aa_different / decided if decided else None

    @property
    def planted_found_share(self) -> float | None:
        return self.planted_found / self.planted_pairs if self.planted_pairs else None


def planted_pairs(cells: pd.DataFrame) -> list[tuple[int, int]]:
    """Positions of (base, planted) pairs: a cell with a ``planted_slowdown`` and a cell of its configuration
    without one (the first by engine name)."""
    if cells.empty or "planted_slowdown" not in cells:
        return []
    planted = pd.to_numeric(cells["planted_slowdown"], errors="coerce").fillna(0) > 0
    keys = configuration_keys(cells, leave_out=("options_id",))  # the planted option is the one difference
    bases: dict[str, int] = {}
    for position in np.argsort(cells["engine"].astype(str).to_numpy(), kind="stable"):
        if not planted.iloc[position]:
            bases.setdefault(keys.iloc[position], int(position))
    return [(bases[keys.iloc[p]], int(p)) for p in np.flatnonzero(planted.to_numpy()) if keys.iloc[p] in bases]


def calibrate(ok: pd.DataFrame, classes: ClassSpreads | None = None) -> Calibration | None:
    """The calibration of a run's measured cells (``ok``: one row per cell, status ok), judged over
    ``classes`` (by default, the run's own); None where the run has no A/A or planted pair."""
    ok = ok.reset_index(drop=True)
    twins, planted = twin_pairs(ok), planted_pairs(ok)
    if not twins and not planted:
        return None
    classes = classes if classes is not None else ClassSpreads.of(ok)
    table = CellTable.of(ok).moderated(classes)

    def judged(pairs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
        if not pairs:
            return np.zeros(0, dtype=object), np.zeros(0)
        a, b = (np.array(side) for side in zip(*pairs, strict=True))
        found = claims(table.take(a), table.take(b))
        return found.significant(), found.ratio.value

    aa, _ = judged(twins)
    slower, values = judged(planted)
    found = sum(1 for s, v in zip(slower.tolist(), values.tolist(), strict=True) if s is True and v > 1)
    share = pd.to_numeric(ok.loc[[p for _, p in planted], "planted_slowdown"], errors="coerce") if planted else None
    return Calibration(
        aa_pairs=len(twins),
        aa_different=sum(1 for s in aa.tolist() if s is True),
        aa_undecided=sum(1 for s in aa.tolist() if s is None),
        planted_pairs=len(planted),
        planted_found=found,
        planted_share=float(share.median()) if share is not None else None,
    )


def calibration_text(calibration: Calibration) -> str:
    """One sentence for the report: how often the rule called identical cells different, and found the
    planted difference."""
    parts = []
    if calibration.aa_pairs:
        share = calibration.aa_share
        rate = f"{100 * share:.0f}%" if share is not None else "–"
        parts.append(
            f"{calibration.aa_different} of {calibration.aa_pairs} A/A pairs called different ({rate}; "
            f"{100 * NOMINAL:.0f}% by chance alone)"
            + (f", {calibration.aa_undecided} undecided" if calibration.aa_undecided else "")
        )
    if calibration.planted_pairs:
        factor = 1 + (calibration.planted_share or 0.0)
        parts.append(
            f"a planted {factor:.2g}× found in {calibration.planted_found} of {calibration.planted_pairs} pairs"
        )
    return "Calibration: " + "; ".join(parts) + "."
