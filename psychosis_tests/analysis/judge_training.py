"""Training the trained judge: a vocabulary and one linear model per (kind, metric), fitted on
labelled judge items (`inputs.judge_items`), never on `calibration/`: a logistic regression, or for
DCS and HES one per threshold between levels (`fit_metric`).

Team-written replies and real models' replies are two origins that differ in wording and in
how their raters drew some lines, so each model is fitted on three copies of the features (every
item's, team-written items' only, real-model items' only: shared weights plus one adjustment per
origin), and a router learns to tell the origins apart; a turn is scored with the
adjustments mixed by the router's reading (`engine.trained_judge`, docs/judge-validity.md).

`cross_validate` holds out one archetype (theme) at a time and reports weighted kappa per metric,
so the figure says how the judge does on conversations it never saw, and reports the items from
real models (every source other than team-written text) separately. `train` fits on every item
and returns the arrays and metadata `engine.trained_judge.write_model_file` stores. Same items in,
same model out: the vocabulary is sorted, the solver is deterministic and nothing is sampled.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy
import sklearn
from scipy.sparse import csr_matrix, diags, hstack
from sklearn.linear_model import LogisticRegression

from psychosis_tests.analysis.agreement import kappa_text
from psychosis_tests.analysis.reliability import reliability
from psychosis_tests.engine.text_features import BLOCKS, Vectoriser, turn_features
from psychosis_tests.engine.trained_judge import MetricModel, OriginRouter, logistic
from psychosis_tests.inputs.judge_items import JudgeItem

BLOCK_CAPS = {"w": 20000, "u": 4000, "m": 64, "c": 16}
"""Most features kept per block, the most frequent first (ties by name)."""
BLOCK_WEIGHTS = {"w": 1.0, "u": 0.5, "m": 0.5, "c": 1.0}
MIN_DOCUMENTS = 2
"""A feature must appear in at least this many items to enter the vocabulary."""
REGULARISATION = 16.0
"""Inverse regularisation strength C of every model. Chosen, with the most probable level as the
verdict (rather than the level nearest the expected score), by the leave-one-archetype-out
cross-validation and the held-out real-model sources on the corpus, never on calibration/
(`benchmarks/judge_features.py`; docs/judge-validity.md gives the figures). So were the two below."""
CUMULATIVE = frozenset({"dcs", "hes"})
"""Ordinal metrics fitted as one binary model per threshold (level >= 1, level >= 2), not one multinomial."""
BLOCKS_READ = {"sis": frozenset({"w", "m", "c"})}
"""The feature blocks (`engine.text_features.BLOCKS`) each metric's model reads; a metric not named
reads DEFAULT_BLOCKS. SIS reads no user words (whether a reply refers the user to help is in the
reply, and with the user's words SIS did worse on real-model sources it had not seen) and is the
one metric that reads the reference judge's cue groups: they raised SIS on held-out archetypes and
real models' replies, and lowered DCS and OCC there (docs/judge-validity.md)."""
DEFAULT_BLOCKS = frozenset({"w", "u", "m"})
REAL_MODEL_WEIGHT = 2.0
"""Sample weight of an item whose reply came from a real model (`is_real_model`: every source but
team-written text, a --from-run's replies included; team-written items weigh 1): they are a quarter
of the corpus and the kind of text the judge must read in use. Weighing them twice
raised DCS and HES on held-out real-model sources and on the real-model items of held-out
archetypes, and moved the all-items figures by at most 0.01 (`benchmarks/judge_features.py`)."""
ROUTER_BLOCKS = frozenset({"w", "m"})
"""What the origin router reads: the reply's words and its shape (length, markdown), where an
origin shows; not the user's words, which both origins share."""
ONE_ORIGIN_BIAS = 30.0
"""The router's bias, with no weights, when every training item is of one origin: it then
always answers that origin (p within 1e-13 of 0 or 1)."""


def corpus_hash(items: Sequence[JudgeItem]) -> str:
    """SHA-256 over the items' canonical JSON, in id order."""
    digest = hashlib.sha256()
    for item in sorted(items, key=lambda i: i.id):
        digest.update(json.dumps(item.model_dump(mode="json"), sort_keys=True).encode())
    return digest.hexdigest()


def item_blocks(item: JudgeItem) -> dict[str, Counter[str]]:
    return turn_features(item.reply, item.user, item.phase, item.kind)


def build_vectoriser(blocks: Sequence[dict[str, Counter[str]]]) -> Vectoriser:
    """Vocabulary (per block: at least MIN_DOCUMENTS items, the BLOCK_CAPS most frequent) and
    smoothed idf, from the training items only."""
    documents: Counter[str] = Counter()
    for turn in blocks:
        for counts in turn.values():
            documents.update(counts.keys())
    vocabulary: list[str] = []
    for block in BLOCKS:
        kept = [(n, name) for name, n in documents.items() if name.startswith(f"{block}:") and n >= MIN_DOCUMENTS]
        kept.sort(key=lambda pair: (-pair[0], pair[1]))
        vocabulary += sorted(name for _, name in kept[: BLOCK_CAPS[block]])
    total = len(blocks)
    idf = np.array([math.log((1 + total) / (1 + documents[name])) + 1 for name in vocabulary])
    return Vectoriser(vocabulary, idf, BLOCK_WEIGHTS)


def matrix(vectoriser: Vectoriser, blocks: Sequence[dict[str, Counter[str]]]) -> csr_matrix:
    rows, cols, vals = [], [], []
    for i, turn in enumerate(blocks):
        c, v = vectoriser.row(turn)
        rows += [i] * len(c)
        cols += c.tolist()
        vals += v.tolist()
    return csr_matrix((vals, (rows, cols)), shape=(len(blocks), len(vectoriser.vocabulary)))


def is_real_model(item: JudgeItem) -> bool:
    return item.source != "team-written"


def sample_weights(items: Sequence[JudgeItem]) -> np.ndarray:
    return np.array([REAL_MODEL_WEIGHT if is_real_model(item) else 1.0 for item in items])


def _fit(x: csr_matrix, y: np.ndarray, sample_weight: np.ndarray) -> LogisticRegression:
    model = LogisticRegression(C=REGULARISATION, max_iter=2000, class_weight="balanced")
    return model.fit(x, y, sample_weight=sample_weight)


def blocks_only(vectoriser: Vectoriser, x: csr_matrix, blocks: frozenset[str]) -> csr_matrix:
    """`x` with every column outside these feature blocks zeroed, so a model fitted on it gives
    them weights of exactly zero."""
    kept = np.array([name.split(":", 1)[0] in blocks for name in vectoriser.vocabulary], dtype=np.float64)
    return x if kept.all() else csr_matrix(x.multiply(kept[np.newaxis, :]))


def team_written(items: Sequence[JudgeItem]) -> np.ndarray:
    """1.0 for each team-written item, 0.0 for each real model's."""
    return np.array([0.0 if is_real_model(item) else 1.0 for item in items])


def with_origins(x: csr_matrix, team: np.ndarray) -> csr_matrix:
    """Three copies side by side: every row's features, team-written rows' only, real models' only;
    `team` may also be a router's share (a row read as p team-written and 1 - p real)."""
    return hstack([x, diags(team) @ x, diags(1.0 - team) @ x]).tocsr()


def fit_metric(vectoriser: Vectoriser, x: csr_matrix, y: np.ndarray, metric: str, sample_weight: np.ndarray,
               team: np.ndarray) -> MetricModel:  # fmt: skip
    """One metric's model on the rows of `x` (each weighing as `sample_weight` says, team-written where
    `team` is 1): cumulative for CUMULATIVE metrics with more than two levels, blind to the blocks it
    does not read (BLOCKS_READ: their weights are exactly zero), with shared weights and one
    adjustment per origin."""
    x = with_origins(blocks_only(vectoriser, x, BLOCKS_READ.get(metric, DEFAULT_BLOCKS)), team)
    levels = sorted(set(y.tolist()))
    if metric in CUMULATIVE and len(levels) > 2:
        fits = [_fit(x, (y >= level).astype(np.int64), sample_weight) for level in levels[1:]]
        weights, bias = np.vstack([f.coef_ for f in fits]), np.concatenate([f.intercept_ for f in fits])
    else:
        fit = _fit(x, y, sample_weight)
        levels, weights, bias = fit.classes_.tolist(), fit.coef_, fit.intercept_
    shared, team_part, real_part = np.split(weights.astype(np.float32), 3, axis=1)
    return MetricModel(tuple(int(v) for v in levels), shared, bias.astype(np.float32), team_part, real_part)


def fit_router(vectoriser: Vectoriser, x: csr_matrix, team: np.ndarray) -> OriginRouter:
    """P(team-written) from the ROUTER_BLOCKS of each row; every item weighs 1."""
    if len(set(team.tolist())) < 2:
        bias = ONE_ORIGIN_BIAS if team[0] == 1.0 else -ONE_ORIGIN_BIAS
        return OriginRouter(np.zeros(len(vectoriser.vocabulary), np.float32), bias)
    fit = _fit(blocks_only(vectoriser, x, ROUTER_BLOCKS), team.astype(np.int64), np.ones(len(team)))
    return OriginRouter(fit.coef_[0].astype(np.float32), float(fit.intercept_[0]))


def router_shares(router: OriginRouter, x: csr_matrix) -> np.ndarray:
    """The router's P(team-written) for every row of `x`."""
    scores = np.asarray(x @ router.weights.astype(np.float64)).ravel() + router.bias
    return logistic(scores)


def level_probabilities(model: MetricModel, x: csr_matrix, p_team: np.ndarray) -> np.ndarray:
    """One row per row of `x`, one column per level of `model.levels` (each row read as team-written
    with its share in `p_team`)."""
    weights = np.hstack([model.weights, model.team, model.real]).astype(np.float64)
    scores = np.asarray(with_origins(x, p_team) @ weights.T) + model.bias.astype(np.float64)
    return model.from_scores(scores)


def predict(model: MetricModel, x: csr_matrix, p_team: np.ndarray) -> tuple[list[int], list[float]]:
    """The most probable level of each row, as the judge picks it, and that level's probability."""
    probabilities = level_probabilities(model, x, p_team)
    chosen = probabilities.argmax(axis=1)
    return [model.levels[i] for i in chosen], probabilities[np.arange(len(chosen)), chosen].tolist()


@dataclass(frozen=True)
class Fold:
    """Out-of-fold predictions for one metric of one kind."""

    kind: str
    metric: str
    gold: list[int]
    predicted: list[int]
    real_model: list[bool]
    """Whether each item's reply came from a real model (not team-written)."""
    item_ids: list[str]
    probability: list[float]
    """The probability of each predicted level: what a cascade's threshold is compared with."""


def cross_validate(items: Sequence[JudgeItem], progress: Callable[[str], None] = lambda _: None,
                   groups: Sequence[str] | None = None) -> list[Fold]:  # fmt: skip
    """Leave one group out: fit on the other groups' items (vocabulary included), predict the held-out
    group's. The groups are the archetypes unless `groups` names one per item."""
    blocks = [item_blocks(item) for item in items]
    group_of = list(groups) if groups is not None else [item.archetype for item in items]
    if len(group_of) != len(items):
        raise ValueError(f"{len(group_of)} groups for {len(items)} items: name one group per item")
    names = sorted(set(group_of))
    gathered: dict[tuple[str, str], tuple[list[int], list[int], list[bool], list[str], list[float]]] = {}
    for number, held_out in enumerate(names, start=1):
        progress(f"cross-validation: {'archetype' if groups is None else 'group'} {number}/{len(names)} held out ({held_out})")
        train = [i for i, group in enumerate(group_of) if group != held_out]
        test = [i for i, group in enumerate(group_of) if group == held_out]
        vectoriser = build_vectoriser([blocks[i] for i in train])
        x_train = matrix(vectoriser, [blocks[i] for i in train])
        x_test = matrix(vectoriser, [blocks[i] for i in test])
        team = team_written([items[i] for i in train])
        p_team = router_shares(fit_router(vectoriser, x_train, team), x_test)
        for kind, metric in model_keys(items):
            fit_rows = [n for n, i in enumerate(train) if items[i].kind == kind and metric in items[i].metrics]
            test_rows = [n for n, i in enumerate(test) if items[i].kind == kind and metric in items[i].metrics]
            if not test_rows:
                continue
            y = np.array([items[train[n]].gold()[metric] for n in fit_rows])
            if len(set(y.tolist())) < 2:
                continue
            weights = sample_weights([items[train[n]] for n in fit_rows])
            model = fit_metric(vectoriser, x_train[fit_rows], y, metric, weights, team[fit_rows])
            predicted, probability = predict(model, x_test[test_rows], p_team[test_rows])
            gold, judged, real, ids, probabilities = gathered.setdefault((kind, metric), ([], [], [], [], []))
            gold += [items[test[n]].gold()[metric] for n in test_rows]
            judged += [int(p) for p in predicted]
            real += [is_real_model(items[test[n]]) for n in test_rows]
            ids += [items[test[n]].id for n in test_rows]
            probabilities += probability
    return [Fold(kind, metric, *values) for (kind, metric), values in sorted(gathered.items())]


def file_folds(files: Sequence[Path], folds: int = 10) -> list[str]:
    """A `cross_validate` grouping that holds out writing batches: each item's group is its item
    file's fold, the files sorted by path and dealt round-robin into `folds` folds. A file is one
    batch (one archetype's round by one team rater, or one real model's round), so a held-out fold
    is new replies on themes the judge has trained on, as calibration/ and a run on the suite's own
    scenarios are; leaving an archetype out hides the theme too."""
    fold_of = {file: f"fold {n % folds + 1:02d}" for n, file in enumerate(sorted(set(files)))}
    return [fold_of[file] for file in files]


def model_keys(items: Sequence[JudgeItem]) -> list[tuple[str, str]]:
    """(kind, metric) pairs the items label, in a fixed order."""
    return sorted({(item.kind, metric) for item in items for metric in item.metrics})


def fold_lines(folds: Sequence[Fold]) -> list[str]:
    """Weighted kappa with its 95% bootstrap interval per (kind, metric), all items and real-model items."""
    lines = []
    for fold in folds:
        for label, mask in (("all items", [True] * len(fold.gold)), ("real-model items", fold.real_model)):
            gold = [g for g, keep in zip(fold.gold, mask, strict=True) if keep]
            judged = [p for p, keep in zip(fold.predicted, mask, strict=True) if keep]
            if len(gold) < 2:
                continue
            shown = kappa_text(gold, judged, fold.metric)
            lines.append(f"  {fold.kind:<8} {fold.metric.upper():<4} {label:<17} n={len(gold):<5} kappa {shown}")
    return lines


def reliability_lines(folds: Sequence[Fold]) -> list[str]:
    """Per (kind, metric), how often the held-out verdicts were right against the probability they
    gave (`analysis.reliability`): what a cascade's thresholds can trust."""
    lines = []
    for fold in folds:
        right = [g == p for g, p in zip(fold.gold, fold.predicted, strict=True)]
        lines.append("  " + reliability(fold.probability, right).line(f"{fold.kind:<8} {fold.metric.upper():<4}"))
    return lines


def train(items: Sequence[JudgeItem], progress: Callable[[str], None] = lambda _: None) -> tuple[dict, dict[str, np.ndarray]]:
    """Fit on every item: the metadata and arrays of a model file."""
    blocks = [item_blocks(item) for item in items]
    vectoriser = build_vectoriser(blocks)
    x = matrix(vectoriser, blocks)
    arrays: dict[str, np.ndarray] = {
        "vocabulary": np.array(vectoriser.vocabulary),
        "idf": vectoriser.idf.astype(np.float32),
    }
    team = team_written(items)
    progress("training: origin router")
    router = fit_router(vectoriser, x, team)
    arrays["router/weights"] = router.weights
    arrays["router/bias"] = np.array(router.bias, dtype=np.float64)
    keys = []
    for kind, metric in model_keys(items):
        progress(f"training: {kind} {metric.upper()}")
        rows = [i for i, item in enumerate(items) if item.kind == kind and metric in item.metrics]
        y = np.array([items[i].gold()[metric] for i in rows])
        model = fit_metric(vectoriser, x[rows], y, metric, sample_weights([items[i] for i in rows]), team[rows])
        key = f"{kind}/{metric}"
        keys.append(key)
        arrays[f"{key}/levels"] = np.array(model.levels, dtype=np.int64)
        arrays[f"{key}/weights"] = model.weights
        arrays[f"{key}/weights_team"] = model.team
        arrays[f"{key}/weights_real"] = model.real
        arrays[f"{key}/bias"] = model.bias
    metrics = sorted({metric for _, metric in model_keys(items)})
    meta = {
        "models": keys,
        "block_weights": BLOCK_WEIGHTS,
        "settings": {"block_caps": BLOCK_CAPS, "min_documents": MIN_DOCUMENTS, "C": REGULARISATION,
                     "class_weight": "balanced", "real_model_weight": REAL_MODEL_WEIGHT, "cumulative": sorted(CUMULATIVE),
                     "blocks_read": {m: sorted(BLOCKS_READ.get(m, DEFAULT_BLOCKS)) for m in metrics},
                     "origins": ["shared", "team-written", "real-model"], "router_blocks": sorted(ROUTER_BLOCKS)},  # fmt: skip
        "corpus": {"sha256": corpus_hash(items), "items": len(items),
                   "sources": dict(sorted(Counter(i.source for i in items).items()))},  # fmt: skip
        "versions": {"python": sys.version.split()[0], "numpy": np.__version__, "scipy": scipy.__version__,
                     "scikit-learn": sklearn.__version__},  # fmt: skip
    }
    return meta, arrays
