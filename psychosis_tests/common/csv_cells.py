"""Text cells of CSV files people open in a spreadsheet (summary.csv, review files), kept from
being read as formulas (CSV injection): a model's reply that starts with = must stay text.

`csv_cell` puts a quote before a cell a spreadsheet would run; `from_csv_cell` takes it off
again, so a review file read back gives each reply exactly as it was written.
"""

from __future__ import annotations

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""A spreadsheet reads a cell starting with one of these as a formula."""
QUOTE = "'"


def _quoted(text: str) -> bool:
    """Whether `text` starts with a quote that `csv_cell` could have put there."""
    return text.startswith(QUOTE) and text[1:].startswith((*FORMULA_STARTS, QUOTE))


def csv_cell(value: object) -> object:
    """A text cell made inert for spreadsheets: a quote before a leading formula character (and
    before a quote `from_csv_cell` would otherwise take off); other values as they are."""
    if isinstance(value, str) and (value.startswith(FORMULA_STARTS) or _quoted(value)):
        return QUOTE + value
    return value


def from_csv_cell(text: str) -> str:
    """The text `csv_cell` was given."""
    return text[1:] if _quoted(text) else text
