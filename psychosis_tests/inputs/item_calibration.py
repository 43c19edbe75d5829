"""Labelled judge items (`inputs.judge_items`) as a calibration set, so `calibrate --items FILE`
measures any judge on a team's own labelled transcripts exactly as on `calibration/`.

An item carries its own harm and conversation, so it needs no scenario file: `ItemScenario` stands
in for the scenario with what the calibration run reads of one (its id, archetype, variant, kind and
the harm the judge is told). The judge is asked what a benchmark run asks in the item's phase; an
item whose turn does not fall in that phase of the standard twelve turns (a longer conversation,
or none given) is filed under the phase's middle turn, which only its report line shows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from psychosis_tests.inputs.calibration import TURNS_PER_PHASE, CalibrationItem, CalibrationSet, Label
from psychosis_tests.inputs.judge_items import JudgeItemError, load_items_with_files
from psychosis_tests.inputs.method import PHASE_NAMES, ScenarioKind

MIDDLE_TURN = {name: index * TURNS_PER_PHASE + 2 for index, name in enumerate(PHASE_NAMES)}
"""pattern-seeking 5, solidification 8, behavioural-enactment 11."""
_RATER = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class ItemScenario:
    """What a calibration run reads of a scenario, taken from the item itself."""

    id: str
    archetype: str
    variant: str
    kind: ScenarioKind
    judge_harm: str


def calibration_set_from_items(paths: Iterable[Path]) -> CalibrationSet:
    """Every item of the files (or folders of *.jsonl files), in file then line order."""
    paths = list(paths)
    items = []
    names: dict[str, str] = {}  # the calibration format's rater name -> the item file's
    for file, item in load_items_with_files(paths):
        standard = item.turn is not None and 4 <= item.turn <= 12
        in_phase = standard and PHASE_NAMES[(item.turn - 1) // TURNS_PER_PHASE] == item.phase  # type: ignore[operator]
        scenario = ItemScenario(
            id=f"{item.archetype}-{item.kind}" + (f"-{item.variant}" if item.variant else ""),
            archetype=item.archetype,
            variant=item.variant or "n/a",
            kind=item.kind,
            judge_harm=item.harm,
        )
        for index, label in enumerate(item.labels):
            name = names.setdefault(_RATER.sub("-", label.rater), label.rater)
            if name != label.rater:  # two raters read as one would merge their labels in the agreement figures
                raise JudgeItemError(f"item {item.id}: rater {label.rater!r} reads as {name!r} once every character but "
                                     "A-Z, a-z, 0-9, _, . and - is made a -; rename one of them",
                                     file=file, field=f"labels.{index}.rater")  # fmt: skip
        labels = tuple(Label(rater=_RATER.sub("-", label.rater), **label.given()) for label in item.labels)
        items.append(
            CalibrationItem(
                id=item.id,
                scenario=scenario,  # type: ignore[arg-type]
                turn=item.turn if in_phase else MIDDLE_TURN[item.phase],  # type: ignore[arg-type]
                conversation=tuple(item.conversation()),
                labels=labels,
                reason=" ".join(item.tags) or item.source,
                tags=(),
                file=file,
            )
        )
    return CalibrationSet(path=paths[0] if len(paths) == 1 else Path("."), items=tuple(items))
