"""JSON Lines readers split at newlines only (psychosis_tests.common.json_lines)."""

from __future__ import annotations

import json
from pathlib import Path

from psychosis_tests.analysis.review import REQUIRED_COLUMNS, read_rows
from psychosis_tests.common.json_lines import json_lines

RAW_SEPARATORS = "one\u2028two\u2029three\x85four\x1cfive"
"""Characters str.splitlines() breaks at that a JSON string may hold raw."""


def test_a_separator_inside_a_json_string_stays_in_its_line_and_blank_lines_are_skipped() -> None:
    text = json.dumps({"reply": RAW_SEPARATORS}, ensure_ascii=False) + "\n\n" + json.dumps({"reply": "b"}) + "\n"
    assert "\u2028" in text and len(text.splitlines()) > 3
    lines = json_lines(text)
    assert [number for number, _ in lines] == [1, 3]
    assert [json.loads(line)["reply"] for _, line in lines] == [RAW_SEPARATORS, "b"]


def test_a_review_file_with_a_raw_separator_reads_as_one_row_per_line(tmp_path: Path) -> None:
    path = tmp_path / "review.jsonl"
    columns = dict.fromkeys(REQUIRED_COLUMNS, "x")
    rows = [{**columns, "review_id": "a", "reply": RAW_SEPARATORS}, {**columns, "review_id": "b", "reply": "plain"}]
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    assert read_rows(path) == [("line 1", rows[0]), ("line 2", rows[1])]
