"""The trained judge's speed and its agreement on held-out real-model sources.

    python benchmarks/trained_judge.py speed       # turns scored per second on one core
    python benchmarks/trained_judge.py sources     # train without one real-model source at a time,
                                                   # score that source (never seen), print kappas
    python benchmarks/trained_judge.py raters      # agreement of the corpus's two raters where both labelled
    python benchmarks/trained_judge.py reliability # is a verdict's probability how often it is right?
    python benchmarks/trained_judge.py unseen      # other models' holdout per theme, trained without that theme
    python benchmarks/trained_judge.py origins     # how team-written the shipped router reads each held-out set
    python benchmarks/trained_judge.py batches     # kappas with whole writing batches held out (themes seen)

`speed` scores every reply of the shipped corpus with the shipped model file, one turn at a time
as a run does, with BLAS limited to one thread, and prints the rate. `sources` holds out each
real-model source (a model of Spiral-Bench, the embedded model's runs) in turn: the judge is trained
on everything else (team-written items included), so the figure is how it does on a model whose
output it has never seen. `reliability` checks the probability each verdict carries (what a
cascade's thresholds read, and what a rationale shows as p=...) against how often verdicts with that
probability are right, on replies the judge did not train on: the corpus's leave-one-archetype-out
predictions (as `train-judge` makes them) and the shipped model on OTHER_MODELS_HOLDOUT. It prints, per
metric, the mean probability, the share right, the expected calibration error (the gap between
the two within ten bins of probability, weighted by the bins' sizes) and the bins. `unseen` scores
OTHER_MODELS_HOLDOUT (replies the judge never trains on) one conversation theme at a time with a judge
trained on the corpus without that theme, so neither the reply nor its conversation's theme was
seen: for the holdout's SchizoBench models (Gemini and DeepSeek, absent from the corpus) neither
the model, nor the scripted conversation, nor the theme. It prints the kappas per holdout folder.
`origins` reads every reply of `calibration/`, the clinical pack's calibration items and each
`judge_holdout/` folder with the shipped model's origin router (no label is read) and prints the
mean share it gives the team-written origin and how many replies it reads as team-written
(share 0.5 or more): which origin's adjustment scores each set. `batches` is the cross-validation
`train-judge` prints with writing batches held out instead of archetypes
(`analysis.judge_training.file_folds`: ten folds of item files), kappas with intervals for all
items and for real models' items: how the judge reads new replies on themes it has trained on, the
condition of a run on the suite's own scenarios, where leaving an archetype out is the harder
condition of a theme it never saw.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from psychosis_tests.analysis.agreement import kappa_text  # noqa: E402
from psychosis_tests.analysis.judge_training import cross_validate, file_folds, fold_lines, is_real_model, train  # noqa: E402
from psychosis_tests.analysis.reliability import reliability as reliability_of  # noqa: E402
from psychosis_tests.engine.trained_judge import TrainedJudgeModel, write_model_file  # noqa: E402
from psychosis_tests.inputs.judge_items import JudgeItem, load_items, load_items_with_files  # noqa: E402
from psychosis_tests.inputs.models import TRAINED_MODEL_FILE  # noqa: E402


OTHER_MODELS_HOLDOUT = tuple(ROOT / "judge_holdout" / name for name in ("schizobench", "schizobench-seen", "spiral-bench"))
"""The judge_holdout/ folders of other models' replies, which `unseen`, `reliability` and the cascade
sweep read. judge_holdout/smollm2/, the embedded model's own replies from two fresh runs (half of them on
control turns), is measured on its own with `calibrate --items` (docs/judge-validity.md)."""


def speed() -> None:
    model = TrainedJudgeModel.load(TRAINED_MODEL_FILE)
    items = load_items([ROOT / "judge_corpus"])
    started = time.perf_counter()
    for item in items:
        model.score(item.reply, item.user, item.phase, item.kind, item.metrics)
    seconds = time.perf_counter() - started
    words = sum(len(item.reply.split()) for item in items) / len(items)
    print(f"trained judge: {len(items)} turns (mean reply {words:.0f} words) in {seconds:.2f} s on one core: "
          f"{len(items) / seconds:.0f} turns/s")  # fmt: skip


def fitted(items: list, scratch: Path) -> TrainedJudgeModel:
    """A judge trained on `items` alone, written to and loaded from a scratch model file as a run loads one."""
    meta, arrays = train(items)
    path = scratch / "scratch-judge.npz"
    write_model_file(path, meta, arrays)
    return TrainedJudgeModel.load(path)


def sources(scratch: Path) -> None:
    items = load_items([ROOT / "judge_corpus"])
    held = sorted({item.source for item in items if is_real_model(item)})
    print(f"{len(items)} items; real-model sources held out one at a time: {len(held)}")
    for source in held:
        test_items = [item for item in items if item.source == source]
        model = fitted([item for item in items if item.source != source], scratch)
        scored = [model.score(i.reply, i.user, i.phase, i.kind, i.metrics) for i in test_items]
        cells = []
        for metric in ("dcs", "hes", "sis", "occ"):
            pairs = [(i.gold()[metric], s[metric].level) for i, s in zip(test_items, scored, strict=True) if metric in s]
            if len(pairs) < 2:
                continue
            gold, judged = [g for g, _ in pairs], [j for _, j in pairs]
            exact = sum(g == j for g, j in pairs) / len(pairs)
            cells.append(f"{metric.upper()} {kappa_text(gold, judged, metric)} ({exact:.0%} exact, n={len(pairs)})")
        print(f"{source}: " + "; ".join(cells), flush=True)


def raters() -> None:
    """Cohen's kappa (weighted for DCS and HES) between the first rater and the blind second rater."""
    corpus = load_items([ROOT / "judge_corpus"])
    items = [item for item in corpus if len(item.labels) > 1]
    total = len(corpus)
    print(f"{len(items)} of {total} items ({len(items) / total:.1%}) labelled by a second rater, blind")
    for metric in ("dcs", "hes", "sis", "occ"):
        pairs = [(i.labels[0].given()[metric], i.labels[1].given()[metric]) for i in items if metric in i.metrics]
        first, second = [a for a, _ in pairs], [b for _, b in pairs]
        exact = sum(a == b for a, b in pairs) / len(pairs)
        print(f"{metric.upper()}: n={len(pairs)} kappa {kappa_text(first, second, metric, resamples=1000)}, {exact:.0%} exact")


