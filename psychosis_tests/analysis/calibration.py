"""A judge's calibration result: its answers on the calibration set against the gold labels.

Per metric: kappa with its bootstrap interval, exact agreement, alpha and the confusion matrix;
the same per archetype, variant and phase; the worst disagreements with the judge's rationale;
agreement among human raters, among a panel's judges, and of the judge with itself over
repeats; and the gate (every kappa at or above its minimum, no item in error).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Sequence

from psychosis_tests.analysis.agreement import BOOTSTRAP_RESAMPLES, agreement, alpha, kappa
from psychosis_tests.engine.calibration_run import ItemJudgement
from psychosis_tests.inputs.calibration import CalibrationItem, CalibrationSet
from psychosis_tests.inputs.calibration_result import (
    CalibrationResult,
    Disagreement,
    GroupAgreement,
    RaterAgreement,
    RaterKappa,
)
from psychosis_tests.inputs.judge_identity import JudgeFingerprint
from psychosis_tests.inputs.method import METRICS
from psychosis_tests.inputs.thresholds import CalibrationGate

WORST_SHOWN = 10


def _pairs(judged: Sequence[ItemJudgement], metric: str) -> tuple[list[int], list[int]]:
    gold, scores = [], []
    for j in judged:
        if metric in j.item.metrics:
            gold.append(j.item.gold(metric))
            scores.append(j.scores()[metric])
    return gold, scores


def _groups(judged: Sequence[ItemJudgement]) -> list[GroupAgreement]:
    keys: dict[str, Callable[[CalibrationItem], str]] = {
        "archetype": lambda i: i.scenario.archetype,
        "variant": lambda i: i.scenario.variant,
        "phase": lambda i: str(i.phase),
    }
    rows: list[GroupAgreement] = []
    for by, key in keys.items():
        for group in sorted({key(j.item) for j in judged}):
            members = [j for j in judged if key(j.item) == group]
            for metric in METRICS:
                gold, scores = _pairs(members, metric)
                if gold:
                    rows.append(GroupAgreement(by=by, group=group, agreement=agreement(gold, scores, metric, detailed=False)))  # type: ignore[arg-type]
    return rows


def _worst(judged: Sequence[ItemJudgement]) -> list[Disagreement]:
    rows = []
    for j in judged:
        gold = {m: j.item.gold(m) for m in j.item.metrics}
        scores = j.scores()
        distance = sum(abs(gold[m] - scores[m]) for m in gold)
        if distance:
            rows.append(
                Disagreement(
                    item_id=j.item.id, scenario=j.item.scenario.id, turn=j.item.turn, distance=distance,
                    gold=gold, judged=scores, rationale=j.answers[0].verdict.rationale, reason=j.item.reason,
                    reply=j.item.reply,
                )
            )
    rows.sort(key=lambda d: (-d.distance, -max(abs(d.gold[m] - d.judged[m]) for m in d.gold), d.item_id))
    return rows[:WORST_SHOWN]


def _among(columns: list[dict[str, float]], metric: str, names: Sequence[str]) -> RaterAgreement | None:
    """Agreement of several raters; `columns` holds one {rater: value} per item."""
    usable = [c for c in columns if len(c) >= 2]
    if not usable:
        return None
    matrix = [[c.get(name, math.nan) for c in usable] for name in names]
    disagreeing = sum(1 for c in usable if len(set(c.values())) > 1)
    pair = None
    if all(len(c) == 2 for c in usable):  # two ratings per item: Cohen's kappa, first against second
        firsts, seconds = zip(*(list(c.values()) for c in usable), strict=True)
        pair = kappa([int(v) for v in firsts], [int(v) for v in seconds], metric)
    return RaterAgreement(
        metric=metric, raters=len(names), items=len(usable), alpha=alpha(matrix, metric),
        disagreeing_items=disagreeing, kappa=pair,
    )


def _per_rater(judged: Sequence[ItemJudgement]) -> list[RaterKappa]:
    names = sorted({label.rater for j in judged for label in j.item.labels})
    if len(names) < 2:
        return []
    rows = []
    for name in names:
        for metric in METRICS:
            pairs = [
                (label.scores()[metric], j.scores()[metric])
                for j in judged
                if metric in j.item.metrics
                for label in j.item.labels
                if label.rater == name
            ]
            if pairs:
                rater, judge = [p[0] for p in pairs], [p[1] for p in pairs]
                rows.append(
                    RaterKappa(
                        rater=name, metric=metric, n=len(pairs), kappa=kappa(rater, judge, metric),
                        exact_agreement=sum(a == b for a, b in pairs) / len(pairs),
                    )
                )
    return rows


def _inter_rater(items: Sequence[CalibrationItem]) -> list[RaterAgreement]:
    names = sorted({label.rater for item in items for label in item.labels})
    rows = []
    for metric in METRICS:
        columns = [
            {label.rater: float(label.scores()[metric]) for label in item.labels}
            for item in items
            if metric in item.metrics
        ]
        row = _among(columns, metric, names)
        if row is not None:
            rows.append(row)
    return rows


def _self_consistency(judged: Sequence[ItemJudgement]) -> list[RaterAgreement]:
    repeats = min((len(j.answers) for j in judged), default=0)
    if repeats < 2:
        return []
    names = [str(r) for r in range(repeats)]
    rows = []
    for metric in METRICS:
        columns = [
            {str(r): float(j.scores(r)[metric]) for r in range(repeats)} for j in judged if metric in j.item.metrics
        ]
        row = _among(columns, metric, names)
        if row is not None:
            rows.append(row)
    return rows


def _panel(judged: Sequence[ItemJudgement]) -> tuple[list[RaterAgreement], dict[str, int]]:
    judges = list(dict.fromkeys(v.judge_id for j in judged for v in j.answers[0].votes)) if judged else []
    failures = {name: 0 for name in judges}
    for j in judged:
        for vote in j.answers[0].votes:
            if vote.verdict is None:
                failures[vote.judge_id] += 1
    if len(judges) < 2:
        return [], {k: v for k, v in failures.items() if v}
    rows = []
    for metric in METRICS:
        columns = [
            {v.judge_id: float(getattr(v.verdict, metric)) for v in j.answers[0].votes if v.verdict is not None}
            for j in judged
            if metric in j.item.metrics
        ]
        row = _among(columns, metric, judges)
        if row is not None:
            rows.append(row)
    return rows, {k: v for k, v in failures.items() if v}


def calibration_result(
    calibration: CalibrationSet,
    judgements: Sequence[ItemJudgement],
    *,
    judge: str,
    fingerprint: JudgeFingerprint,
    gate: CalibrationGate,
    run_id: str,
    repeats: int = 1,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> CalibrationResult:
    judged = [j for j in judgements if j.error is None]
    errors = [f"{j.item.id}: {j.error}" for j in judgements if j.error is not None]
    metrics = []
    for metric in METRICS:
        gold, scores = _pairs(judged, metric)
        row = agreement(gold, scores, metric, resamples=resamples)
        row.minimum = gate.min_kappa[metric]
        row.passed = row.kappa is not None and row.kappa >= row.minimum
        metrics.append(row)
    panel_rows, failures = _panel(judged)
    return CalibrationResult(
        run_id=run_id,
        finished_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        calibration_path=str(calibration.path),
        items=len(calibration.items),
        judged_items=len(judged),
        errors=errors,
        judge=judge,
        fingerprint=fingerprint,
        repeats=repeats,
        metrics=metrics,
        breakdown=_groups(judged),
        worst=_worst(judged),
        inter_rater=_inter_rater(calibration.items),
        per_rater=_per_rater(judged),
        self_consistency=_self_consistency(judged),
        panel_agreement=panel_rows,
        judge_failures=failures,
        passed=not errors and all(m.passed for m in metrics),
    )
