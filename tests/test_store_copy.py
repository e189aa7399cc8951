"""`decodescope store copy`: SQLite -> PostgreSQL -> SQLite is lossless (every row of every
table identical, ids and id high-water marks included); --append renumbers; a non-empty
destination is refused. The PostgreSQL side runs on test_postgres's throwaway cluster."""

from __future__ import annotations

import json
import sqlite3

import pytest
from test_postgres import PG_PASSWORD, PG_PASSWORD_Q, pg_cluster, trace

from decodescope.cli.main import main
from decodescope.errors import UsageError
from decodescope.records.window import EngineWindow
from decodescope.store import runs as sr
from decodescope.store.connect import open_store
from decodescope.store.copy import COLUMNS, copy_store
from decodescope.store.db import Store
from decodescope.verdict.baseline import Baseline, get_baseline, save_baseline

pytestmark = pytest.mark.timeout(300)


def fill(st: Store, runs: int = 6, trials: int = 3, requests: int = 4) -> None:
    """Runs of every kind: complete, failed (with a cause), running, NaN in results, unicode,
    labels, windows per trial and per run, series; one run deleted (a gap in the ids and a
    high-water mark above the last id), baselines pointing at runs."""
    for i in range(runs):
        rid = sr.create_run(st, url=f"http://127.0.0.1:{8000 + i}", model="Qwen3-Coder-30B ✓",
                            engine="vllm", caliber={"name": "c", "i": i}, caliber_ref="c@1",
                            caliber_identity="abc", labels={"host": f"h{i % 2}", "i": str(i)},
                            simulated=bool(i % 2), meta={"pi": 3.141592653589793, "e": 1e-300})
        for t in range(trials):
            w = EngineWindow("prometheus", "vllm", 1.0 + t, 2.5 + t, generation_tokens=100 + t,
                             drafts=25, accepted_tokens=75, running=1)
            failed = i == 2 and t == trials - 1
            sr.add_trial(st, rid, t, status="failed" if failed else "ok", started_at=1e9 + t / 3,
                         wall_anchor_s=1.7e9 + 0.1 * t,
                         result={"rate": 1 / 3, "nan": float("nan"), "inf": float("inf")},
                         requests=[trace(5 + k, error="HTTP 500" if failed and k == 1 else None)
                                   for k in range(requests)], windows=[w])
        sr.add_windows(st, rid, [EngineWindow("log", "vllm", 0.0, 9.0, generation_tokens=7)])
        sr.add_series(st, rid, "prometheus", {"t": [0.1, 0.2], "v": [float("nan"), 2.0]})
        if i != 4:
            sr.update_run(st, rid, status="failed" if i == 2 else "complete",
                          result={"client": {"decode_rate": {"median": 100.0 + i / 7}}},
                          warnings=[{"code": "w", "message": "ünïcode"}])
    save_baseline(st, Baseline("anchor", 5.0, "c@1", "abc", (90.0, 110.0), 85.0, (1, 3),
                               "client", (95.5, 101.25), None, False))
    save_baseline(st, Baseline("other", 6.0, "c@1", "abc", None, 80.0, (), "engine", (), 3.5,
                               True))
    last = sr.create_run(st, url=None, model=None, engine=None, caliber=None, caliber_ref=None,
                         caliber_identity=None, labels={})
    with st.tx() as c:
        c.execute("DELETE FROM runs WHERE id = ?", (last,))


def dump(path: str) -> dict[str, list[tuple]]:
    """Every row of every table, raw, plus the id high-water marks."""
    c = sqlite3.connect(path)
    try:
        out = {t: c.execute(f"SELECT {', '.join(cols)} FROM {t} ORDER BY {cols[0]}").fetchall()
               for t, cols in COLUMNS.items()}
        out["sqlite_sequence"] = sorted(c.execute("SELECT name, seq FROM sqlite_sequence"))
        return out
    finally:
        c.close()


def test_copy_columns_are_every_column_of_the_schema(tmp_path):
    with open_store(tmp_path / "s.sqlite") as st:
        for table, cols in COLUMNS.items():
            assert tuple(r[1] for r in st.conn.execute(f"PRAGMA table_info({table})")) == cols
    c = pg_cluster()
    with open_store(c.url(c.new_db())) as st:
        for table, cols in COLUMNS.items():
            got = st.conn.execute("SELECT column_name FROM information_schema.columns"
                                  " WHERE table_schema = current_schema() AND table_name = ?"
                                  " ORDER BY ordinal_position", (table,)).fetchall()
            assert tuple(r[0] for r in got) == cols


