"""The lines of a JSON Lines text.

JSON Lines ends a line at a newline only. `str.splitlines()` also breaks at U+2028, U+2029, U+0085
and a few control characters, which a JSON string may hold raw (json.dumps with ensure_ascii=False
leaves them, and models write them inside their replies), so a reader built on it would cut a valid
line in two and refuse it as "not JSON". Every reader of JSON Lines text goes through here.
"""

from __future__ import annotations


def json_lines(text: str) -> list[tuple[int, str]]:
    """(line number from 1, line) for every line that is not blank."""
    return [(number, line) for number, line in enumerate(text.split("\n"), start=1) if line.strip()]
