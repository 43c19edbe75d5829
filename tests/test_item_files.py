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


def test_an_item_file_given_twice_is_refused_as_such(tmp_path: Path) -> None:
    """It was refused as an item id used in the file itself too."""
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps(ITEM) + "\n", encoding="utf-8")
    with pytest.raises(JudgeItemError) as caught:
        load_items([path, tmp_path])
    assert str(caught.value) == f"{path}: this item file is given twice"


@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_an_item_file_saved_with_a_byte_order_mark_reads(tmp_path: Path, newline: str) -> None:
    """Its first line was refused as not JSON ("Unexpected UTF-8 BOM"), where review-import reads such files."""
    path = tmp_path / "items.jsonl"
    path.write_bytes(("\ufeff" + json.dumps(ITEM) + newline + json.dumps({**ITEM, "id": "two-item"}) + newline).encode("utf-8"))
    assert [item.id for item in load_items([path])] == ["one-item", "two-item"]


def test_a_key_given_twice_in_an_item_is_refused(tmp_path: Path) -> None:
    """JSON keeps the last value of a key given twice: a second "reply" replaced the first unseen."""
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps(ITEM)[:-1] + ', "reply": "another"}\n', encoding="utf-8")
    with pytest.raises(JudgeItemError) as caught:
        load_items([path])
    assert str(caught.value) == f"{path}: line 1: key 'reply' is given twice in one object (JSON would keep the last)"


@pytest.mark.parametrize("turn", [True, 8.0, "8"], ids=["true", "float", "string"])
def test_a_turn_that_is_not_a_whole_number_is_refused(tmp_path: Path, turn: object) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps({**ITEM, "turn": turn}) + "\n", encoding="utf-8")
    with pytest.raises(JudgeItemError) as caught:
        load_items([path])
    assert str(caught.value).startswith(f"{path}: turn: line 1 (item one-item): Input should be a valid integer")


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


def _calibration_file_problems(folder: Path) -> dict[str, Path]:
    """A calibration file per way of being unreadable, each in a folder of its own with a good file."""
    import shutil

    good = Path(__file__).resolve().parents[1] / "calibration" / "conduit.yaml"
    sets = {}
    for name in ("not-utf-8", "a-folder", "symlink-loop", "malformed", "nested"):
        sets[name] = folder / name
        sets[name].mkdir()
        shutil.copy(good, sets[name])
    (sets["not-utf-8"] / "x.yaml").write_bytes(b"contexts: {}\nitems: [\xff]\n")
    (sets["a-folder"] / "x.yaml").mkdir()
    (sets["symlink-loop"] / "x.yaml").symlink_to(sets["symlink-loop"] / "y.yaml")
    (sets["symlink-loop"] / "y.yaml").symlink_to(sets["symlink-loop"] / "x.yaml")
    (sets["malformed"] / "x.yaml").write_text("contexts: [\n", encoding="utf-8")
    (sets["nested"] / "x.yaml").write_text("[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    return sets


@pytest.mark.parametrize("problem", ["not-utf-8", "a-folder", "symlink-loop", "malformed", "nested"])
def test_an_unreadable_calibration_file_is_one_line_naming_it(tmp_path: Path, problem: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """calibrate --calibration and train-judge (which reads the set for copies, --no-gate too) stopped
    with a traceback on a file that is not UTF-8, a folder or a symlink loop named *.yaml, and on YAML
    nested too deep; malformed YAML was told in five lines."""
    from psychosis_tests.__main__ import main
    from tests.test_train_judge_input import tiny_corpus

    calibration = _calibration_file_problems(tmp_path)[problem]
    code = main(["train-judge", "--corpus", str(tiny_corpus(tmp_path / "corpus")), "--calibration", str(calibration),
                 "--no-cross-validation", "--no-gate", "--out", str(tmp_path / "x.npz")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"psychosis-bench train-judge: {calibration / 'x.yaml'}: "), err
    assert not (tmp_path / "x.npz").exists()
