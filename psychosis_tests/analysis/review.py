"""Human review: a stratified sample of a run's judged turns out to people, their labels back in.

Export reads a benchmark run's case files, draws up to N judged turns per stratum (variant x
phase x the judge's DCS, with a seeded generator) and writes one row per turn: the conversation
up to the reply, the reply, and empty label columns. The judge's scores are left out so raters
label blind. Import reads the labelled rows back and writes one calibration file per reviewed
conversation (its twelve turns are the context; each labelled turn an item), checked by the
calibration schema before anything is written.
"""

from __future__ import annotations

import csv
import json
import random
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import yaml

from psychosis_tests.common.errors import CalibrationError
from psychosis_tests.common.json_lines import json_lines
from psychosis_tests.engine.conversation import Transcript
from psychosis_tests.inputs.calibration import CalibrationFile, applicable_metrics
from psychosis_tests.inputs.judge_items import JudgeItem
from psychosis_tests.inputs.method import JUDGED_METRICS, PHASE_NAMES
from psychosis_tests.inputs.scenarios import Scenario

COLUMNS = (
    "review_id", "model", "scenario", "repeat", "turn", "metrics", "conversation", "reply",
    "rater", "dcs", "hes", "sis", "occ", "reason", "tags", "context_json",
)
"""Row layout; raters fill rater, dcs, hes, sis, occ (those listed in `metrics`), reason and tags."""


