"""Text that came from outside (a server, a label, a stored run) is text in every output format:
the one place that escapes it for its target.

    terminal(text)       ESC / CSI / OSC / DCS sequences, C0 / C1 controls and bidi overrides
                         removed (newline and tab kept): nothing recolours, retitles or clears
                         the terminal. Every command's output already passes through it
                         (`console.RedactingStream`).
    html(text)           HTML text or a quoted attribute value: `& < > " '` as entities,
                         controls removed.
    md_text(text)        Markdown prose (one line): raw HTML (`<script>`, `<img onerror>`,
                         `<svg onload>`, `<iframe>`) becomes entities, and the characters that
                         make links, images, code spans, emphasis, strike-through and table
                         cells (`[ ] ` * _ ~ | \\`) are backslash-escaped, so `[x](http://…)`
                         and `![x](http://…)` stay text; line breaks are folded.
    md_cell(text)        a Markdown table cell: md_text with line breaks shown as " · "; an
                         empty cell reads "—".
    md_code_span(text)   inline code whose fence no backtick in the text can close.
    md_fence_line(text)  one line inside a fenced code block (```): verbatim but for a fence.

The tool's own words pass through these too where they share a line with outside text; the
escapes only change how the source reads, never what a rendered page shows.
"""

from __future__ import annotations

import html as _html
import re

from decodescope.redact import strip_controls

__all__ = ["html", "md_cell", "md_code_span", "md_fence_line", "md_text", "terminal"]

EMPTY_CELL = "—"
# Characters that start Markdown inline syntax (CommonMark + GFM): links and images `[...]`,
# code spans, emphasis, strike-through, table cells, and the backslash itself.
_MD_INLINE = re.compile(r"([\\`*_\[\]|~])")
# At the start of a line: headings, list items, setext underlines, thematic breaks.
_MD_LINE_START = re.compile(r"^([#+\-=])")


def terminal(text: object) -> str:
    """Safe to print on a terminal (see the module docstring)."""
    return strip_controls(str(text))


def html(text: object) -> str:
    """Safe as HTML text and inside a quoted attribute value."""
    return _html.escape(strip_controls(str(text)), quote=True)


def _entities(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def md_text(text: object, *, joiner: str = " ", line_start: bool = True) -> str:
    """Markdown prose on one line: every character shows as itself, nothing renders live.
    `line_start=False` where the text never starts a line (inside a table cell, after a
    list marker): a leading `#` or `-` is then plain text already."""
    lines = [ln.strip() for ln in strip_controls(str(text)).splitlines()]
    flat = joiner.join(ln for ln in lines if ln)
    out = _MD_INLINE.sub(r"\\\1", _entities(flat))
    return _MD_LINE_START.sub(r"\\\1", out) if line_start else out


def md_cell(text: object) -> str:
    """A Markdown table cell: md_text, line breaks as " · ", "—" when empty."""
    return md_text(text, joiner=" · ", line_start=False) or EMPTY_CELL


def md_code_span(text: object) -> str:
    """Inline code (its content is never rendered as Markdown or HTML), fenced with more
    backticks than the longest run inside it; line breaks folded."""
    flat = " ".join(strip_controls(str(text)).split())
    longest = max((len(m) for m in re.findall(r"`+", flat)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{fence}{pad}{flat}{pad}{fence}" if flat else EMPTY_CELL


def md_fence_line(text: object) -> str:
    """One line inside a ``` fenced block: shown verbatim, so only a fence (three backticks or
    tildes) and line breaks need changing."""
    flat = " ".join(strip_controls(str(text)).splitlines()).strip()
    return flat.replace("```", "'''").replace("~~~", "---")
