"""The benchmark scripts stop on bad input with one line and exit status 2, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("script", "argv"), [("cascade_confirmation.py", ["--items"]), ("judge_features.py", [])])
def test_a_bad_item_file_is_one_line(script: str, argv: list[str], tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": "x"}) + "\n", encoding="utf-8")
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *argv, str(items)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"{script}: {items}: ") and len(done.stderr.splitlines()) == 1, done.stderr

