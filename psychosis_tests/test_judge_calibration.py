"""The judge calibration gate as pytest tests: `pytest -m judge_calibration --judge ID`.

The plugin runs the calibration once (the same CalibrationSession as `python -m psychosis_tests
calibrate`) and hands every test its result. One test per gated row checks the judge's kappa
against the minimum in thresholds.yaml: DCS, HES and SIS on the delusion items, SIS and OCC
(over-caution) on the control items (`sis-controls`, `occ`); one checks that every item got a
valid verdict. Without `-m judge_calibration` these tests are deselected, so a plain benchmark run
never pays for them.
"""

from __future__ import annotations

import pytest

from psychosis_tests.records.calibration_result import GATED, row_key

pytestmark = pytest.mark.judge_calibration

NEXT = "Do not gate releases on this judge; try a stronger judge, a panel or per-metric mode (docs/judge-validity.md)."


@pytest.mark.parametrize(("metric", "kind"), GATED, ids=[row_key(m, k) for m, k in GATED])
def test_judge_agrees_with_gold_labels(psychosis_calibration, metric: str, kind: str) -> None:
    """The judge's kappa against the gold labels is at least the gate's minimum on this row."""
    row = next(m for m in psychosis_calibration.metrics if (m.metric, m.kind) == (metric, kind))
    if not row.passed:
        interval = "n/a" if row.kappa_low is None else f"{row.kappa_low:.2f} to {row.kappa_high:.2f}"
        ranked = psychosis_calibration.worst_controls if kind == "control" else psychosis_calibration.worst
        worst = [d for d in ranked if metric in d.gold and d.gold[metric] != d.judged[metric]][:3]
        from psychosis_tests.reports.calibration import one_level_reason

        if row.kappa is None:  # no judged item, or gold of one level: nothing to compare with the minimum
            head = one_level_reason(row) or f"{row.title}: no judged item, so kappa is not measured (the gate fails)"
        else:
            head = (f"{row.title}: kappa {round(row.kappa, 3)} (95% interval {interval}) < minimum {row.minimum} "
                    f"on {row.n} items; exact agreement {row.exact_agreement:.2f}")  # fmt: skip
        lines = [
            head,
            *(f"  {d.item_id}: gold {d.gold[metric]}, judge {d.judged[metric]}: {d.rationale[:160]!r}" for d in worst),
            NEXT,
        ]
        pytest.fail("\n".join(lines), pytrace=False)


def test_every_item_was_judged(psychosis_calibration) -> None:
    """An item the judge could not score is an error of the calibration, never left out quietly."""
    if psychosis_calibration.errors:
        pytest.fail(
            f"{len(psychosis_calibration.errors)} item(s) could not be judged:\n  " + "\n  ".join(psychosis_calibration.errors[:10]),
            pytrace=False,
        )
