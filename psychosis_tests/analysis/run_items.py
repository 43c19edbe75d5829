"""A past benchmark run's judged turns as labelled judge items, its judge as the rater.

`train-judge --from-run DIR` distils the judge a team already pays for into the trained judge:
every scored turn of every case that has a transcript becomes an item whose one rater is that
run's judge (`judge:<id>`). The harm and archetype come from the scenario files, as the run saw
them (a pack case's from its pack); cases whose scenario is not there, and errored cases (whose transcript
file keeps no turns), are skipped and counted. Under a judge
cascade only the escalated turns are taken: the others were decided by its first judge, the trained
judge itself, and training on them would teach it its own verdicts; for the same reason a run whose
judge (or a panel member) is a trained judge is refused. Turns with a blank reply or
user message are skipped too (no such item can be labelled).
"""

from __future__ import annotations

import json
from pathlib import Path

from psychosis_tests.common.errors import ConfigError
from psychosis_tests.inputs.judge_identity import JudgeFingerprint
from psychosis_tests.inputs.judge_items import JudgeItem
from psychosis_tests.records.results_file import ResultsFile
from psychosis_tests.inputs.scenarios import Scenario

CONTEXT_EXCHANGES = 2
"""Earlier exchanges kept in an item's `before`, as in the shipped corpus."""


class RunItemsError(ConfigError):
    """A run folder that cannot be read as labelled items."""


def items_from_run(run_dir: Path, results: ResultsFile, scenarios: dict[str, Scenario]) -> tuple[list[JudgeItem], list[str]]:
    """Every judged turn of the run (`results`: its results.json, read by `load_results`) as an
    item, and notes on what was skipped."""
    if trained := _trained_raters(results.run.judge_fingerprint):
        raise RunItemsError(f"judged by the trained judge {trained[0]!r}: its verdicts are the trained judge's own, and "
                            "training on them would teach it its own verdicts; give a run of another judge (of a "
                            "cascade, only the escalated turns are taken)", file=run_dir, field="--from-run")  # fmt: skip
    rater = f"judge:{results.run.judge}"
    items: list[JudgeItem] = []
    notes: list[str] = []
    for case in results.cases:
        scenario = scenarios.get(case.scenario)
        if scenario is None:
            where = f"no such scenario in pack {case.pack!r} of this project" if case.pack else "no such scenario in the scenario set"
            notes.append(f"{case.model} / {case.scenario}: {where}; skipped")
            continue
        path = run_dir / (case.transcript or "")
        if not case.transcript or not path.is_file():
            notes.append(f"{case.model} / {case.scenario}: no transcript file ({case.outcome}); skipped")
            continue
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:  # ValueError: not UTF-8, not JSON
            raise RunItemsError(f"cannot read the transcript ({type(exc).__name__})", file=path) from None
        if isinstance(record, dict) and not record.get("transcripts"):  # an errored case keeps no turns
            notes.append(f"{case.model} / {case.scenario}: no turns in its transcript file ({case.outcome}); skipped")
            continue
        skipped: dict[str, int] = {}
        try:
            for transcript in record.get("transcripts", []):
                items += _transcript_items(transcript, scenario, case.model, results.run.run_id, rater, skipped)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:  # a field missing or of another type than a run writes
            raise RunItemsError(f"not a transcript as a run writes it ({type(exc).__name__}); the file is damaged or was "
                                "edited by hand", file=path) from None  # fmt: skip
        notes += [f"{case.model} / {case.scenario}: {n} turn(s) {why}; skipped" for why, n in skipped.items()]
    return items, notes


def _trained_raters(fingerprint: JudgeFingerprint | None) -> list[str]:
    """The trained judges among those whose verdicts would become labels: the run's judge or panel
    members, and a cascade's escalation judges (its first judge's turns are skipped one by one)."""
    if fingerprint is None:
        return []
    raters = [j for judge in fingerprint.judges for j in (judge.cascade.escalate_to if judge.cascade else [judge])]
    return [j.id for j in raters if j.model_file_sha256 is not None]


FIRST_JUDGE = "decided by the cascade's first judge (not escalated)"
BLANK = "with a blank reply or user message"


def _transcript_items(transcript: dict, scenario: Scenario, model: str, run_id: str, rater: str,
                      skipped: dict[str, int]) -> list[JudgeItem]:  # fmt: skip
    """The transcript's labelled turns as items; `skipped` counts the others, by why."""
    items = []
    turns = transcript.get("turns", [])
    for position, turn in enumerate(turns):
        verdict = turn.get("verdict")
        if not verdict or not turn.get("metrics"):
            continue
        why = (FIRST_JUDGE if verdict.get("decided_by") and not verdict.get("escalated")
               else BLANK if not (turn.get("reply") or "").strip() or not (turn.get("user") or "").strip() else None)  # fmt: skip
        if why is not None:
            skipped[why] = skipped.get(why, 0) + 1
            continue
        labels = {m: verdict[m] for m in turn["metrics"] if verdict.get(m) is not None}
        before = [{"user": t["user"], "assistant": t["reply"]} for t in turns[max(0, position - CONTEXT_EXCHANGES) : position]]
        slug = "".join(ch if ch.isascii() and ch.isalnum() else "-" for ch in f"{run_id}-{model}".lower()).strip("-")
        slug = "-".join(part for part in slug.split("-") if part)
        items.append(
            JudgeItem(
                id=f"run-{slug}-{scenario.id}-r{transcript.get('repeat', 0)}-t{turn['turn']:02d}",
                kind=scenario.kind,
                archetype=scenario.archetype,
                variant=scenario.variant,
                phase=turn["phase_name"],
                turn=turn["turn"],
                harm=scenario.judge_harm,
                before=[b for b in before if b["user"] and b["assistant"]],
                user=turn["user"],
                reply=turn["reply"],
                labels=[{"rater": rater, **labels}],
                source=f"benchmark run {run_id}, target {model}",
                licence="the run owner's",
            )
        )
    return items
