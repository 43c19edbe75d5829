"""Labelled judge items that need no scenario file: the format of the training corpus
(`judge_corpus/`) and of any team's own labelled transcripts.

One item is one scored assistant reply with everything a judge is shown: the conversation before
it (possibly shortened to its last exchanges), the user message it answers, the harm at stake, the
kind of conversation (delusion or control) and the phase, plus each rater's labels and where the
text came from. Files are JSON Lines (`*.jsonl`), one item per line; every line is checked against
`JudgeItem` and a problem stops the load with one line naming the file, the line, the item and the
field. The metrics a rater must give follow from the kind and the phase, as in a benchmark run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, StrictInt, field_validator, model_validator

from psychosis_tests.common.errors import ConfigError
from psychosis_tests.common.json_keys import RepeatedKey, loads_unique
from psychosis_tests.common.json_lines import json_lines
from psychosis_tests.inputs.calibration import consensus
from psychosis_tests.inputs.method import (
    CONTROL_METRIC_FIRST_PHASE,
    JUDGED_METRICS,
    METRIC_FIRST_PHASE,
    METRIC_RANGE,
    PHASE_NAMES,
    ScenarioKind,
    gated_metrics,
    with_metric_fields,
)
from psychosis_tests.inputs.yaml_files import validated

ITEM_ID = r"^[a-z0-9]+(-[a-z0-9]+)*$"
ScoredPhase = Literal["pattern-seeking", "solidification", "behavioural-enactment"]


class JudgeItemError(ConfigError):
    """A labelled item file that breaks the format."""


def item_metrics(kind: ScenarioKind, phase: str) -> tuple[str, ...]:
    """The metrics a judge is asked on a reply in this phase of a conversation of this kind."""
    index = PHASE_NAMES.index(phase) + 1
    first = CONTROL_METRIC_FIRST_PHASE if kind == "control" else METRIC_FIRST_PHASE
    return tuple(m for m, start in first.items() if index >= start)


class Exchange(BaseModel):
    """One earlier turn of the conversation."""

    model_config = {"extra": "forbid"}

    user: str = Field(min_length=1)
    assistant: str = Field(min_length=1)


class _Rater(BaseModel):
    model_config = {"extra": "forbid"}

    rater: str = Field(min_length=1)


class RaterLabels(with_metric_fields(_Rater, levels=False)):  # type: ignore[misc]
    """One rater's scores for the item's reply, one field per metric of `inputs.method.METRIC_SPECS`."""

    @field_validator(*JUDGED_METRICS, mode="before")
    @classmethod
    def _in_range(cls, value: object, info) -> object:
        """A level as a JSON whole number: true, "1" or 1.0 is refused, not read as 1."""
        allowed = METRIC_RANGE[info.field_name]
        levels = ", ".join(map(str, allowed))
        if value is not None and type(value) is not int:
            raise ValueError(f"{json.dumps(value)} is not a whole number; {info.field_name} is one of {levels}")
        if value is not None and value not in allowed:
            raise ValueError(f"{value} is out of range; {info.field_name} is one of {levels}")
        return value

    def given(self) -> dict[str, int]:
        return {m: v for m in METRIC_RANGE if (v := getattr(self, m)) is not None}


class JudgeItem(BaseModel):
    """One labelled reply (see the module docstring; judge_corpus/README.md documents each field)."""

    model_config = {"extra": "forbid"}

    id: str = Field(pattern=ITEM_ID)
    kind: ScenarioKind
    archetype: str = Field(pattern=ITEM_ID)
    """The scenario archetype (e.g. conduit), or a name for the conversation's theme elsewhere."""
    variant: Literal["explicit", "implicit"] | None = None
    phase: ScoredPhase
    turn: StrictInt | None = Field(default=None, ge=1, le=200)
    """A JSON whole number (true or 8.0 is refused, as a label's level is)."""
    harm: str = Field(min_length=1)
    """The harm at stake as the judge is told it (for a control: what the ordinary request is)."""
    before: list[Exchange] = Field(default_factory=list)
    """Earlier exchanges, oldest first; may be the last few only."""
    user: str = Field(min_length=1)
    """The user message the reply answers."""
    reply: str = Field(min_length=1)
    labels: list[RaterLabels] = Field(min_length=1)
    source: str = Field(min_length=1)
    """Who wrote or produced the reply (e.g. team-written, a model id, a public data set)."""
    licence: str = Field(min_length=1)
    style: str = ""
    """The register the reply was written or chosen to show (markdown, terse, role-play ...)."""
    tags: list[str] = Field(default_factory=list)

    @field_validator("harm", "user", "reply")
    @classmethod
    def _not_blank(cls, text: str) -> str:
        """A blank reply is no reply to label (a run errors an empty one), nor a blank message or harm."""
        if not text.strip():
            raise ValueError("is only whitespace")
        return text

    @model_validator(mode="after")
    def _labels_fit_the_turn(self) -> JudgeItem:
        asked = item_metrics(self.kind, self.phase)
        allowed = [set(asked)]
        if self.kind == "control":  # as in calibration/: what the gate does not read there may go unlabelled
            allowed.append(set(asked) & set(gated_metrics("control")))
        seen: set[str] = set()
        for label in self.labels:
            if label.rater in seen:
                raise ValueError(f"rater {label.rater!r} labels the item twice")
            seen.add(label.rater)
            given = set(label.given())
            if given not in allowed:
                needs = " or exactly ".join(", ".join(sorted(a)) for a in allowed)
                raise ValueError(f"rater {label.rater!r} gives {', '.join(sorted(given)) or 'nothing'}; a {self.kind} reply in "
                                 f"{self.phase} needs exactly {needs}")  # fmt: skip
        if len({frozenset(label.given()) for label in self.labels}) > 1:
            raise ValueError("every rater must label the same metrics")
        return self

    @property
    def metrics(self) -> tuple[str, ...]:
        """The metrics the item is labelled on: those asked at its phase (`item_metrics`), less the ones
        the gate does not read on a control (DCS, HES) where its raters left them out."""
        given = self.labels[0].given()
        return tuple(m for m in item_metrics(self.kind, self.phase) if m in given)

    def gold(self, raters: Sequence[str] | None = None) -> dict[str, int]:
        """The consensus label per metric (median, SIS majority; ties the less safe reading), over
        `raters` when given (None: all)."""
        chosen = [label for label in self.labels if raters is None or label.rater in raters]
        if not chosen:
            raise ValueError(f"item {self.id}: none of the raters {', '.join(raters or [])}")
        return {m: consensus((label.given()[m] for label in chosen), m) for m in self.metrics}

    def conversation(self) -> list[dict[str, str]]:
        """The messages a judge is shown, the scored reply last."""
        messages: list[dict[str, str]] = []
        for exchange in self.before:
            messages += [{"role": "user", "content": exchange.user}, {"role": "assistant", "content": exchange.assistant}]
        return messages + [{"role": "user", "content": self.user}, {"role": "assistant", "content": self.reply}]


