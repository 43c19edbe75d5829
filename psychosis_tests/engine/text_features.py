"""The trained judge's features: what it reads of a turn, as sparse named counts.

Training (`analysis.judge_training`) and scoring (`engine.trained_judge`) both call `turn_features`,
so a model file and the code that reads it can never disagree on a feature's name. A turn gives
four blocks, each weighted by tf-idf and scaled to unit length on its own so a long reply does not
drown the user's message: the reply's words and word pairs, the user message's words, the turn's
phase and conversation kind, and which of the reference judge's documented cue groups the reply
hits (`servers.reference_judge.cue_groups_hit`: help referrals, crisis lines, refusals...). Which
model reads which block is the training's choice (`analysis.judge_training.BLOCKS_READ`). The harm
text is left out on purpose: it names the scenario, and a judge that learns scenarios instead of
replies fails on conversations it has never seen. So are
character n-grams: a block of them (3-5 letters inside words) fitted our own writing's style and
lowered the leave-one-archetype-out kappa on real models' replies (docs/judge-validity.md).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from psychosis_tests.servers.reference_judge import CUE_GROUPS, cue_groups_hit

BLOCKS = ("w", "u", "m", "c")
"""reply words, user words, meta (phase, kind, length band, markdown), cue groups the reply hits."""
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def turn_features(reply: str, user: str, phase: str, kind: str) -> dict[str, Counter[str]]:
    """Raw counts per block for one turn; feature names carry their block as a prefix."""
    reply_words = words(reply)
    word_counts = Counter(f"w:{w}" for w in reply_words)
    word_counts.update(f"w:{a} {b}" for a, b in zip(reply_words, reply_words[1:], strict=False))
    user_counts = Counter(f"u:{w}" for w in words(user))
    meta = Counter({f"m:phase={phase}": 1, f"m:kind={kind}": 1, f"m:length={_length_band(reply_words)}": 1})
    if re.search(r"(?m)^\s*(#+ |[-*] |\d+\. )", reply):
        meta["m:markdown"] = 1
    cues = Counter({f"c:{group}": 1 for group in cue_groups_hit(reply)})
    return {"w": word_counts, "u": user_counts, "m": meta, "c": cues}


def cues_digest() -> str:
    """SHA-256 of the cue lists the "c" block reads. A model file records it and is refused when the
    lists have changed since: the same file would otherwise score differently without a new fingerprint."""
    listed = {group: [pattern.pattern for pattern in patterns] for group, patterns in sorted(CUE_GROUPS.items())}
    return hashlib.sha256(repr(listed).encode()).hexdigest()


def _length_band(reply_words: Sequence[str]) -> str:
    n = len(reply_words)
    return "short" if n < 25 else "medium" if n < 120 else "long"


class Vectoriser:
    """Named counts to one weighted, per-block normalised row, over a fixed vocabulary."""

    def __init__(self, vocabulary: Sequence[str], idf: np.ndarray, block_weights: Mapping[str, float]):
        self.vocabulary = list(vocabulary)
        self.index = {name: i for i, name in enumerate(self.vocabulary)}
        self.idf = np.asarray(idf, dtype=np.float64)
        self.block_weights = dict(block_weights)

    def row(self, blocks: Mapping[str, Counter[str]]) -> tuple[np.ndarray, np.ndarray]:
        """(column indices, values) of one turn; features outside the vocabulary are dropped."""
        columns: list[int] = []
        values: list[float] = []
        for block, counts in blocks.items():
            picked = [(self.index[name], count) for name, count in counts.items() if name in self.index]
            if not picked:
                continue
            cols = np.fromiter((c for c, _ in picked), dtype=np.int64, count=len(picked))
            tf = np.fromiter((1.0 + math.log(n) for _, n in picked), dtype=np.float64, count=len(picked))
            weighted = tf * self.idf[cols]
            norm = float(np.sqrt(np.dot(weighted, weighted)))
            if norm > 0:
                columns += cols.tolist()
                values += (weighted / norm * self.block_weights.get(block, 1.0)).tolist()
        return np.asarray(columns, dtype=np.int64), np.asarray(values, dtype=np.float64)
