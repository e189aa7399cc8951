"""The package's layers and its import graph between top-level packages.

    python tools/layers.py            the graph, layer by layer (what docs/architecture.md shows)
    python tools/layers.py --mermaid  the same graph as a Mermaid diagram
    python tools/layers.py --check    exit 1 on an import cycle (between units, or between the
                                      modules of one package) or an import that goes up a layer

Every import statement counts, at module top or inside a function, `import x` or
`from x import y`: a lazy import is still a dependency. A module named in a string and loaded
with importlib is not seen (the CLI's lazy subcommands: `cli.main.SUBCOMMAND_MODULES`); keep
such names inside the importing layer's reach. `tests/test_layers.py` runs the check and compares the
graph with the one in docs/architecture.md.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "decodescope"
SRC = Path(__file__).resolve().parent.parent / "src" / PACKAGE

# Bottom to top. A unit may import units of lower layers only; inside the foundation, the plain
# modules may import each other as long as no cycle forms. "__init__" is the package's own
# __init__.py (the version). docs/architecture.md says what each layer holds.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("__init__", "exitcodes", "errors", "redact", "signals", "console", "edge",
                    "markup")),
    ("records", ("records",)),
    ("sources", ("caliber", "fingerprint", "engines", "sim", "peers")),
    ("instruments", ("probe", "telemetry", "store")),
    ("analysis", ("analysis",)),
    ("verdict", ("verdict",)),
    ("products", ("report", "doctor", "run")),
    ("service", ("exporter",)),
    ("cli", ("cli",)),
]
SAME_LAYER_OK = {"foundation"}


@dataclass
class Graph:
    edges: dict[str, set[str]] = field(default_factory=dict)
    # (from unit, to unit) -> the module-level imports behind the edge, for messages
    why: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    # module -> the modules it imports (module_graph), for cycles inside one package
    modules: dict[str, set[str]] = field(default_factory=dict)


def unit_of(module: str) -> str:
    """decodescope.probe.client -> probe; decodescope.errors -> errors; decodescope -> __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module_name(path: Path, src: Path) -> tuple[str, str]:
    """(module, package it lives in) for a file under src (the package's own folder)."""
    rel = path.relative_to(src.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
        return ".".join(parts), ".".join(parts)
    return ".".join(parts), ".".join(parts[:-1])


def _imported(node: ast.AST, package: str) -> Iterable[str]:
    if isinstance(node, ast.Import):
        yield from (a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            mod = ".".join(base + ([node.module] if node.module else []))
        else:
            mod = node.module or ""
        if mod == PACKAGE:  # `from decodescope import __version__` / `import errors`
            yield from (f"{PACKAGE}.{a.name}" if a.name != "__version__" else PACKAGE
                        for a in node.names)
        else:
            yield mod


def build_graph(src: Path = SRC) -> Graph:
    g = Graph()
    for path in sorted(src.rglob("*.py")):
        module, package = _module_name(path, src)
        here = unit_of(module)
        g.edges.setdefault(here, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            for target in _imported(node, package):
                if target != PACKAGE and not target.startswith(PACKAGE + "."):
                    continue
                there = unit_of(target)
                if there != here:
                    g.edges[here].add(there)
                    g.why.setdefault((here, there), set()).add(f"{module} -> {target}")
    g.modules = module_graph(src)
    return g


def layer_of() -> dict[str, int]:
    return {unit: i for i, (_, units) in enumerate(LAYERS) for unit in units}


def module_graph(src: Path = SRC) -> dict[str, set[str]]:
    """Module -> the modules it imports (every import statement, lazy ones too). `from p import m`
    where p.m is a module is an import of p.m; the implicit import of a module's parent packages
    is not counted (else every package whose __init__ re-exports would be a cycle)."""
    files = {(_module_name(p, src)): p for p in sorted(src.rglob("*.py"))}
    modules = {m for m, _ in files}
    edges: dict[str, set[str]] = {}
    for (module, package), path in files.items():
        out = edges.setdefault(module, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom):
                for base in _imported(node, package):
                    for a in node.names:
                        sub = f"{base}.{a.name}"
                        if sub in modules:
                            out.add(sub)
                        elif base in modules:
                            out.add(base)
            else:
                out.update(t for t in _imported(node, package) if t in modules)
        out.discard(module)
    return edges




def cycles(g: Graph) -> list[list[str]]:
    """Strongly connected components with more than one unit (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g.edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g.edges):
        if v not in index:
            visit(v)
    return out


def problems(g: Graph) -> list[str]:
    """Every cycle, unit without a layer, and import that goes up (or sideways) a layer."""
    found = [f"import cycle between {' <-> '.join(c)}" for c in cycles(g)]
    found += [f"import cycle between modules {' <-> '.join(c)}: move what both need into a "
              "module below them" for c in cycles(Graph(edges=g.modules))]
    layers = layer_of()
    for unit in sorted(g.edges):
        if unit not in layers:
            found.append(f"{unit} has no layer: add it to LAYERS in tools/layers.py "
                         "and to docs/architecture.md")
    for (a, b), whys in sorted(g.why.items()):
        if a not in layers or b not in layers:
            continue
        la, lb = layers[a], layers[b]
        if lb > la or (lb == la and LAYERS[la][0] not in SAME_LAYER_OK):
            found.append(f"{a} ({LAYERS[la][0]}) imports {b} ({LAYERS[lb][0]}): "
                         + "; ".join(sorted(whys)))
    return found


def render_text(g: Graph) -> str:
    """Layer by layer, top first: each unit and the units it imports."""
    lines = []
    for name, units in reversed(LAYERS):
        lines.append(f"{name}:")
        for unit in units:
            deps = sorted(g.edges.get(unit, ()), key=lambda u: (-layer_of().get(u, -1), u))
            lines.append(f"  {unit:<12} -> {', '.join(deps) if deps else '(nothing)'}")
    return "\n".join(lines)


def render_mermaid(g: Graph) -> str:
    lines = ["graph BT"]
    for name, units in LAYERS:
        lines.append(f"  subgraph {name}")
        lines.extend(f"    {u.strip('_')}[{u}]" for u in units)
        lines.append("  end")
    for a in sorted(g.edges):
        lines.extend(f"  {a.strip('_')} --> {b.strip('_')}" for b in sorted(g.edges[a]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mermaid", action="store_true", help="print a Mermaid diagram")
    ap.add_argument("--check", action="store_true", help="exit 1 on a cycle or an upward import")
    args = ap.parse_args(argv)
    g = build_graph()
    if args.check:
        found = problems(g)
        for line in found:
            print(line, file=sys.stderr)
        print(f"{len(g.edges)} units, {sum(map(len, g.edges.values()))} edges, "
              f"{len(found)} problem(s)")
        return 1 if found else 0
    print(render_mermaid(g) if args.mermaid else render_text(g))
    return 0


if __name__ == "__main__":
    sys.exit(main())
