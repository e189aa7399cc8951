"""Plain-text tables drawn by rich: columns sized to their content, never a word cut or two
columns run together (the console is as wide as the table needs)."""

from __future__ import annotations

import io
from collections.abc import Sequence

WIDE = 4000  # characters: wider than any table here, so rich never wraps or truncates


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]], *,
               right: Sequence[int] = (), indent: int = 0) -> str:
    """`right`: indexes of right-aligned (numeric) columns."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=(0, 1))
    for i, h in enumerate(header):
        t.add_column(h, justify="right" if i in right else "left", no_wrap=True)
    for r in rows:
        t.add_row(*[str(c) for c in r])
    out = io.StringIO()
    Console(file=out, width=WIDE, color_system=None, highlight=False, soft_wrap=False,
            emoji=False, markup=False).print(t)
    pad = " " * indent
    return "\n".join(pad + ln.rstrip() for ln in out.getvalue().rstrip("\n").split("\n")
                     if ln.strip())
