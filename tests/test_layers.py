"""One-way layers: no import cycle between top-level units, no import up a layer, and the
graph in docs/architecture.md is the one tools/layers.py draws from the code today."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _layers():
    spec = importlib.util.spec_from_file_location("layers", ROOT / "tools" / "layers.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["layers"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_package_has_no_cycle_and_no_upward_import():
    layers = _layers()
    g = layers.build_graph()
    assert layers.problems(g) == []
    assert set(g.edges) == set(layers.layer_of()), "every unit has a layer, every layer unit exists"


def test_architecture_page_shows_todays_graph():
    layers = _layers()
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    drawn = layers.render_text(layers.build_graph())
    assert f"```\n{drawn}\n```" in page, "run `python tools/layers.py` and paste its output"


def _write(root: Path, files: dict[str, str]) -> Path:
    pkg = root / "decodescope"
    for name, text in files.items():
        path = pkg / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return pkg


def test_a_cycle_even_through_a_lazy_import_is_found(tmp_path):
    layers = _layers()
    pkg = _write(tmp_path, {
        "__init__.py": "",
        "probe/__init__.py": "",
        "probe/runner.py": "from decodescope.store.db import Store\n",
        "store/__init__.py": "",
        "store/db.py": "def f():\n    from decodescope.probe import runner\n",
    })
    g = layers.build_graph(pkg)
    assert layers.cycles(g) == [["probe", "store"]]
    found = layers.problems(g)
    assert "import cycle between probe <-> store" in found
    assert any(line.startswith("probe (instruments) imports store (instruments)") for line in found)


def test_an_upward_import_is_named_with_the_module_behind_it(tmp_path):
    layers = _layers()
    pkg = _write(tmp_path, {
        "__init__.py": "",
        "records/__init__.py": "",
        "records/trace.py": "from ..verdict import decide\n",  # relative imports count too
        "verdict/__init__.py": "",
        "verdict/decide.py": "",
    })
    found = layers.problems(layers.build_graph(pkg))
    assert found == ["records (records) imports verdict (verdict): "
                     "decodescope.records.trace -> decodescope.verdict"]


def test_a_cycle_between_modules_of_one_package_is_found(tmp_path):
    """Issue 33: inside one package too, lazily or not, `from pkg import module` included;
    a package whose __init__ re-exports its modules is not a cycle with them."""
    layers = _layers()
    pkg = _write(tmp_path, {
        "__init__.py": "",
        "telemetry/__init__.py": "from decodescope.telemetry.pipeline import run\n",
        "telemetry/pipeline.py": "def run():\n    from decodescope.telemetry import seek\n",
        "telemetry/seek.py": "from decodescope.telemetry.pipeline import run\n",
        "telemetry/clock.py": "import decodescope.telemetry\n",
    })
    found = layers.problems(layers.build_graph(pkg))
    assert found == ["import cycle between modules decodescope.telemetry.pipeline <-> "
                     "decodescope.telemetry.seek: move what both need into a module below them"]
