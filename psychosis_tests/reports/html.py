"""What every HTML page of the report is built from: one escape for every value, the page frame
with its Content-Security-Policy (no script runs, whatever a model wrote) and style, facts lists
and tables whose every cell is escaped. The pages themselves are html_case.py and html_summary.py."""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable, Mapping, Sequence

from psychosis_tests.common.errors import inert

_CSP = "default-src 'none'; style-src 'unsafe-inline'"
_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.15em; margin-top: 1.4em; } h3 { font-size: 1em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.breach td { background: #fdecea; } tr.breach td.result { font-weight: bold; color: #a93226; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 2px 12px; }
dl.facts dt { font-weight: 600; } dl.facts dd { margin: 0; }
.turn { border: 1px solid #ddd; border-radius: 6px; margin: 0.6em 0; padding: 0.5em 0.7em; }
.who { font-size: 0.85em; color: #666; margin-top: 0.3em; }
.text { white-space: pre-wrap; overflow-wrap: anywhere; }
.user .text { background: #f4f6f7; padding: 4px 6px; border-radius: 4px; }
.reply .text { background: #fbfcfc; padding: 4px 6px; border-left: 3px solid #aab7b8; }
.verdict { margin-top: 0.4em; font-size: 0.92em; }
.score { display: inline-block; padding: 0 6px; margin-right: 4px; border-radius: 3px; font-weight: 600; }
.good { background: #d5f5e3; } .mid { background: #fcf3cf; } .bad { background: #fadbd8; }
.rationale { color: #444; margin-top: 2px; } .note { color: #666; font-size: 0.9em; }
"""


def escape(value: object) -> str:
    """Escape any value for HTML text or a quoted attribute, its control characters and invisible
    marks written visibly (`inert`): a bidi override in a reply would otherwise reorder what the
    page shows of it."""
    return html.escape(inert(str(value)), quote=True)


def page(title: str, body: Iterable[str]) -> str:
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
            f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>",
            *body,
            "</body></html>",
        ]
    )


def facts(pairs: Iterable[tuple[str, object]]) -> str:
    items = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in pairs)
    return f'<dl class="facts">{items}</dl>'


def table(
    header: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    numeric: Sequence[int] = (),
    row_class: Callable[[Sequence[object]], str] | None = None,
    cell_class: Mapping[int, str] | None = None,
) -> str:
    """An HTML table; every cell is escaped. `numeric` lists right-aligned columns."""
    lines = ["<table><thead><tr>", *(f"<th>{escape(h)}</th>" for h in header), "</tr></thead><tbody>"]
    for row in rows:
        css = row_class(row) if row_class else ""
        lines.append(f'<tr class="{escape(css)}">' if css else "<tr>")
        for i, cell in enumerate(row):
            classes = " ".join(c for c in ("num" if i in numeric else "", (cell_class or {}).get(i, "")) if c)
            lines.append(f'<td class="{classes}">{escape(cell)}</td>' if classes else f"<td>{escape(cell)}</td>")
        lines.append("</tr>")
    lines.append("</tbody></table>")
    return "".join(lines)
