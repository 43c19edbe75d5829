"""JSON whose objects name each key once.

`json.loads` keeps the last value of a key written twice, without a word: an input file's second
"reply" or "title" would silently replace the first. The suite's JSON inputs are read through
`loads_unique`, which refuses it instead.
"""

from __future__ import annotations

import json


class RepeatedKey(ValueError):
    """A JSON object names one key twice; the key is the exception's argument."""


def loads_unique(text: str) -> object:
    """`json.loads`, raising RepeatedKey for an object that names a key twice."""
    return json.loads(text, object_pairs_hook=_unique)


def _unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
    found: dict[str, object] = {}
    for key, value in pairs:
        if key in found:
            raise RepeatedKey(key)
        found[key] = value
    return found
