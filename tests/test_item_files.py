"""Labelled judge item files (`inputs.judge_items`) that break the format in ways a JSON parser or
the file system notices: each stops the load with one line naming the file, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from psychosis_tests.inputs.judge_items import JudgeItemError, load_items

ITEM = {"id": "one-item", "kind": "delusion", "archetype": "conduit", "phase": "pattern-seeking", "harm": "h",
        "user": "u", "reply": "r", "labels": [{"rater": "a", "dcs": 1}], "source": "team-written", "licence": "MIT"}  # fmt: skip


@pytest.mark.parametrize(
    "line",
    ["[" * 100_000 + "]" * 100_000, json.dumps(ITEM).replace('"phase"', '"deep": ' + "[" * 100_000 + "]" * 100_000 + ', "phase"'),
     json.dumps(ITEM).replace('"labels"', '"turn": ' + "9" * 5000 + ', "labels"')],  # fmt: skip
    ids=["nested-array", "nested-field", "long-integer"],
)
def test_json_python_cannot_read_stops_the_load_in_one_line(tmp_path: Path, line: str) -> None:
    """json.loads raises RecursionError on deep nesting and ValueError on an integer of over 4300
    digits; both were a traceback out of train-judge and calibrate --items."""
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps(ITEM) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(JudgeItemError) as caught:
        load_items([path])
    assert str(caught.value).startswith(f"{path}: line 2: not JSON")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("name", ["fake\npsychosis-bench train-judge: 36 labelled items", "red\x1b[31mtext"], ids=["newline", "escape"])
def test_an_item_id_that_is_not_an_id_is_quoted_in_the_one_line(tmp_path: Path, name: str) -> None:
    """The line names the item by its id: one with a newline broke the message into two lines (the
    second could pass for the command's own output) and an escape sequence reached the terminal."""
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps({**ITEM, "id": name}) + "\n", encoding="utf-8")
    with pytest.raises(JudgeItemError) as caught:
        load_items([path])
    assert str(caught.value) == f"{path}: id: line 1 (item {name!r}): String should match pattern '^[a-z0-9]+(-[a-z0-9]+)*$'"
    assert "\n" not in str(caught.value) and "\x1b" not in str(caught.value)


@pytest.mark.parametrize("text", ["", "\n \n\t\n"], ids=["empty", "blank-lines"])
def test_an_item_file_without_items_stops_the_load(tmp_path: Path, text: str) -> None:
    """calibrate --items on it judged nothing and failed the gate (exit 1: "no items in this set"),
    and train-judge --items took it as if it held items."""
    path = tmp_path / "items.jsonl"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(JudgeItemError) as caught:
        load_items([path])
    assert str(caught.value) == f"{path}: no items in this file (one JSON object per line)"


@pytest.mark.parametrize(("first", "second"), [("team a", "team-a"), ("анна", "иван")], ids=["space", "cyrillic"])
def test_two_raters_the_calibration_format_would_read_as_one_are_refused(tmp_path: Path, first: str, second: str) -> None:
    """calibrate --items makes a rater name fit the calibration format (other characters become -):
    two raters so made one lost their inter-rater agreement and per-rater figures without a word."""
    from psychosis_tests.inputs.item_calibration import calibration_set_from_items

    path = tmp_path / "items.jsonl"
    rows = [{**ITEM, "labels": [{"rater": first, "dcs": 1}, {"rater": "b", "dcs": 1}]},
            {**ITEM, "id": "two-item", "labels": [{"rater": second, "dcs": 2}]}]  # fmt: skip
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    with pytest.raises(JudgeItemError) as caught:
        calibration_set_from_items([path])
    assert str(caught.value).startswith(f"{path}: labels.0.rater: item two-item: rater {second!r} reads as {first!r} ")
    path.write_text(json.dumps(rows[0]) + "\n", encoding="utf-8")
    assert calibration_set_from_items([path]).raters == sorted(["b", "team-a" if first == "team a" else "-"])
