"""Would training on these labelled items make the trained judge better? Measured without calibration/.

    python benchmarks/candidate_items.py --add PATH [--add PATH ...]   # .jsonl files or folders of them

Trains the judge as `train-judge` does (same cross-validation, same fitting) twice: on the shipped
corpus alone and on the corpus with the added items, and prints, for both and their difference:
- leave one archetype out, scored on the corpus's own items only (the added items are trained on
  and never scored, so both columns read the same replies);
- each folder of `judge_holdout/` (real models' replies the judge never trains on), scored by the
  judge trained on everything, its delusion and control turns apart; files that are added are left
  out of the holdout they sit in.
This is the measurement a team's rule for adding a round of labels reads (docs/judge-validity.md:
fix the rule first, then run this once). calibration/ is never read, and an added item that copies
a calibration reply stops the run as it stops `train-judge`. Takes about ten minutes on one core.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.trained_judge import fitted  # noqa: E402
from psychosis_tests.analysis.agreement import kappa  # noqa: E402
from psychosis_tests.analysis.judge_training import Fold, cross_validate  # noqa: E402
from psychosis_tests.cli.train_judge import refuse_calibration_copies  # noqa: E402
from psychosis_tests.common.errors import ConfigError  # noqa: E402
from psychosis_tests.inputs.judge_items import JudgeItem, load_items, load_items_with_files  # noqa: E402

ROWS = (("delusion", "dcs"), ("delusion", "hes"), ("delusion", "sis"), ("control", "occ"), ("control", "sis"))


def progress(line: str) -> None:
    print(f"  {line}", file=sys.stderr, flush=True)


def loao_kappas(items: list[JudgeItem], scored_ids: set[str]) -> dict[tuple[str, str], float | None]:
    """Leave-one-archetype-out kappa per row, over the items in `scored_ids` only."""
    folds: dict[tuple[str, str], Fold] = {(f.kind, f.metric): f for f in cross_validate(items, progress)}
    kappas: dict[tuple[str, str], float | None] = {}
    for kind, metric in ROWS:
        fold = folds.get((kind, metric))
        pairs = [(g, p) for g, p, i in zip(fold.gold, fold.predicted, fold.item_ids, strict=True) if i in scored_ids] if fold else []
        kappas[(kind, metric)] = kappa([g for g, _ in pairs], [p for _, p in pairs], metric) if len(pairs) > 1 else None
    return kappas


def holdout_kappas(items: list[JudgeItem], holdouts: dict[str, list[JudgeItem]], scratch: Path) -> dict[tuple[str, str, str], float | None]:
    """Kappa per (holdout folder, kind, metric) of a judge trained on `items`, loaded from a model file as a run loads it."""
    model = fitted(items, scratch)
    kappas: dict[tuple[str, str, str], float | None] = {}
    for name, held in holdouts.items():
        scored = [(item, model.score(item.reply, item.user, item.phase, item.kind, item.metrics)) for item in held]
        for kind, metric in ROWS:
            pairs = [(item.gold()[metric], verdict[metric].level)
                     for item, verdict in scored if item.kind == kind and metric in verdict]  # fmt: skip
            kappas[(name, kind, metric)] = kappa([g for g, _ in pairs], [j for _, j in pairs], metric) if len(pairs) > 1 else None
    return kappas


def row(label: str, before: float | None, after: float | None) -> str:
    cell = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    gap = "n/a" if before is None or after is None else f"{after - before:+.3f}"
    return f"  {label:<40} {cell(before):>8} {cell(after):>8} {gap:>8}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--add", action="append", type=Path, required=True, metavar="PATH",
                        help="labelled items to add to the corpus (.jsonl or a folder); repeatable")  # fmt: skip
    args = parser.parse_args()
    try:
        corpus = load_items([ROOT / "judge_corpus"])
        added_with_files = load_items_with_files(path.resolve() for path in args.add)
        added_files = {file for file, _ in added_with_files}
        added = [item for _, item in added_with_files]
        shared = {i.id for i in corpus} & {i.id for i in added}
        if shared:
            raise ConfigError(f"added item {sorted(shared)[0]!r} is already in judge_corpus/")
        refuse_calibration_copies(added, ROOT / "calibration", ROOT, origins=[file for file, _ in added_with_files])
    except ConfigError as error:
        print(f"candidate_items.py: {error}", file=sys.stderr)
        return 2
    holdouts = {}
    for folder in sorted(p for p in (ROOT / "judge_holdout").iterdir() if p.is_dir()):
        kept = [item for file, item in load_items_with_files([folder]) if file not in added_files]
        if kept:
            holdouts[f"judge_holdout/{folder.name}"] = kept
    print(f"judge_corpus/: {len(corpus)} items; added: {len(added)} items from {len(added_files)} file(s)", flush=True)
    corpus_ids = {item.id for item in corpus}
    with tempfile.TemporaryDirectory(prefix="candidate-items-") as scratch:
        measured = {}
        for label, items in (("without", corpus), ("with", corpus + added)):
            print(f"training {label} the added items ({len(items)} items)", file=sys.stderr, flush=True)
            measured[label] = (loao_kappas(items, corpus_ids), holdout_kappas(items, holdouts, Path(scratch)))
    print(f"  {'kappa (weighted for DCS and HES)':<40} {'without':>8} {'with':>8} {'change':>8}")
    print(f"leave one archetype out, the corpus's {len(corpus)} items:")
    for kind, metric in ROWS:
        print(row(f"{kind} {metric.upper()}", measured["without"][0][(kind, metric)], measured["with"][0][(kind, metric)]))
    for name, held in holdouts.items():
        print(f"{name} ({len(held)} items):")
        for kind, metric in ROWS:
            if any(item.kind == kind and metric in item.metrics for item in held):
                key = (name, kind, metric)
                print(row(f"{kind} {metric.upper()}", measured["without"][1][key], measured["with"][1][key]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
