"""`decodescope calibers list | show NAME | new NAME`."""

from __future__ import annotations

from pathlib import Path

import click

from decodescope.caliber.resolve import builtin_calibers, check_name, resolve, template
from decodescope.caliber.spec import element_table
from decodescope.cli.common import emit
from decodescope.console import json_option
from decodescope.errors import UsageError

PROMPT_HEAD_CHARS = 400


@click.group("calibers")
def command() -> None:
    """List, show and create calibers (the measurement basis of a number)."""


@command.command("list")
@json_option
def list_cmd(as_json: bool) -> None:
    """List the built-in calibers."""
    cals = list(builtin_calibers().values())
    rows = [{"ref": c.ref, "identity": c.identity, "task_class": c.task_class,
             "thinking": c.thinking, "max_tokens": c.output.max_tokens,
             "target_tokens": c.prompt.target_tokens, "description": c.description} for c in cals]

    def text(rows: list[dict]) -> str:
        w = max(len(r["ref"]) for r in rows)
        lines = [f"{'caliber':<{w}}  identity      description"]
        for r in rows:
            lines.append(f"{r['ref']:<{w}}  {r['identity']}  {r['description'][:70]}")
        return "\n".join(lines)

    emit(rows, as_json, text)


@command.command("show")
@click.argument("name")
@json_option
def show_cmd(name: str, as_json: bool) -> None:
    """Show a caliber: element table, token target, identity hash, prompt head.

    NAME is a built-in (`demo-code-rewrite`, `parity-code-32k@1`) or a .toml path.
    """
    c = resolve(name)
    prompt = c.prompt_text(1) if c.prompt.target_tokens else c.prompt_text()
    out = {"ref": c.ref, "identity": c.identity, "description": c.description,
           "token_target": c.prompt.target_tokens, "elements": dict(element_table(c)),
           "prompt_chars": len(c.prompt_text()), "prompt_head": prompt[:PROMPT_HEAD_CHARS],
           "spec": c.to_dict()}

    def text(o: dict) -> str:
        lines = [f"{o['ref']}  identity {o['identity']}", o["description"], ""]
        w = max(len(k) for k in o["elements"])
        lines += [f"  {k:<{w}}  {v}" for k, v in o["elements"].items()]
        target = o["token_target"]
        lines.append("")
        lines.append(f"token target: {'>= ' + str(target) + ' prompt tokens (reached via the server tokenize endpoint)' if target else 'none (fixed text, ' + str(o['prompt_chars']) + ' characters)'}")
        lines.append("prompt head:")
        lines += ["  | " + ln for ln in o["prompt_head"].splitlines()[:12]]
        return "\n".join(lines)

    emit(out, as_json, text)


@command.command("new")
@click.argument("name")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="File to write (default NAME.toml in the current directory).")
def new_cmd(name: str, output: str | None) -> None:
    """Write a commented caliber template NAME.toml to edit.

    NAME: letters, digits, '.', '_', '-'; no path separators or quotes (-o picks the file)."""
    check_name(name, "calibers new NAME")
    path = Path(output or f"{name}.toml")
    if path.exists():
        raise UsageError("file already exists", where=str(path), remedy="Choose another name or -o PATH")
    path.write_text(template(name), encoding="utf-8")
    resolve(str(path))  # the template must validate
    click.echo(f"wrote {path}; check it with: decodescope calibers show {path}")
