"""A thin CLI (issue 33): no CLI module imports another CLI module's helpers. What several
commands share lives in cli/common.py; everything else is library code one layer down.
Parsed with ast (every import, module-level or inside a function), like tools/layers.py."""

from __future__ import annotations

import ast
from pathlib import Path

import decodescope.cli

CLI = Path(decodescope.cli.__file__).resolve().parent
ALLOWED = {"decodescope.cli.common"}  # the shared options and output; main.py loads commands
IMPORTER_EXEMPT = {"decodescope.cli.main"}  # the command registry


def _module(path: Path) -> str:
    rel = path.relative_to(CLI.parent.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _command_of(module: str) -> str:
    """decodescope.cli.demo.vllm -> decodescope.cli.demo: a command's own package."""
    return ".".join(module.split(".")[:3])


def cli_imports(source: str) -> list[str]:
    """The decodescope.cli modules that `source` imports ("relative" for a relative import:
    the CLI imports absolutely, so that this rule can see every target)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.startswith("decodescope.cli.")]
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                out.append("relative")
            elif target == "decodescope.cli":
                out += [f"decodescope.cli.{a.name}" for a in node.names]
            elif target.startswith("decodescope.cli."):
                out.append(target)
    return out


def violations(files: dict[str, str]) -> list[str]:
    """`importer imports imported` for every import of another command's module."""
    bad = []
    for module, source in sorted(files.items()):
        if module in IMPORTER_EXEMPT:
            continue
        for target in cli_imports(source):
            if target in ALLOWED or _command_of(target) == _command_of(module):
                continue
            bad.append(f"{module} imports {target}")
    return bad


def test_no_cli_module_imports_another_commands_helpers() -> None:
    files = {_module(p): p.read_text(encoding="utf-8") for p in CLI.rglob("*.py")}
    assert "decodescope.cli.probe" in files and "decodescope.cli.demo.vllm" in files
    assert violations(files) == []


def test_the_rule_catches_an_import_of_another_command() -> None:
    files = {
        "decodescope.cli.sweep": "from decodescope.cli.probe import derive_caliber\n",
        "decodescope.cli.check": "def f():\n    from decodescope.cli.report import _write\n",
        "decodescope.cli.runs": "import decodescope.cli.probe\n",
        "decodescope.cli.ab": "from decodescope.cli import probe\n",
        "decodescope.cli.spread": "from decodescope.cli.common import parse_labels\n",
        "decodescope.cli.demo": "from decodescope.cli.demo.parts import numbers\n",
        "decodescope.cli.main": "import decodescope.cli.probe\n",
        "decodescope.cli.store": "from .probe import kept_line\n",
    }
    assert violations(files) == [
        "decodescope.cli.ab imports decodescope.cli.probe",
        "decodescope.cli.check imports decodescope.cli.report",
        "decodescope.cli.runs imports decodescope.cli.probe",
        "decodescope.cli.store imports relative",
        "decodescope.cli.sweep imports decodescope.cli.probe",
    ]
