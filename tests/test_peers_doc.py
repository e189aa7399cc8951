"""docs/peers.md stays true: every decodescope option its tables name exists."""

from __future__ import annotations

import re
from pathlib import Path

import click

from decodescope.cli.main import cli

DOC = Path(__file__).resolve().parents[1] / "docs" / "peers.md"
SPAN = re.compile(r"`([^`]+)`")


def command(path: list[str]) -> click.Command:
    ctx = click.Context(cli)
    cmd: click.Command = cli
    for name in path:
        assert isinstance(cmd, click.Group), path
        sub = cmd.get_command(ctx, name)
        assert sub is not None, f"no command {' '.join(path)}"
        cmd = sub
    return cmd


def options(cmd: click.Command) -> set[str]:
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}


def documented() -> list[tuple[list[str], str]]:
    """(command path, option) for every `CMD --opt ...` span in the decodescope column, and
    every option of the closing command / options table."""
    out = []
    top = set(cli.list_commands(click.Context(cli)))
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or set(cells[0]) <= {"-", " "}:
            continue
        if len(cells) == 2:  # | `probe` | `--a` `--b` |
            spans = SPAN.findall(cells[0])
            if spans and spans[0].split()[0] in top:
                out += [(spans[0].split(), o) for o in SPAN.findall(cells[1])]
            continue
        for span in SPAN.findall(cells[1]):  # the decodescope column
            words = span.split()
            if not words or words[0] not in top:
                continue
            path = words[:2] if words[0] == "runs" else words[:1]
            out += [(path, w) for w in words if w.startswith("--")]
    return out


def test_the_doc_names_options():
    found = documented()
    assert len(found) > 30
    assert (["probe"], "--request-rate") in found and (["runs", "export"], "--table") in found


def test_every_documented_option_exists():
    missing = [(" ".join(p), o) for p, o in documented() if o not in options(command(p))]
    assert not missing, f"docs/peers.md names options that do not exist: {missing}"
