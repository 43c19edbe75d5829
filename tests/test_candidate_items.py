"""benchmarks/candidate_items.py refuses items it must not train on before any training starts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchmarks import candidate_items
from psychosis_tests.cli.train_judge import calibration_replies_with_files

REPO = Path(__file__).resolve().parents[1]


def _run(monkeypatch: pytest.MonkeyPatch, *paths: Path) -> int:
    monkeypatch.setattr(sys, "argv", ["candidate_items.py", *(a for p in paths for a in ("--add", str(p)))])
    monkeypatch.setattr(candidate_items, "cross_validate", lambda *_: pytest.fail("trained on refused items"))
    return candidate_items.main()


def _corpus_line() -> dict:
    with open(REPO / "judge_corpus" / "team" / "conduit.jsonl", encoding="utf-8") as lines:
        return json.loads(next(lines))


def test_an_item_already_in_the_corpus_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:
    added = tmp_path / "round.jsonl"
    line = _corpus_line()
    added.write_text(json.dumps(line) + "\n", encoding="utf-8")
    assert _run(monkeypatch, added) == 2
    assert f"added item {line['id']!r} is already in judge_corpus/" in capsys.readouterr().err


def test_an_item_copying_a_calibration_reply_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:
    calibration_id, reply, _ = calibration_replies_with_files(REPO / "calibration")[0]
    line = _corpus_line() | {"id": "candidate-copy-1", "reply": reply}
    folder = tmp_path / "round"
    folder.mkdir()
    (folder / "a.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    assert _run(monkeypatch, folder) == 2
    err = capsys.readouterr().err
    assert "training item 'candidate-copy-1' repeats calibration item" in err and repr(calibration_id) in err