def load_item_file(path: Path) -> list[JudgeItem]:
    """Every item of one JSON Lines file; JudgeItemError names the file, line, item and field."""
    try:
        lines = json_lines(path.read_text(encoding="utf-8-sig"))  # a byte-order mark (a Windows editor's) is no JSON
    except FileNotFoundError:
        raise JudgeItemError("no such file", file=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise JudgeItemError(f"cannot read it ({type(exc).__name__})", file=path) from None
    if not lines:  # calibrate --items would judge nothing and report it as a failed gate
        raise JudgeItemError("no items in this file (one JSON object per line)", file=path)
    items = []
    for number, line in lines:
        try:
            raw = loads_unique(line)
        except RepeatedKey as exc:
            raise JudgeItemError(f"line {number}: key {str(exc)!r} is given twice in one object (JSON would keep the last)",
                                 file=path) from None  # fmt: skip
        except json.JSONDecodeError as exc:
            raise JudgeItemError(f"line {number}: not JSON ({exc.msg})", file=path) from None
        except (ValueError, RecursionError) as exc:  # nested too deep, or an integer too long to read
            raise JudgeItemError(f"line {number}: not JSON this suite reads ({type(exc).__name__})", file=path) from None
        name = raw.get("id") if isinstance(raw, dict) else None
        shown = name if isinstance(name, str) and re.fullmatch(ITEM_ID, name) else repr(name)  # a newline or escape stays inert
        where = f"line {number}{f' (item {shown})' if name else ''}"
        items.append(validated(JudgeItem, raw, JudgeItemError, file=path, message=lambda _, problem: f"{where}: {problem}"))
    return items


def load_items(paths: Iterable[Path]) -> list[JudgeItem]:
    """Items of every file (a folder: its *.jsonl files, sorted); an id used twice is refused."""
    return [item for _, item in load_items_with_files(paths)]


def load_items_with_files(paths: Iterable[Path]) -> list[tuple[Path, JudgeItem]]:
    """Each item with the file it came from, in file then line order."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(path.rglob("*.jsonl"))
            if not found:
                raise JudgeItemError("no *.jsonl item files in this folder", file=path)
            files += found
        else:
            files.append(path)
    items: list[tuple[Path, JudgeItem]] = []
    where: dict[str, Path] = {}
    named: dict[Path, Path] = {}
    for file in files:
        first = named.setdefault(file.resolve(), file)
        if first is not file:  # else every item of it would be "used in the same file too"
            also = f" (also as {first})" if str(first) != str(file) else ""
            raise JudgeItemError(f"this item file is given twice{also}", file=file)
        for item in load_item_file(file):
            if item.id in where:
                raise JudgeItemError(f"item id {item.id!r} is used in {where[item.id]} too", file=file, field="id")
            where[item.id] = file
            items.append((file, item))
    return items
