"""A baseline carries its caliber (content and identity): `check NAME URL` and the exporter
re-probe from the store alone, after the caliber file is gone, on a copied store (SQLite and
PostgreSQL); an older name-only baseline and a tampered stored caliber are refused with cause."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

import pytest

from decodescope.cli.main import main
from decodescope.exporter import run_check
from decodescope.exporter.config import CheckSpec
from decodescope.sim import SimConfig, SimServer

pytestmark = pytest.mark.timeout(300)

CLIENT_ONLY = ["--no-fingerprint", "--no-scrape"]


@contextmanager
def sim() -> Iterator[str]:
    handle = SimServer(SimConfig(time_scale=0.1, seed=3, step_rate_hz=40.0)).start_in_thread()
    try:
        yield handle.url
    finally:
        handle.stop()


def caliber_file(tmp_path: Path) -> Path:
    """A caliber of the user's own (from the CPU-sized built-in: another name and task)."""
    text = resources.files("decodescope.caliber").joinpath("builtin", "demo-code-rewrite.toml"
                                                            ).read_text(encoding="utf-8")
    assert 'name = "demo-code-rewrite"' in text
    text = text.replace('name = "demo-code-rewrite"', 'name = "team-anchor"', 1)
    text = text.replace('[prompt]\n', '[prompt]\ntext = "Our own fixed preamble."\n', 1)
    p = tmp_path / "cal" / "team-anchor.toml"
    p.parent.mkdir()
    p.write_text(text, encoding="utf-8")
    return p


def set_baseline(store: str, cal: Path, capsys) -> dict:
    assert main(["baseline", "set", "anchor", "--caliber", str(cal), "--band", "1-1000000",
                 "--floor", "0.5", "--store", store, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def check(store: str, url: str, capsys) -> tuple[int, dict, str]:
    code = main(["check", "anchor", url, "--trials", "1", "--store", store, *CLIENT_ONLY,
                 "--json"])
    out = capsys.readouterr()
    return code, (json.loads(out.out) if out.out.strip() else {}), out.err


def test_check_works_after_the_caliber_file_is_deleted_and_on_a_copied_store(tmp_path, capsys):
    store = str(tmp_path / "runs.sqlite")
    cal = caliber_file(tmp_path)
    made = set_baseline(store, cal, capsys)
    assert made["caliber_ref"] == "team-anchor@1" and made["caliber_stored"] is True
    cal.unlink()
    cal.parent.rmdir()
    with sim() as url:
        code, out, err = check(store, url, capsys)
        assert (code, out.get("status")) == (0, "OK"), err
        assert out["baseline"]["caliber_identity"] == made["caliber_identity"]
        same = [r for r in out["evidence"] if r["check"] == "same caliber as the baseline?"]
        assert same and same[0]["status"] == "same"
        # the run it stored was taken at the baseline's caliber, content and all
        assert main(["runs", "show", "last", "--store", store, "--json"]) == 0
        run = json.loads(capsys.readouterr().out)
        assert run["caliber_identity"] == made["caliber_identity"]
        # the exporter's check: the same, in-process
        o = run_check(CheckSpec(name="x", baseline="anchor", url=url, trials=1, scrape=False,
                                fingerprint=False), store)
        assert o.ok and o.verdict == "OK", o
        # another store, copied: the caliber travels with the baseline
        other = str(tmp_path / "other.sqlite")
        assert main(["store", "copy", store, other]) == 0
        capsys.readouterr()
        code, out, err = check(other, url, capsys)
        assert (code, out.get("status")) == (0, "OK"), err
    assert main(["baseline", "show", "anchor", "--store", other]) == 0
    assert "content stored with the baseline" in capsys.readouterr().out


def test_a_postgres_store_copy_checks_without_the_file(tmp_path, capsys):
    from test_postgres import pg_cluster

    c = pg_cluster()
    pg = c.url(c.new_db())
    store = str(tmp_path / "runs.sqlite")
    cal = caliber_file(tmp_path)
    made = set_baseline(store, cal, capsys)
    cal.unlink()
    assert main(["store", "copy", store, pg]) == 0
    capsys.readouterr()
    with sim() as url:
        code, out, err = check(pg, url, capsys)
    assert (code, out.get("status")) == (0, "OK"), err
    assert out["baseline"]["caliber_identity"] == made["caliber_identity"]


def _edit_spec(store: str, edit) -> None:
    with sqlite3.connect(store) as db:
        (spec_json,) = db.execute("SELECT spec_json FROM baselines WHERE name = 'anchor'"
                                  ).fetchone()
        spec = json.loads(spec_json)
        edit(spec)
        db.execute("UPDATE baselines SET spec_json = ? WHERE name = 'anchor'", (json.dumps(spec),))


def test_an_older_name_only_baseline_of_a_file_caliber_says_to_recreate_it(tmp_path, capsys):
    store = str(tmp_path / "runs.sqlite")
    set_baseline(store, caliber_file(tmp_path), capsys)

    def v1(spec: dict) -> None:
        spec.pop("caliber")
        spec["spec_version"] = 1

    _edit_spec(store, v1)
    code, _, err = check(store, "http://127.0.0.1:9", capsys)
    assert code == 2
    assert "holds only its caliber's name team-anchor@1" in err and "baseline set" in err
    assert "Traceback" not in err


def test_a_tampered_stored_caliber_is_refused(tmp_path, capsys):
    store = str(tmp_path / "runs.sqlite")
    set_baseline(store, caliber_file(tmp_path), capsys)
    _edit_spec(store, lambda s: s["caliber"]["output"].update(max_tokens=7))
    code, _, err = check(store, "http://127.0.0.1:9", capsys)
    assert code == 2 and "hashes to" in err and "Traceback" not in err


def test_a_builtin_baseline_stores_its_content_too(tmp_path, capsys):
    store = str(tmp_path / "runs.sqlite")
    assert main(["baseline", "set", "b", "--caliber", "demo-code-rewrite", "--band", "1-2",
                 "--store", store]) == 0
    capsys.readouterr()
    with sqlite3.connect(store) as db:
        (spec_json,) = db.execute("SELECT spec_json FROM baselines").fetchone()
    spec = json.loads(spec_json)
    assert spec["spec_version"] == 2 and spec["caliber"]["name"] == "demo-code-rewrite"
