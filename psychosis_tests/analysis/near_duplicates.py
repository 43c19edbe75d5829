"""Near-duplicate replies between two sets of texts (a training corpus and a held-out set).

Two replies count as the same when their normalised texts are equal (lower case, every run of
characters other than letters and digits folded to one space; before that, accents, fullwidth and
other compatibility forms are read as their plain letters, invisible format characters such as the
zero-width space and the soft hyphen are dropped, and Cyrillic and Greek letters that look like
Latin ones are read as those, so a copy dressed up so is still a copy), and as near duplicates when the
Jaccard similarity of their word 4-gram shingles is at least NEAR_DUPLICATE_JACCARD. Shingles of
four words catch a reply copied with a few words changed or a sentence added, while two
independently written replies on the same topic share almost none (measured on the shipped sets:
the highest similarity between a corpus reply and a calibration reply is far below the limit;
tests/test_judge_corpus.py prints and checks it).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence

NEAR_DUPLICATE_JACCARD = 0.5
SHINGLE_WORDS = 4
_NON_WORD = re.compile(r"[^0-9a-z]+")
_LOOKALIKES = str.maketrans({
    "а": "a", "с": "c", "ԁ": "d", "е": "e", "һ": "h", "і": "i", "ј": "j", "ӏ": "l", "о": "o", "р": "p", "ԛ": "q",
    "ѕ": "s", "ԝ": "w", "х": "x", "у": "y",  # Cyrillic
    "α": "a", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p", "υ": "u", "χ": "x",  # Greek
    "ı": "i",
})  # fmt: skip
"""Lower-case letters drawn like a Latin letter (upper case is folded to these first)."""


def normalise(text: str) -> str:
    if not text.isascii():
        plain = unicodedata.normalize("NFKD", text.casefold())
        text = "".join(ch for ch in plain if not unicodedata.combining(ch) and unicodedata.category(ch) != "Cf").translate(_LOOKALIKES)
    return _NON_WORD.sub(" ", text.lower()).strip()


def shingles(text: str, size: int = SHINGLE_WORDS) -> frozenset[str]:
    """The text's word n-grams; a text shorter than `size` words is one shingle of itself."""
    words = normalise(text).split()
    if len(words) <= size:
        return frozenset({" ".join(words)})
    return frozenset(" ".join(words[i : i + size]) for i in range(len(words) - size + 1))


def most_similar(texts: Sequence[str], others: Sequence[str]) -> list[tuple[float, int, int]]:
    """For each text of `texts` that shares any shingle with `others`: (highest Jaccard, its index,
    the index of the most similar text of `others`), most similar first. An inverted index keeps it
    fast enough for thousands of texts against hundreds."""
    other_sets = [shingles(t) for t in others]
    index: dict[str, list[int]] = {}
    for j, found in enumerate(other_sets):
        for shingle in found:
            index.setdefault(shingle, []).append(j)
    best: list[tuple[float, int, int]] = []
    for i, text in enumerate(texts):
        mine = shingles(text)
        shared = Counter(j for shingle in mine for j in index.get(shingle, ()))
        if not shared:
            continue
        score, j = max((n / len(mine | other_sets[j]), j) for j, n in shared.items())
        best.append((score, i, j))
    return sorted(best, reverse=True)


def overlaps(texts: Sequence[str], others: Sequence[str], limit: float = NEAR_DUPLICATE_JACCARD) -> list[tuple[int, int, str]]:
    """Pairs (index in texts, index in others, why) that are equal after normalising or near duplicates."""
    exact = {normalise(t): j for j, t in enumerate(others)}
    found = [(i, exact[normalise(t)], "same text") for i, t in enumerate(texts) if normalise(t) in exact]
    seen = {i for i, _, _ in found}
    found += [(i, j, f"Jaccard {score:.2f}") for score, i, j in most_similar(texts, others) if score >= limit and i not in seen]
    return found
