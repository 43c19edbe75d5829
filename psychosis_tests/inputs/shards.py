"""`--shard K/N`: which share of the selected cases one CI job runs.

The split is a function of the selected cases alone (their ids and sizes), never of the machine,
the process or xdist, so N jobs given the same selection and `--shard 1/N` ... `--shard N/N`
run every case exactly once between them. Cases go, largest first (ties by id), each to the shard
with the least work so far (ties to the lower index): with equally long scenarios that deals
them out in turn, so shard sizes differ by at most one case, and longer scenarios are spread
before shorter ones fill the gaps.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from typing import TypeVar

from pydantic import BaseModel, Field, model_validator

from psychosis_tests.common.errors import ConfigError

T = TypeVar("T")
_FORM = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


class ShardSpec(BaseModel):
    """One shard of a run: the K-th of N (1-based)."""

    index: int = Field(ge=1)
    """Which shard this job runs, 1..count."""
    count: int = Field(ge=1)
    """How many shards the selection is split into."""

    @model_validator(mode="after")
    def _index_within_count(self) -> ShardSpec:
        if self.index > self.count:
            raise ValueError(f"shard {self.index} of {self.count} does not exist")
        return self

    @classmethod
    def parse(cls, text: str) -> ShardSpec:
        """'K/N' as given to --shard; ConfigError says what was expected."""
        match = _FORM.match(str(text))
        if match is None or not 1 <= int(match.group(1)) <= int(match.group(2)):
            raise ConfigError(
                f"--shard expects K/N with 1 <= K <= N (e.g. --shard 2/4), got {text!r}", field="--shard"
            )
        return cls(index=int(match.group(1)), count=int(match.group(2)))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def select(self, items: Sequence[T], *, name: Callable[[T], str], weight: Callable[[T], int]) -> list[T]:
        """This shard's items, in their given order."""
        mine = {name(item) for item in assign(items, self.count, name=name, weight=weight)[self.index - 1]}
        return [item for item in items if name(item) in mine]


def assign(items: Sequence[T], count: int, *, name: Callable[[T], str], weight: Callable[[T], int]) -> list[list[T]]:
    """Every item placed in one of `count` shards (see the module docstring)."""
    shards: list[list[T]] = [[] for _ in range(count)]
    load = [0] * count
    for item in sorted(items, key=lambda i: (-weight(i), name(i))):
        target = min(range(count), key=lambda s: (load[s], s))
        shards[target].append(item)
        load[target] += weight(item)
    return shards


def selection_hash(names: Sequence[str]) -> str:
    """Fingerprint of a selection, so a merge can tell shards cut from different selections."""
    return hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest()[:16]
