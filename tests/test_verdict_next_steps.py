"""Next steps that run: a file caliber's path, no advice about flags never used."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_triage_support import store_run, trial

from decodescope.cli.main import main
from decodescope.store.connect import open_store
from decodescope.store.db import Store
from decodescope.verdict.side_resolve import resolve_side
from decodescope.verdict.triage import triage


@pytest.fixture
def file_caliber(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    assert main(["calibers", "new", "mycal"]) == 0
    return tmp_path / "mycal.toml"


def _runs(tmp_path: Path, cal: str) -> tuple[Store, int, int]:
    store = open_store(tmp_path / "runs.sqlite")
    base = store_run(store, cal, [trial(86 + d, 3.0, 28.7 + d / 3) for d in (0, 0.5, -0.4)])
    cur = store_run(store, cal, [trial(60 + d, 3.0, 20.0 + d / 3) for d in (0, 0.3, -0.2)])
    return store, base, cur


def test_file_caliber_next_step_names_the_file(tmp_path: Path, file_caliber: Path):
    store, b, c = _runs(tmp_path, str(file_caliber))
    try:
        v = triage(resolve_side(str(b), store=store), resolve_side(str(c), store=store))
    finally:
        store.close()
    assert v.kind == "REGRESSION"
    text = "\n".join(v.next_steps)
    assert "--caliber mycal.toml" in text and "mycal@" not in text.split("--caliber", 1)[1][:8]


def test_file_caliber_without_its_file_says_which_file(tmp_path: Path, file_caliber: Path):
    store, b, c = _runs(tmp_path, str(file_caliber))
    file_caliber.unlink()  # moved away since the probe: no path to give
    try:
        v = triage(resolve_side(str(b), store=store), resolve_side(str(c), store=store))
    finally:
        store.close()
    text = "\n".join(v.next_steps)
    assert "--caliber FILE.toml" in text and "defined mycal@1" in text


def test_builtin_caliber_keeps_its_name(tmp_path: Path):
    store, b, c = _runs(tmp_path, "demo-code-rewrite")
    try:
        v = triage(resolve_side(str(b), store=store), resolve_side(str(c), store=store))
    finally:
        store.close()
    assert any("--caliber demo-code-rewrite@" in s for s in v.next_steps)


def test_no_fingerprint_advice_names_the_runs_not_a_flag(tmp_path: Path):
    store, b, c = _runs(tmp_path, "demo-code-rewrite")
    try:
        v = triage(resolve_side(str(b), store=store), resolve_side(str(c), store=store))
    finally:
        store.close()
    text = "\n".join(v.next_steps)
    if v.cause == "step rate":
        assert "--no-fingerprint" not in text and "No fingerprint stored for" in text