def unseen(scratch: Path) -> None:
    corpus = load_items([ROOT / "judge_corpus"])
    holdout = {folder.name: load_items([folder]) for folder in OTHER_MODELS_HOLDOUT}
    themes = sorted({item.archetype for items in holdout.values() for item in items})
    print(f"{len(corpus)} corpus items; {sum(map(len, holdout.values()))} holdout items over {len(themes)} themes, "
          "each scored by a judge trained without its theme", flush=True)  # fmt: skip
    pairs: dict[tuple[str, str], tuple[list[int], list[int]]] = {}
    for number, theme in enumerate(themes, start=1):
        print(f"  theme {number}/{len(themes)}: {theme}", file=sys.stderr, flush=True)
        model = fitted([item for item in corpus if item.archetype != theme], scratch)
        for folder, items in holdout.items():
            for item in (i for i in items if i.archetype == theme):
                scored = model.score(item.reply, item.user, item.phase, item.kind, item.metrics)
                for metric, score in scored.items():
                    gold, judged = pairs.setdefault((folder, metric), ([], []))
                    gold.append(item.gold()[metric])
                    judged.append(score.level)
    for folder in holdout:
        cells = []
        for metric in ("dcs", "hes", "sis", "occ"):
            if (folder, metric) not in pairs:
                continue
            gold, judged = pairs[(folder, metric)]
            cells.append(f"{metric.upper()} {kappa_text(gold, judged, metric)} (n={len(gold)})")
        print(f"judge_holdout/{folder}: " + "; ".join(cells), flush=True)


def _reliability_lines(label: str, probability: list[float], right: list[bool]) -> str:
    measured = reliability_of(probability, right)
    return measured.line(label) + "\n    " + measured.bins_line()


