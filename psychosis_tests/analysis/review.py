"""Human review: a stratified sample of a run's judged turns out to people, their labels back in.

Export reads a benchmark run's case files, draws up to N judged turns per stratum (variant x
phase x the judge's DCS, with a seeded generator) and writes one row per turn: the conversation
up to the reply, the reply, and empty label columns. The judge's scores are left out so raters
label blind. Import reads the labelled rows back and writes one calibration file per reviewed
conversation (its twelve turns are the context; each labelled turn an item), or judge items
(`inputs.judge_items`, any conversation length). Every row is checked as it is read, against the
calibration or judge-item schema, and a problem stops the import with one line naming the review
file, the row (CSV) or line (JSONL) and the column; nothing is written until every row passes.
A calibration file an earlier import wrote is replaced only by one that keeps all its items.
A CSV cell a spreadsheet would read as a formula (a reply starting with =) is written with a quote
before it (`common.csv_cells`), which import takes off again.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import random
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from psychosis_tests.common.csv_cells import csv_cell, from_csv_cell
from psychosis_tests.common.errors import CalibrationError
from psychosis_tests.common.json_lines import json_lines
from psychosis_tests.engine.conversation import Transcript
from psychosis_tests.inputs.calibration import HARD_CASE_TAGS, TURNS, TURNS_PER_PHASE, CalibrationFile, applicable_metrics
from psychosis_tests.inputs.judge_items import JudgeItem
from psychosis_tests.inputs.method import JUDGED_METRICS, OCC, PHASE_NAMES
from psychosis_tests.inputs.scenarios import SCENARIO_ID, Scenario
from psychosis_tests.inputs.yaml_files import read_text, schema_problem

COLUMNS = (
    "review_id", "model", "scenario", "repeat", "turn", "phase", "metrics", "conversation", "reply",
    "rater", "dcs", "hes", "sis", "occ", "reason", "tags", "context_json",
)
"""Row layout; raters fill rater, dcs, hes, sis, occ (those listed in `metrics`; on a control turn
DCS and HES may stay empty), reason and tags."""

REQUIRED_COLUMNS = ("review_id", "model", "scenario", "repeat", "turn", "reply", "context_json")
"""The columns import reads besides the labels (`phase` is optional: files written before it had none)."""

CONTROL_OPTIONAL = ("dcs", "hes")
"""Asked on a control turn but not read by the `controls:` gate: a rater may leave them empty."""


def _transcripts(run_dir: Path) -> list[Transcript]:
    cases = run_dir / "cases"
    if not cases.is_dir():
        raise CalibrationError("not a benchmark run folder (no cases/ folder)", file=run_dir)
    found = []
    for path in sorted(cases.glob("*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(record, dict) or not isinstance(record.get("transcripts", []), list):
                raise ValueError("not a case record")
            if "error" in record:
                continue  # an errored case has no judged turns
            found += [Transcript.model_validate(t) for t in record.get("transcripts", [])]
        except (OSError, ValueError, RecursionError) as exc:  # ValueError: not UTF-8, not JSON, not a transcript
            raise CalibrationError(f"cannot read it as a case file of a run ({type(exc).__name__})", file=path) from None
    return found


LABELS = JUDGED_METRICS
"""The label columns a rater may fill."""


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _model_slugs(model_ids: Iterable[str]) -> dict[str, str]:
    """Each model id's slug for review ids and file names. Ids a run keeps apart can share a slug
    (qwen2.5:7b, qwen2.5-7b): those get a short hash of the id after it, so their turns do not share
    review ids nor their conversations a calibration file."""
    slugs = {m: _slug(m) for m in set(model_ids)}
    uses = Counter(slugs.values())
    return {m: f"{slug}-{hashlib.sha256(m.encode()).hexdigest()[:8]}" if uses[slug] > 1 else slug for m, slug in slugs.items()}


def export_sample(run_dir: Path, *, per_stratum: int, seed: int) -> list[dict[str, str]]:
    """Up to `per_stratum` judged turns per (variant, phase, judge's DCS), in a stable order."""
    strata: dict[tuple[str, int, int | None], list[dict[str, str]]] = {}
    transcripts = _transcripts(run_dir)
    slugs = _model_slugs(t.model_id for t in transcripts)
    for transcript in transcripts:
        context = [{"user": t.user, "assistant": t.reply} for t in transcript.turns]
        variant = transcript.scenario_id.rsplit("-", 1)[-1]
        for turn in transcript.turns:
            if turn.verdict is None:
                continue
            shown = "\n\n".join(
                f"USER: {t.user}\n\nASSISTANT: {t.reply}" for t in transcript.turns[: turn.turn - 1]
            ) + f"\n\nUSER: {turn.user}"
            row = {
                "review_id": f"{transcript.scenario_id}-t{turn.turn:02d}-{slugs[transcript.model_id]}-r{transcript.repeat}",
                "model": transcript.model_id,
                "scenario": transcript.scenario_id,
                "repeat": str(transcript.repeat),
                "turn": str(turn.turn),
                "phase": str(turn.phase),
                "metrics": ",".join(turn.metrics),  # a control turn's OCC too
                "conversation": shown.strip(),
                "reply": turn.reply,
                "rater": "", "dcs": "", "hes": "", "sis": "", "occ": "", "reason": "", "tags": "",
                "context_json": json.dumps(context, ensure_ascii=False),
            }
            strata.setdefault((variant, turn.phase, turn.verdict.dcs), []).append(row)
    if not strata:  # every case errored, say: an empty file would be labelled as if the run had been sampled
        raise CalibrationError("the run has no judged turn to export (its cases errored or were not run)", file=run_dir)
    rng = random.Random(seed)
    sample = []
    for key in sorted(strata, key=str):
        rows = strata[key]
        sample += rng.sample(rows, min(per_stratum, len(rows)))
    return sample


def write_rows(path: Path, rows: Sequence[dict[str, str]]) -> None:
    if path.suffix not in (".csv", ".jsonl"):
        raise CalibrationError("the review file must end in .csv or .jsonl", file=path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".jsonl":
            path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        else:
            with path.open("w", newline="", encoding="utf-8") as handle:
                writer = csv.DictWriter(handle, fieldnames=COLUMNS)
                writer.writeheader()
                writer.writerows({name: csv_cell(value) for name, value in row.items()} for row in rows)
    except OSError as exc:
        raise CalibrationError(f"cannot write it ({type(exc).__name__}: {exc.strerror})", file=path, field="--out") from None


def read_rows(path: Path) -> list[tuple[str, dict[str, str]]]:
    """(where, row) of every row: where is "row N" (the Nth data row of a CSV) or "line N" (JSONL).
    A CSV may start with a byte-order mark (Excel's "CSV UTF-8"). A file that cannot be read, a
    JSONL line that is not a JSON object or a missing column raises CalibrationError in one line."""
    if path.suffix not in (".csv", ".jsonl"):
        raise CalibrationError("the review file must end in .csv or .jsonl", file=path)
    text = read_text(path, CalibrationError, encoding="utf-8-sig")
    rows: list[tuple[str, dict[str, str]]] = []
    if path.suffix == ".csv":
        csv.field_size_limit(max(csv.field_size_limit(), len(text)))  # context_json of a long conversation passes 128 KiB
        reader = csv.DictReader(io.StringIO(text, newline=""))
        missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
        if missing and text.strip():
            raise CalibrationError(f"no {missing[0]!r} column; a review file has the columns review-export writes "
                                   f"({', '.join(COLUMNS)})", file=path, field="header")  # fmt: skip
        return [(f"row {number}", {name: from_csv_cell(value) if isinstance(value, str) else value for name, value in row.items()})
                for number, row in enumerate(reader, start=1)]  # fmt: skip
    for number, line in json_lines(text):
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CalibrationError(f"not JSON ({exc.msg})", file=path, field=f"line {number}") from None
        except (ValueError, RecursionError) as exc:  # nested too deep, or an integer too long to read
            raise CalibrationError(f"not JSON this suite reads ({type(exc).__name__})", file=path, field=f"line {number}") from None
        if not isinstance(raw, dict):
            raise CalibrationError("not a JSON object (one review row per line)", file=path, field=f"line {number}")
        missing = [c for c in REQUIRED_COLUMNS if c not in raw]
        if missing:
            raise CalibrationError(f"no {missing[0]!r} field", file=path, field=f"line {number}.{missing[0]}")
        rows.append((f"line {number}", raw))
    return rows


@dataclass(frozen=True)
class _Labelled:
    """One labelled row, its turn and conversation read and checked."""

    path: Path
    where: str
    row: dict[str, str]
    rater: str
    turn: int
    context: list[dict[str, str]]

    @property
    def review_id(self) -> str:
        return str(self.row["review_id"])

    def error(self, column: str, message: str) -> CalibrationError:
        """The one-line error naming the review file, the row and the column."""
        return CalibrationError(f"review {self.review_id!r}: {message}", file=self.path, field=f"{self.where}.{column}")


def _text(row: dict[str, str], column: str) -> str:
    value = row.get(column)
    return "" if value is None else str(value).strip()


def _conversation(path: Path, where: str, row: dict[str, str]) -> tuple[int, list[dict[str, str]]]:
    """The row's turn and its conversation (context_json), checked against each other."""
    review = f"review {str(row['review_id'])!r}: "
    turn_text = _text(row, "turn")
    try:
        turn = int(turn_text)
    except ValueError:
        raise CalibrationError(f"{review}turn must be a whole number, got {turn_text!r}", file=path, field=f"{where}.turn") from None
    context: object = row["context_json"]
    if isinstance(context, str):
        try:
            context = json.loads(context)
        except (ValueError, RecursionError) as exc:  # RecursionError, ValueError: nested too deep, an integer too long
            problem = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
            raise CalibrationError(f"{review}not JSON ({problem}); leave the column as review-export wrote it",
                                   file=path, field=f"{where}.context_json") from None  # fmt: skip
    if not (isinstance(context, list) and context and all(
        isinstance(t, dict) and set(t) == {"user", "assistant"} and all(isinstance(v, str) for v in t.values()) for t in context
    )):  # fmt: skip
        raise CalibrationError(f"{review}not the conversation review-export wrote (a JSON list of user/assistant turns)",
                               file=path, field=f"{where}.context_json")  # fmt: skip
    if not 1 <= turn <= len(context):
        raise CalibrationError(f"{review}turn {turn} is outside the conversation's {len(context)} turns",
                               file=path, field=f"{where}.turn")  # fmt: skip
    return turn, context


def _label(labelled: _Labelled, *, control: bool) -> dict[str, object]:
    """The rater's labels of the row: every metric listed in `metrics`, or without it those the turn
    asks on its kind of scenario (DCS and HES optional on a control turn, as in the calibration set;
    the `controls:` gate reads SIS and OCC only). A label for a metric the turn does not ask is
    refused: left out of the item, it would be a rater's work lost without a word."""
    row = labelled.row
    label: dict[str, object] = {"rater": labelled.rater}
    listed = [m.strip() for m in str(row.get("metrics") or "").split(",") if m.strip()]
    asked = listed or applicable_metrics(labelled.turn, "control" if control else "delusion")
    for metric in LABELS:
        if metric not in asked and _text(row, metric):
            raise labelled.error(metric, f"{metric} is not asked on this turn (turn {labelled.turn} asks "
                                 f"{', '.join(asked)}); leave the {metric} column empty")  # fmt: skip
    for metric in asked:
        value = _text(row, metric)
        if not value:
            if control and metric in CONTROL_OPTIONAL:
                continue
            raise labelled.error(metric, f"has no {metric} label")
        try:
            label[metric] = int(value)
        except ValueError:
            raise labelled.error(metric, f"{metric} must be a whole number, got {value!r}") from None
    return label


def _tags(labelled: _Labelled) -> list[str]:
    """The tags column, comma- or semicolon-separated; each one of the calibration set's hard-case tags."""
    tags = [t.strip() for t in str(labelled.row.get("tags") or "").replace(";", ",").split(",") if t.strip()]
    for tag in tags:
        if tag not in HARD_CASE_TAGS:
            raise labelled.error("tags", f"unknown tag {tag!r}; known tags: {', '.join(HARD_CASE_TAGS)}")
    if len(set(tags)) != len(tags):
        raise labelled.error("tags", "a tag is given twice")
    return tags


def _labelled_rows(files: Iterable[Path], default_rater: str | None, unlabelled: list[str] | None = None) -> Iterator[_Labelled]:
    """Every row a rater labelled, its turn and conversation checked; rows without labels are
    skipped (each named in `unlabelled`: "FILE row N"), a labelled row that names no rater (and no
    default) is refused, and files with no labelled row at all are refused."""
    files = list(files)
    labelled = 0
    for path in files:
        for where, row in read_rows(path):
            if not any(_text(row, m) for m in LABELS):
                if unlabelled is not None:
                    unlabelled.append(f"{path} {where}")
                continue  # not labelled (yet)
            labelled += 1
            rater = _text(row, "rater") or (default_rater or "").strip()
            if not rater:
                raise CalibrationError(f"review {str(row['review_id'])!r} names no rater; fill the rater column or pass --rater",
                                       file=path, field=f"{where}.rater")  # fmt: skip
            turn, context = _conversation(path, where, row)
            yield _Labelled(path, where, row, rater, turn, context)
    if not labelled:
        raise CalibrationError(f"no row of {', '.join(map(str, files))} is labelled: fill in the label columns "
                               f"({', '.join(LABELS)}) of the turns reviewed, then import again")  # fmt: skip


_COLUMN_OF_FIELD = {
    "id": "review_id", "turn": "turn", "phase": "phase", "reply": "reply", "reason": "reason", "tags": "tags",
    "scenario": "scenario", "contexts": "context_json", "before": "context_json", "user": "context_json",
}  # fmt: skip
"""The review column a calibration-item or judge-item field comes from."""


def _add_label(item: dict, labelled: _Labelled, label: dict[str, object], seen: dict[str, dict[str, _Labelled]]) -> None:
    """`label` appended to the item; a rater who already labelled the turn, or a row whose review id
    an earlier row gave to another reply or conversation, is refused at this row. `seen`: each
    review id's rows so far, by rater."""
    by_rater = seen.setdefault(labelled.review_id, {})
    other = next(iter(by_rater.values()), None)
    if other is not None and (other.row["reply"], other.context) != (labelled.row["reply"], labelled.context):
        differs = "reply" if other.row["reply"] != labelled.row["reply"] else "context_json"
        raise labelled.error(differs, f"the review id names another {'reply' if differs == 'reply' else 'conversation'} in "
                             f"{other.path}: {other.where} (exports of two runs of one model share review ids: "
                             "import them apart)")  # fmt: skip
    earlier = by_rater.setdefault(labelled.rater, labelled)
    if earlier is not labelled:
        raise labelled.error("rater", f"rater {labelled.rater!r} labels this turn twice (also {earlier.path}: {earlier.where})")
    item["labels"].append(label)


def _check(model: type[BaseModel], body: dict, labelled: _Labelled, label: dict[str, object], *, prefix: str = "",
           phase_column: str = "phase") -> BaseModel:  # fmt: skip
    """`body` validated as `model` once this row is in it; a problem names the row and the column."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        field, problem = schema_problem(exc, model)
        parts = field.removeprefix(prefix).split(".") if field else [""]
        if parts[0] == "labels":
            column = parts[2] if len(parts) > 2 and parts[2] in LABELS else "rater"
        else:
            column = _COLUMN_OF_FIELD.get(parts[0], "/".join(m for m in LABELS if m in label))
        raise labelled.error(phase_column if column == "phase" else column, problem) from None


def import_labels(files: Iterable[Path], out_dir: Path, *, default_rater: str | None = None,
                  packs: Iterable[str] = (), unlabelled: list[str] | None = None) -> list[Path]:  # fmt: skip
    """One calibration file per reviewed conversation; rows without labels are skipped (and named in
    `unlabelled`). Every row is checked against the calibration schema as it is read, before any
    file is written; a turn of a conversation that is not twelve turns long is refused (--items-out
    takes it). A conversation on a scenario of one of `packs` (its id starts with the pack's name)
    goes to `out_dir/<pack>/`: a calibration set is checked against one scenario set."""
    conversations: dict[tuple[str, str, str], dict] = {}
    seen: dict[str, dict[str, _Labelled]] = {}
    packs = sorted(packs, key=len, reverse=True)
    for labelled in _labelled_rows(files, default_rater, unlabelled):
        row = labelled.row
        if len(labelled.context) != TURNS:
            raise labelled.error("context_json", f"the conversation has {len(labelled.context)} turns and a calibration "
                                 f"file holds {TURNS}-turn conversations only; import it with --items-out FILE.jsonl")  # fmt: skip
        control = OCC in str(row.get("metrics") or "") or "-control-" in str(row["scenario"])
        key = (str(row["model"]), str(row["scenario"]), _text(row, "repeat"))
        if not re.fullmatch(SCENARIO_ID, key[1]):  # it names the file written: ../ would write outside --out-dir
            raise labelled.error("scenario", f"{key[1]!r} is not a scenario id; leave the column as review-export wrote it")
        if not key[2].isdigit():
            raise labelled.error("repeat", f"repeat must be a whole number, got {key[2]!r}")
        doc = conversations.setdefault(key, {"contexts": {key[1]: labelled.context}, "items": {}})
        item = doc["items"].setdefault(
            labelled.review_id,
            {
                "id": labelled.review_id, "scenario": key[1], "turn": labelled.turn, "reply": row["reply"],
                "labels": [], "reason": " ".join(str(row.get("reason") or "").split()) or "labelled in human review",
                "tags": _tags(labelled),
            },
        )
        label = _label(labelled, control=control)
        _add_label(item, labelled, label, seen)
        entry = _check(CalibrationFile, {"contexts": {key[1]: labelled.context}, "items": [item]}, labelled, label,
                       prefix="items.0.")  # fmt: skip
        try:
            entry.items[0].check_labels("control" if control else "delusion")
        except ValueError as exc:
            raise labelled.error("/".join(m for m in LABELS if m in label), str(exc)) from None
    documents = {}
    slugs = _model_slugs(model for model, _, _ in conversations)
    for (model, scenario, repeat), doc in sorted(conversations.items()):
        body = {"contexts": doc["contexts"], "items": list(doc["items"].values())}
        pack = next((name for name in packs if scenario.startswith(f"{name}-")), None)
        folder = out_dir / pack if pack is not None else out_dir
        target = folder / f"review-{slugs[model]}-{scenario}-r{repeat}.yaml"
        try:
            CalibrationFile.model_validate(body)
        except ValueError as exc:
            raise CalibrationError(f"the labelled rows do not make a valid calibration file: {exc}", file=target) from exc
        dropped = sorted(_item_ids(target) - set(doc["items"]))
        if dropped:
            raise CalibrationError(f"an earlier import wrote item {dropped[0]!r} here, which these files do not label: "
                                   "import every round's review files together, or give another --out-dir",
                                   file=target, field="--out-dir")  # fmt: skip
        documents[target] = body
    for target, body in documents.items():
        header = "# Imported from human review (python -m psychosis_tests review-import).\n"
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(header + yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=100), encoding="utf-8")
        except OSError as exc:
            raise CalibrationError(f"cannot write it ({type(exc).__name__}: {exc.strerror})", file=target, field="--out-dir") from None
    return list(documents)


def _item_ids(path: Path) -> set[str]:
    """The item ids of a calibration file an earlier import wrote at `path` (none if there is none)."""
    try:
        items = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("items") or []
        return {str(item["id"]) for item in items}
    except (OSError, ValueError, yaml.YAMLError, AttributeError, TypeError, KeyError):  # no file, or not one import writes
        return set()


def _phase(labelled: _Labelled) -> tuple[str, str]:
    """(phase name, the column it comes from): the phase column (1-4) as the run recorded it, or
    in a file written before that column, the turn's quarter of the conversation."""
    text = _text(labelled.row, "phase")
    if not text:
        return PHASE_NAMES[min(3, (labelled.turn - 1) * 4 // len(labelled.context))], "turn"
    if text not in {"1", "2", "3", "4"}:
        raise labelled.error("phase", f"phase must be 1, 2, 3 or 4, got {text!r}")
    if len(labelled.context) == TURNS and int(text) != (labelled.turn - 1) // TURNS_PER_PHASE + 1:
        raise labelled.error("turn", f"turn {labelled.turn} of a {TURNS}-turn conversation is not in phase {text} (the phase column)")
    return PHASE_NAMES[int(text) - 1], "phase"


def import_items(files: Iterable[Path], out_file: Path, scenarios: dict[str, Scenario], *,
                 default_rater: str | None = None, unlabelled: list[str] | None = None) -> int:  # fmt: skip
    """The labelled rows as judge items (`inputs.judge_items`, JSON Lines), one item per reviewed
    turn with every rater's labels; every row is checked as it is read, before anything is
    written. Any conversation length. Returns the item count."""
    items: dict[str, dict] = {}
    checked: dict[str, BaseModel] = {}  # each item as validated with its latest row, so with every label
    seen: dict[str, dict[str, _Labelled]] = {}
    for labelled in _labelled_rows(files, default_rater, unlabelled):
        row, turn, context = labelled.row, labelled.turn, labelled.context
        scenario = scenarios.get(str(row["scenario"]))
        if scenario is None:
            raise labelled.error("scenario", f"no scenario {row['scenario']!r} in the scenario set")
        phase, phase_column = _phase(labelled)
        item = items.setdefault(labelled.review_id, {
            "id": _slug(labelled.review_id), "kind": scenario.kind, "archetype": scenario.archetype,
            "variant": scenario.variant, "phase": phase, "turn": turn,
            "harm": scenario.judge_harm, "before": context[max(0, turn - 3) : turn - 1],
            "user": context[turn - 1]["user"], "reply": row["reply"], "labels": [],
            "source": f"human review of a run of {row['model']}", "licence": "the reviewing team's",
            "tags": _tags(labelled),
        })  # fmt: skip
        label = _label(labelled, control=scenario.kind == "control")
        _add_label(item, labelled, label, seen)
        checked[labelled.review_id] = _check(JudgeItem, item, labelled, label, phase_column=phase_column)
    try:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text("".join(json.dumps(i.model_dump(mode="json", exclude_defaults=True), ensure_ascii=False) + "\n"
                                    for i in checked.values()), encoding="utf-8")  # fmt: skip
    except OSError as exc:
        raise CalibrationError(f"cannot write it ({type(exc).__name__}: {exc.strerror})", file=out_file, field="--items-out") from None
    return len(checked)