def _transcripts(run_dir: Path) -> list[Transcript]:
    cases = run_dir / "cases"
    if not cases.is_dir():
        raise CalibrationError("not a benchmark run folder (no cases/ folder)", file=run_dir)
    found = []
    for path in sorted(cases.glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if "error" in record:
            continue  # an errored case has no judged turns
        found += [Transcript.model_validate(t) for t in record.get("transcripts", [])]
    return found


LABELS = JUDGED_METRICS
"""The label columns a rater may fill."""


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def export_sample(run_dir: Path, *, per_stratum: int, seed: int) -> list[dict[str, str]]:
    """Up to `per_stratum` judged turns per (variant, phase, judge's DCS), in a stable order."""
    strata: dict[tuple[str, int, int | None], list[dict[str, str]]] = {}
    for transcript in _transcripts(run_dir):
        context = [{"user": t.user, "assistant": t.reply} for t in transcript.turns]
        if len(context) != 12:
            continue  # only full scripted conversations fit the calibration format
        variant = transcript.scenario_id.rsplit("-", 1)[-1]
        for turn in transcript.turns:
            if turn.verdict is None:
                continue
            shown = "\n\n".join(
                f"USER: {t.user}\n\nASSISTANT: {t.reply}" for t in transcript.turns[: turn.turn - 1]
            ) + f"\n\nUSER: {turn.user}"
            row = {
                "review_id": f"{transcript.scenario_id}-t{turn.turn:02d}-{_slug(transcript.model_id)}-r{transcript.repeat}",
                "model": transcript.model_id,
                "scenario": transcript.scenario_id,
                "repeat": str(transcript.repeat),
                "turn": str(turn.turn),
                "metrics": ",".join(turn.metrics),  # a control turn's OCC too
                "conversation": shown.strip(),
                "reply": turn.reply,
                "rater": "", "dcs": "", "hes": "", "sis": "", "occ": "", "reason": "", "tags": "",
                "context_json": json.dumps(context, ensure_ascii=False),
            }
            strata.setdefault((variant, turn.phase, turn.verdict.dcs), []).append(row)
    rng = random.Random(seed)
    sample = []
    for key in sorted(strata, key=str):
        rows = strata[key]
        sample += rng.sample(rows, min(per_stratum, len(rows)))
    return sample


def write_rows(path: Path, rows: Sequence[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    elif path.suffix == ".csv":
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    else:
        raise CalibrationError("the review file must end in .csv or .jsonl", file=path)


def read_rows(path: Path) -> list[dict[str, str]]:
    if path.suffix == ".jsonl":
        return [json.loads(line) for _, line in json_lines(path.read_text(encoding="utf-8"))]
    if path.suffix == ".csv":
        with path.open(newline="", encoding="utf-8") as handle:
            return list(csv.DictReader(handle))
    raise CalibrationError("the review file must end in .csv or .jsonl", file=path)


def _label(row: dict[str, str], rater: str, path: Path, line: int) -> dict[str, object]:
    label: dict[str, object] = {"rater": rater}
    listed = [m for m in str(row.get("metrics", "")).split(",") if m.strip()]
    for metric in [m.strip() for m in listed] or applicable_metrics(int(row["turn"])):
        value = str(row.get(metric, "")).strip()
        if not value:
            raise CalibrationError(f"review {row['review_id']!r} has no {metric} label", file=path, field=f"row {line}.{metric}")
        try:
            label[metric] = int(value)
        except ValueError:
            raise CalibrationError(
                f"review {row['review_id']!r}: {metric} must be a whole number, got {value!r}", file=path, field=f"row {line}.{metric}"
            ) from None
    return label


def _tags(row: dict[str, str]) -> list[str]:
    """The tags column, comma- or semicolon-separated."""
    return [t.strip() for t in str(row.get("tags", "")).replace(";", ",").split(",") if t.strip()]


def _labelled_rows(files: Iterable[Path], default_rater: str | None) -> Iterator[tuple[Path, int, dict[str, str], str]]:
    """(file, line, row, rater) of every row a rater labelled; rows without labels are skipped, a
    labelled row that names no rater (and no default) is refused."""
    for path in files:
        for line, row in enumerate(read_rows(path), start=1):
            if not any(str(row.get(m, "")).strip() for m in LABELS):
                continue  # not labelled (yet)
            rater = str(row.get("rater") or default_rater or "").strip()
            if not rater:
                raise CalibrationError(
                    f"review {row['review_id']!r} names no rater; fill the rater column or pass --rater", file=path, field=f"row {line}.rater"
                )
            yield path, line, row, rater


def import_labels(files: Iterable[Path], out_dir: Path, *, default_rater: str | None = None) -> list[Path]:
    """One calibration file per reviewed conversation; rows without labels are skipped.
    Every file is validated against the calibration schema before any is written."""
    conversations: dict[tuple[str, str, str], dict] = {}
    for path, line, row, rater in _labelled_rows(files, default_rater):
        key = (row["model"], row["scenario"], str(row["repeat"]))
        doc = conversations.setdefault(key, {"contexts": {row["scenario"]: json.loads(row["context_json"])}, "items": {}})
        item = doc["items"].setdefault(
            row["review_id"],
            {
                "id": row["review_id"], "scenario": row["scenario"], "turn": int(row["turn"]), "reply": row["reply"],
                "labels": [], "reason": " ".join(str(row.get("reason", "")).split()) or "labelled in human review",
                "tags": _tags(row),
            },
        )
        item["labels"].append(_label(row, rater, path, line))
    documents = {}
    for (model, scenario, repeat), doc in sorted(conversations.items()):
        body = {"contexts": doc["contexts"], "items": list(doc["items"].values())}
        target = out_dir / f"review-{_slug(model)}-{scenario}-r{repeat}.yaml"
        try:
            CalibrationFile.model_validate(body)
        except ValueError as exc:
            raise CalibrationError(f"the labelled rows do not make a valid calibration file: {exc}", file=target) from exc
        documents[target] = body
    out_dir.mkdir(parents=True, exist_ok=True)
    for target, body in documents.items():
        header = "# Imported from human review (python -m psychosis_tests review-import).\n"
        target.write_text(header + yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=100), encoding="utf-8")
    return list(documents)


def import_items(files: Iterable[Path], out_file: Path, scenarios: dict[str, Scenario], *,
                 default_rater: str | None = None) -> int:  # fmt: skip
    """The labelled rows as judge items (`inputs.judge_items`, JSON Lines), one item per reviewed
    turn with every rater's labels; validated before anything is written. Returns the item count."""
    items: dict[str, dict] = {}
    for path, line, row, rater in _labelled_rows(files, default_rater):
        scenario = scenarios.get(row["scenario"])
        if scenario is None:
            raise CalibrationError(f"review {row['review_id']!r}: no scenario {row['scenario']!r} in the scenario set",
                                   file=path, field=f"row {line}.scenario")  # fmt: skip
        turn = int(row["turn"])
        context = json.loads(row["context_json"])
        item = items.setdefault(row["review_id"], {
            "id": _slug(row["review_id"]), "kind": scenario.kind, "archetype": scenario.archetype,
            "variant": scenario.variant, "phase": PHASE_NAMES[(turn - 1) // 3], "turn": turn,
            "harm": scenario.judge_harm, "before": context[max(0, turn - 3) : turn - 1],
            "user": context[turn - 1]["user"], "reply": row["reply"], "labels": [],
            "source": f"human review of a run of {row['model']}", "licence": "the reviewing team's",
            "tags": _tags(row),
        })  # fmt: skip
        item["labels"].append(_label(row, rater, path, line))
    checked = []
    for raw in items.values():
        try:
            checked.append(JudgeItem.model_validate(raw))
        except ValueError as exc:
            raise CalibrationError(f"review {raw['id']!r} does not make a valid judge item: {exc}", file=out_file) from exc
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_text("".join(json.dumps(i.model_dump(mode="json", exclude_defaults=True), ensure_ascii=False) + "\n"
                                for i in checked), encoding="utf-8")  # fmt: skip
    return len(checked)
