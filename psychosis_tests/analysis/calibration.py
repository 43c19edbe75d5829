"""A judge's calibration result: its answers on the calibration set against the gold labels.

Per (metric, kind of scenario) row: kappa with its bootstrap interval, exact agreement, alpha and
the confusion matrix; the same per archetype, variant and phase; the worst disagreements with the
judge's rationale; agreement among human raters, among a panel's judges, and of the judge with
itself over repeats; for a judge that gives each score a probability, whether those probabilities
match how often its scores were right; and the gate (every gated row's kappa at or above its minimum, no item in
error). The rows are DCS, HES and SIS over the items on delusion scenarios and SIS and OCC over
the items on control scenarios (`GATED`); DCS or HES labelled on a control item is reported apart
and not gated.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Sequence

from psychosis_tests.analysis.agreement import BOOTSTRAP_RESAMPLES, agreement, alpha, kappa
from psychosis_tests.analysis.reliability import reliability
from psychosis_tests.engine.calibration_run import ItemJudgement
from psychosis_tests.engine.panel import vote_of
from psychosis_tests.inputs.calibration import CalibrationItem, CalibrationSet
from psychosis_tests.records.calibration_result import (
    GATED,
    CalibrationResult,
    Disagreement,
    Escalation,
    GroupAgreement,
    ProbabilityReliability,
    RaterAgreement,
    RaterKappa,
)
from psychosis_tests.inputs.judge_identity import JudgeFingerprint
from psychosis_tests.inputs.method import JUDGED_METRICS
from psychosis_tests.inputs.thresholds import CalibrationGate

WORST_SHOWN = 10

Row = tuple[str, str]
"""(metric, kind): one line of the report."""


def rows_of(items: Sequence[CalibrationItem]) -> list[Row]:
    """The gated rows, then every other (metric, kind) some item is labelled on, in a stable order."""
    labelled = {(m, item.kind) for item in items for m in item.metrics}
    extra = [(m, k) for k in ("delusion", "control") for m in JUDGED_METRICS if (m, k) in labelled and (m, k) not in GATED]
    return [*GATED, *extra]


def _on(item: CalibrationItem, row: Row) -> bool:
    metric, kind = row
    return item.kind == kind and metric in item.metrics


def _pairs(judged: Sequence[ItemJudgement], row: Row) -> tuple[list[int], list[int]]:
    gold, scores = [], []
    for j in judged:
        if _on(j.item, row):
            gold.append(j.item.gold(row[0]))
            scores.append(j.scores()[row[0]])
    return gold, scores


def _groups(judged: Sequence[ItemJudgement], rows: Sequence[Row]) -> list[GroupAgreement]:
    keys: dict[str, Callable[[CalibrationItem], str]] = {
        "archetype": lambda i: i.scenario.archetype,
        "variant": lambda i: i.scenario.variant,
        "phase": lambda i: str(i.phase),
    }
    out: list[GroupAgreement] = []
    for by, key in keys.items():
        for group in sorted({key(j.item) for j in judged}):
            members = [j for j in judged if key(j.item) == group]
            for metric, kind in rows:
                gold, scores = _pairs(members, (metric, kind))
                if gold:
                    row = agreement(gold, scores, metric, detailed=False, kind=kind)
                    out.append(GroupAgreement(by=by, group=group, agreement=row))  # type: ignore[arg-type]
    return out


def _worst(judged: Sequence[ItemJudgement], kind: str) -> list[Disagreement]:
    """The largest disagreements among the items of one kind (a control item's distance is at
    most 2, so control items are ranked apart from delusion items, whose distance reaches 5)."""
    found = []
    for j in judged:
        if j.item.kind != kind:
            continue
        gold = {m: j.item.gold(m) for m in j.item.metrics}
        scores = j.scores()
        distance = sum(abs(gold[m] - scores[m]) for m in gold)
        if distance:
            found.append(
                Disagreement(
                    item_id=j.item.id, scenario=j.item.scenario.id, kind=j.item.kind, turn=j.item.turn,
                    distance=distance, gold=gold, judged=scores, rationale=j.answers[0].verdict.rationale,
                    reason=j.item.reason, reply=j.item.reply,
                )
            )
    found.sort(key=lambda d: (-d.distance, -max(abs(d.gold[m] - d.judged[m]) for m in d.gold), d.item_id))
    return found[:WORST_SHOWN]


def _among(columns: list[dict[str, float]], row: Row, names: Sequence[str]) -> RaterAgreement | None:
    """Agreement of several raters; `columns` holds one {rater: value} per item."""
    metric, kind = row
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
        metric=metric, kind=kind, raters=len(names), items=len(usable),  # type: ignore[arg-type]
        alpha=alpha(matrix, metric), disagreeing_items=disagreeing, kappa=pair,
    )


def _per_rater(judged: Sequence[ItemJudgement], rows: Sequence[Row]) -> list[RaterKappa]:
    names = sorted({label.rater for j in judged for label in j.item.labels})
    if len(names) < 2:
        return []
    out = []
    for name in names:
        for metric, kind in rows:
            pairs = [
                (label.scores()[metric], j.scores()[metric])
                for j in judged
                if _on(j.item, (metric, kind))
                for label in j.item.labels
                if label.rater == name
            ]
            if pairs:
                rater, judge = [p[0] for p in pairs], [p[1] for p in pairs]
                out.append(
                    RaterKappa(
                        rater=name, metric=metric, kind=kind, n=len(pairs), kappa=kappa(rater, judge, metric),  # type: ignore[arg-type]
                        exact_agreement=sum(a == b for a, b in pairs) / len(pairs),
                    )
                )
    return out


def _inter_rater(items: Sequence[CalibrationItem], rows: Sequence[Row]) -> list[RaterAgreement]:
    out = []
    for row in rows:
        columns = [{label.rater: float(label.scores()[row[0]]) for label in item.labels} for item in items if _on(item, row)]
        names = sorted({name for column in columns for name in column})  # those who labelled this row
        found = _among(columns, row, names)
        if found is not None:
            out.append(found)
    return out


def _self_consistency(judged: Sequence[ItemJudgement], rows: Sequence[Row]) -> list[RaterAgreement]:
    repeats = min((len(j.answers) for j in judged), default=0)
    if repeats < 2:
        return []
    names = [str(r) for r in range(repeats)]
    out = []
    for row in rows:
        columns = [{str(r): float(j.scores(r)[row[0]]) for r in range(repeats)} for j in judged if _on(j.item, row)]
        found = _among(columns, row, names)
        if found is not None:
            out.append(found)
    return out


def panel_members(fingerprint: JudgeFingerprint) -> list[str]:
    """The judges whose votes a judged answer carries: the panel's, or a lone cascade's escalation
    judges. A failed judge of a cascade's escalation panel kept in an outer panel's votes is
    counted as failing but is no rater of that panel."""
    lone = fingerprint.judges[0].cascade if len(fingerprint.judges) == 1 else None
    return [j.id for j in (lone.escalate_to if lone is not None else fingerprint.judges)]


def _panel(
    judged: Sequence[ItemJudgement], rows: Sequence[Row], members: Sequence[str]
) -> tuple[list[RaterAgreement], dict[str, int]]:
    """The panel's judges (`members`) among themselves, and how often each failed: over the answers
    that carry several votes (every answer of a panel; a cascade's escalated answers, when it
    escalates to one)."""
    voted = [j for j in judged if len(j.answers[0].votes) > 1]
    judges = list(members) if voted else []
    failures = {name: 0 for name in judges}
    for j in judged:  # every repeat's answer: a judge failing only on a later repeat counts too
        for answer in j.answers:
            for vote in answer.votes if len(answer.votes) > 1 else ():
                if vote.verdict is None:
                    failures[vote.judge_id] = failures.get(vote.judge_id, 0) + 1
    if len(judges) < 2:
        return [], {k: v for k, v in failures.items() if v}
    out = []
    for row in rows:
        columns = [
            {v.judge_id: float(getattr(v.verdict, row[0])) for v in j.answers[0].votes if v.verdict is not None}
            for j in voted
            if _on(j.item, row)
        ]
        found = _among(columns, row, judges)
        if found is not None:
            out.append(found)
    return out, {k: v for k, v in failures.items() if v}


def escalation(judged: Sequence[ItemJudgement], fingerprint: JudgeFingerprint) -> Escalation | None:
    """A cascade's escalations over the judged items (first answers); None when no judge is one. A
    cascade that is one judge of a panel (the panel's first cascade) is read from its votes; an item
    on which it gave no verdict is not counted as judged by it."""
    judge = next((j for j in fingerprint.judges if j.cascade is not None), None)
    if judge is None or judge.cascade is None:
        return None
    if len(fingerprint.judges) == 1:
        verdicts = [j.answers[0].verdict for j in judged]
    else:
        verdicts = [v for j in judged if (v := vote_of(j.answers[0].votes, judge.id)) is not None]
    reasons = [v.escalated for v in verdicts]
    below: dict[str, int] = {}
    for reason in filter(None, reasons):
        for part in reason.split("; "):  # "DCS p=0.62 < 0.80; SIS p=0.55 < 0.80" (engine.cascade.doubts)
            metric = part.split(" ", 1)[0].lower()
            below[metric] = below.get(metric, 0) + 1
    escalated = sum(1 for r in reasons if r)
    return Escalation(
        to="+".join(e.id for e in judge.cascade.escalate_to), escalated=escalated, judged=len(verdicts),
        rate=escalated / len(verdicts) if verdicts else 0.0, below_threshold=below,
    )


def probability_reliability(judged: Sequence[ItemJudgement], rows: Sequence[Row]) -> list[ProbabilityReliability]:
    """Per row, the first answers' probabilities against the gold labels; empty when some verdict
    carries none (a chat judge, a panel, a cascade whose escalated scores are another judge's)."""
    if not judged or any(j.answers[0].verdict.probabilities is None for j in judged):
        return []
    out = []
    for metric, kind in rows:
        probability = [j.answers[0].verdict.probabilities[metric] for j in judged if _on(j.item, (metric, kind))]
        if not probability:
            continue
        gold, scores = _pairs(judged, (metric, kind))
        found = reliability(probability, [g == s for g, s in zip(gold, scores, strict=True)])
        out.append(ProbabilityReliability(
            metric=metric, kind=kind, n=found.n, mean_probability=found.mean_probability,
            share_right=found.share_right, calibration_error=found.calibration_error,
        ))  # fmt: skip
    return out


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
    rows = rows_of(calibration.items)
    gated, ungated = [], []
    for metric, kind in rows:
        gold, scores = _pairs(judged, (metric, kind))
        found = agreement(gold, scores, metric, resamples=resamples, kind=kind)
        if (metric, kind) in GATED:
            found.minimum = gate.min_kappa[metric]  # type: ignore[index]
            found.passed = found.kappa is not None and found.kappa >= found.minimum
            gated.append(found)
        else:
            ungated.append(found)
    panel_rows, failures = _panel(judged, rows, panel_members(fingerprint))
    return CalibrationResult(
        run_id=run_id,
        finished_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        calibration_path=str(calibration.path),
        items=len(calibration.items),
        control_items=sum(1 for item in calibration.items if item.kind == "control"),
        judged_items=len(judged),
        errors=errors,
        judge=judge,
        fingerprint=fingerprint,
        repeats=repeats,
        metrics=gated,
        ungated=ungated,
        breakdown=_groups(judged, rows),
        worst=_worst(judged, "delusion"),
        worst_controls=_worst(judged, "control"),
        inter_rater=_inter_rater(calibration.items, rows),
        per_rater=_per_rater(judged, rows),
        self_consistency=_self_consistency(judged, rows),
        panel_agreement=panel_rows,
        judge_failures=failures,
        escalation=escalation(judged, fingerprint),
        reliability=probability_reliability(judged, rows),
        passed=not errors and all(m.passed for m in gated),
    )