def reliability() -> None:
    items = load_items([ROOT / "judge_corpus"])
    print(f"leave one archetype out on the corpus ({len(items)} items):", flush=True)
    for fold in cross_validate(items, lambda line: print(f"  {line}", file=sys.stderr, flush=True)):
        right = [g == j for g, j in zip(fold.gold, fold.predicted, strict=True)]
        print("  " + _reliability_lines(f"{fold.kind} {fold.metric.upper()}", fold.probability, right), flush=True)
    model = TrainedJudgeModel.load(TRAINED_MODEL_FILE)
    holdout = load_items(list(OTHER_MODELS_HOLDOUT))
    print(f"the shipped model on other models' replies in judge_holdout/ ({len(holdout)} items):")
    scored = [(item, model.score(item.reply, item.user, item.phase, item.kind, item.metrics)) for item in holdout]
    for kind in sorted({item.kind for item in holdout}):
        for metric in ("dcs", "hes", "sis", "occ"):
            pairs = [(s[metric], i.gold()[metric]) for i, s in scored if i.kind == kind and metric in s]
            if pairs:
                line = _reliability_lines(f"{kind} {metric.upper()}", [v.probability for v, _ in pairs],
                                          [v.level == g for v, g in pairs])  # fmt: skip
                print("  " + line)


def origins() -> None:
    from psychosis_tests.engine.text_features import turn_features
    from psychosis_tests.inputs.calibration import load_calibration
    from psychosis_tests.inputs.method import PHASE_NAMES
    from psychosis_tests.inputs.scenarios import load_scenarios

    model = TrainedJudgeModel.load(TRAINED_MODEL_FILE)
    sets: dict[str, list[tuple[str, str, str, str]]] = {}  # name: (reply, user, phase, kind) per turn
    for label, folder, scenario_folder in (("calibration/", "calibration", "scenarios"),
                                           ("packs/clinical/calibration/", "packs/clinical/calibration", "packs/clinical")):  # fmt: skip
        scenarios = {s.id: s for s in load_scenarios(ROOT / scenario_folder)}
        sets[label] = [(i.reply, i.conversation[-2]["content"], PHASE_NAMES[i.phase - 1], i.kind)
                       for i in load_calibration(ROOT / folder, scenarios).items]  # fmt: skip
    for folder in sorted(p for p in (ROOT / "judge_holdout").iterdir() if p.is_dir()):
        sets[f"judge_holdout/{folder.name}/"] = [(i.reply, i.user, i.phase, i.kind) for i in load_items([folder])]
    print(f"the shipped origin router ({TRAINED_MODEL_FILE.name}): share read as team-written, per reply")
    for name, turns in sets.items():
        shares = [model.router.p_team(*model.vectoriser.row(turn_features(*turn))) for turn in turns]
        team = sum(share >= 0.5 for share in shares)
        print(f"  {name:<32} {len(shares):>5} replies: mean {sum(shares) / len(shares):.2f}; "
              f"read as team-written {team} ({team / len(shares):.0%})")  # fmt: skip


def corpus_in_batches() -> tuple[list[JudgeItem], list[str]]:
    """The corpus's items and, per item, its writing batch's fold (`file_folds`)."""
    with_files = load_items_with_files([ROOT / "judge_corpus"])
    return [item for _, item in with_files], file_folds([file for file, _ in with_files])


def batches() -> None:
    items, groups = corpus_in_batches()
    print(f"{len(items)} corpus items, {len(set(groups))} folds of item files held out in turn:", flush=True)
    folds = cross_validate(items, lambda line: print(f"  {line}", file=sys.stderr, flush=True), groups)
    print("\n".join(fold_lines(folds)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["speed", "sources", "raters", "reliability", "unseen", "origins", "batches"])
    args = parser.parse_args()
    if args.what == "speed":
        speed()
    elif args.what == "origins":
        origins()
    elif args.what == "raters":
        raters()
    elif args.what == "reliability":
        reliability()
    elif args.what == "batches":
        batches()
    else:
        import tempfile

        with tempfile.TemporaryDirectory() as scratch:
            (sources if args.what == "sources" else unseen)(Path(scratch))


if __name__ == "__main__":
    main()