def test_sqlite_to_postgres_to_sqlite_is_lossless(tmp_path, capsys):
    c = pg_cluster()
    pg = c.url(c.new_db())
    a, b = str(tmp_path / "a.sqlite"), str(tmp_path / "b.sqlite")
    with open_store(a) as st:
        fill(st)
    capsys.readouterr()
    assert main(["store", "copy", a, pg, "--json"]) == 0
    out = capsys.readouterr()
    there = json.loads(out.out)
    assert there["rows"] == {"runs": 6, "trials": 18, "requests": 72, "windows": 24,
                             "series": 6, "baselines": 2}
    assert PG_PASSWORD not in out.out + out.err and PG_PASSWORD_Q not in out.out + out.err
    assert main(["store", "copy", pg, b]) == 0
    text = capsys.readouterr().out
    assert text.startswith("copied 6 runs (18 trials, 72 request traces, 24 windows, 6 series)"
                           " and 2 baselines") and PG_PASSWORD not in text
    assert dump(a) == dump(b)  # every row, byte for byte; ids and high-water marks too
    with open_store(a, read_only=True) as sa, open_store(pg, read_only=True) as sp:
        for rid in (1, 2, 3, 4, 5, 6):
            for traces in (True, False):  # as JSON text: NaN written the same on both sides
                assert json.dumps(sr.get_run(sa, rid, with_traces=traces).to_dict()) == \
                    json.dumps(sr.get_run(sp, rid, with_traces=traces).to_dict())
        # failed run 3: its cause found the same way on both
        assert sr.get_run(sp, 3, with_traces=False).failure == {
            "error": "HTTP 500", "error_kind": None, "trial": 3, "request": 2}
        assert sr.get_run(sp, 5).status in ("running", "abandoned")
        assert get_baseline(sa, "anchor") == get_baseline(sp, "anchor")
        assert sa.id_high_water("runs") == sp.id_high_water("runs") == 7
    with open_store(pg) as sp:  # the next run after a copy does not reuse the deleted id
        assert sr.create_run(sp, url=None, model=None, engine=None, caliber=None,
                             caliber_ref=None, caliber_identity=None, labels={}) == 8


def test_copy_refuses_a_non_empty_destination_and_appends_on_request(tmp_path, capsys):
    c = pg_cluster()
    pg = c.url(c.new_db())
    a, b = str(tmp_path / "a.sqlite"), str(tmp_path / "b.sqlite")
    with open_store(a) as st:
        fill(st, runs=3, trials=2, requests=2)
    with open_store(b) as st:
        fill(st, runs=2, trials=1, requests=1)
        save_baseline(st, Baseline("mine", 1.0, "c@1", "abc", None, 1.0, (2,), "client", (),
                                   None, False))
    assert main(["store", "copy", a, pg]) == 0
    capsys.readouterr()
    assert main(["store", "copy", b, pg]) == 2
    err = capsys.readouterr().err
    assert "already holds 3 runs" in err and "--append" in err and PG_PASSWORD not in err
    assert main(["store", "copy", b, pg, "--append", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["first_new_run_id"] == 5 and rep["skipped_baselines"] == ["anchor", "other"]
    with open_store(pg, read_only=True) as sp:
        runs = sr.list_runs(sp, limit=100)
        assert [r.id for r in runs] == [6, 5, 3, 2, 1]
        assert len(sr.get_run(sp, 6).trials) == 1 and len(sr.get_run(sp, 6).trials[0].requests) == 1
        mine = get_baseline(sp, "mine")
        assert mine is not None and mine.run_ids == (6,)  # renumbered with its run
    with pytest.raises(UsageError), open_store(a, read_only=True) as s1, open_store(a) as s2:
        copy_store(s1, s2)  # the same store both sides


def test_store_info_on_both_backends(tmp_path, capsys):
    c = pg_cluster()
    pg = c.url(c.new_db())
    a = str(tmp_path / "a.sqlite")
    with open_store(a) as st:
        fill(st, runs=1, trials=1, requests=1)
    for where in (a, pg):
        if where == pg:
            assert main(["store", "copy", a, pg]) == 0
        capsys.readouterr()
        assert main(["store", "info", "--store", where, "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["backend"] == ("postgresql" if where == pg else "sqlite")
        assert doc["schema_version"] == 2 and doc["rows"]["runs"] == 1
        assert PG_PASSWORD_Q not in doc["store"]
