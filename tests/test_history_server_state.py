"""History and server state (issue 36): fresh-server and warm-up runs are marked in every
output, left out of the levels when their server's stored runs show the warm-up's end, and a
change point at a restart says so. Deterministic: fixed levels, seeded jitter."""

from __future__ import annotations

import html
import json
import random

import pytest
from test_triage_support import process_fingerprint, store_run, trial

from decodescope.cli.main import main
from decodescope.report import history as render
from decodescope.store.connect import open_store
from decodescope.verdict import history as hi
from decodescope.verdict import thresholds as th
from decodescope.verdict.history_store import history

CAL = "demo-code-rewrite"
SERIES = "check=gpu-a"
S1 = 1_790_000_000.0  # the first server's process start (epoch)
S2 = S1 + 3 * 3600.0  # the restart
# a server warming up over its first 4 runs, then level (as tests/test_server_state.py)
WARMUP = (0.83, 0.88, 0.93, 0.97)
LATE = (1.0, 1.005, 0.997, 1.003, 0.998, 1.002, 1.004, 0.996)  # warm: ± 0.5 %


def fp(start: float | None, draft: int = 8) -> dict:
    return process_fingerprint(start, flags=("--draft-max", str(draft)))


@pytest.fixture
def store(tmp_path):
    with open_store(tmp_path / "runs.sqlite") as st:
        yield st


def add(store, level: float, at: float, start: float | None, draft: int = 8) -> int:
    """One run of 3 trials at `level` (± 0.5 %), created at epoch `at`."""
    rid = store_run(store, CAL, [trial(level * f) for f in (0.995, 1.0, 1.005)],
                    fingerprint=fp(start, draft), labels={"check": "gpu-a"})
    with store.tx() as c:
        c.execute("UPDATE runs SET created_at = ? WHERE id = ?", (at, rid))
    return rid


def restart_history(store, *, after: float, draft_after: int = 8,
                    known: bool = True) -> list[int]:
    """8 warm runs of server 1 at 60 tok/s; a restart (server 2, `draft_after`) whose first 4
    runs climb to `after` (WARMUP), then 8 runs at `after` (LATE)."""
    s1, s2 = (S1, S2) if known else (None, None)
    ids = [add(store, 60.0 * v, S1 + 1200 + 60 * i, s1) for i, v in enumerate(LATE)]
    ids += [add(store, after * w, S2 + 30 + 40 * i, s2, draft_after)
            for i, w in enumerate(WARMUP)]
    ids += [add(store, after * v, S2 + 900 + 60 * i, s2, draft_after)
            for i, v in enumerate(LATE)]
    return ids


def test_a_restart_of_the_same_stack_with_a_warm_up_is_no_change_point(store):
    ids = restart_history(store, after=60.0)
    r = history(store, SERIES)
    h = r.history
    warm = ids[8:12]
    assert [h.points[i].key for i in h.warm_up] == [f"run {i}" for i in warm]
    assert h.changes == [] and h.spikes == []  # the warm-up is neither a change nor spikes
    marks = {p.key: hi.server_mark(p.server) for p in h.points}
    assert [marks[f"run {i}"] for i in warm] == ["fresh, server warm-up"] * 4
    assert {marks[f"run {i}"] for i in ids[:8] + ids[12:]} == {""}
    assert any("inside a server warm-up left out of the levels" in n
               and f"runs {warm[0]}–{warm[-1]}" in n for n in h.notes)
    # the same runs without the server's start: nothing tells a warm-up from a change
    out = text_of(store, known=False)
    assert "unknown for every point" in out and "[fresh" not in out


def text_of(store, known: bool) -> str:
    with open_store(store.path + f".{known}") as other:
        restart_history(other, after=60.0, known=known)
        return render.text(history(other, SERIES))


def test_a_regression_at_a_restart_says_its_warm_up_and_measures_the_level_after_it(store):
    ids = restart_history(store, after=50.0, draft_after=4)
    r = history(store, SERIES)
    h = r.history
    (c,) = h.changes
    first_late = ids[12]
    # the change is at the restart, between the old server's last run and the new one's first
    assert c.word == "REGRESSION" and (c.before, c.after) == (f"run {ids[7]}", f"run {ids[8]}")
    assert c.index == 8 and h.levels[-1].first == 12  # the level after it: from run ids[12]
    assert c.server is not None
    assert c.server.left_out == tuple(f"run {i}" for i in ids[8:12])
    assert c.server.measured_from == f"run {first_late}"
    assert c.server.server_start == pytest.approx(S2)
    # the level after it is the settled server's, not pulled down by its warm-up
    assert c.decode.current == pytest.approx(50.0, rel=0.01)
    assert h.levels[-1].decode == pytest.approx(50.0, rel=0.01)
    out = render.text(r)
    said = f"runs {ids[8]}–{ids[11]} after it ran on a server warming up (fresh: its server " \
           "started "
    assert said in out
    assert f"the level after it is measured from run {first_late} on" in out
    # each warm-up run is marked in the server-state rows, with its place in the levels
    for i in ids[8:12]:
        assert f"run {i} [fresh, server warm-up]" in out
    assert f"run {ids[8]} [fresh, server warm-up], 30 s after its server's process start; " \
           "left out of the levels" in out
    assert "warm-up (faster run by run) over 12 runs" in out


def test_json_carries_the_server_state_of_each_point_and_change(store, capsys):
    ids = restart_history(store, after=50.0, draft_after=4)
    capsys.readouterr()
    code = main(["history", SERIES, "--store", store.path, "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1  # a stack REGRESSION in the range
    by_key = {p["key"]: p["server_state"] for p in doc["points"]}
    first = by_key[f"run {ids[8]}"]
    assert (first["fresh"], first["in_warmup"], first["warming"], first["left_out"]) == \
        (True, True, True, True)
    assert first["since_start_s"] == pytest.approx(30.0) and first["mark"] == "fresh, server warm-up"
    late = by_key[f"run {ids[-1]}"]
    assert (late["fresh"], late["in_warmup"], late["left_out"], late["mark"]) == \
        (False, False, False, "")
    assert late["since_start_s"] > th.FRESH_SERVER_S
    assert doc["warm_up_left_out"] == [f"run {i}" for i in ids[8:12]]
    (c,) = doc["changes"]
    assert c["server_state"]["warm_up_left_out"] == [f"run {i}" for i in ids[8:12]]
    assert c["server_state"]["measured_from"] == f"run {ids[12]}"
    assert "measured from" in c["server_state"]["text"]
    assert any("[fresh, server warm-up]" in x for x in doc["server_state"])


def test_runs_without_a_process_start_are_unknown_never_false(store):
    ids = restart_history(store, after=50.0, draft_after=4, known=False)
    h = history(store, SERIES).history
    assert h.warm_up == []  # nothing known: nothing left out
    for p in h.points:
        rec = hi.server_record(p.server)
        assert (rec["known"], rec["fresh"], rec["in_warmup"], rec["warming"]) == \
            (False, None, None, None)
        assert hi.server_mark(p.server) == "?"
    assert all(c.server is None for c in h.changes)
    assert hi.server_lines(h) == ["unknown for every point: no process start in the runs' "
                                  "fingerprints (a remote server, --no-fingerprint)"]
    assert len(ids) == len(h.points)


def test_engine_windows_have_no_server_state():
    pts = [hi.Point(key=f"window 12-01 10:{i:02d}:00", t=60.0 * i, decode=60.0)
           for i in range(8)]
    h = hi.detect(pts)
    assert all(hi.server_record(p.server)["fresh"] is None for p in h.points)
    assert hi.server_lines(h) == ["unknown for every point: engine windows carry no server "
                                  "process start"]


def test_a_lone_fresh_server_run_that_stands_out_is_named_not_a_spike_of_the_stack(store):
    rng = random.Random(7)
    s3 = S2 + 3600.0
    ids = [add(store, 60.0 * (1 + rng.uniform(-0.004, 0.004)), S1 + 1200 + 60 * i, S1)
           for i in range(6)]
    fresh = add(store, 45.0, S2 + 20, S2)  # a restart, one run, then another restart
    ids += [add(store, 60.0 * (1 + rng.uniform(-0.004, 0.004)), s3 + 900 + 60 * i, s3)
            for i in range(6)]
    h = history(store, SERIES).history
    assert [h.points[i].key for i in h.spikes] == [f"run {fresh}"]
    assert h.changes == []
    assert any(f"run {fresh} (fresh server, not a spike of the stack)" in n for n in h.notes)


def test_the_html_timeline_marks_warm_up_runs_and_change_points_with_a_legend(store):
    ids = restart_history(store, after=50.0, draft_after=4)
    r = history(store, SERIES)
    plot = render.timeline(r)
    bands = [m for m in plot.marks if m.kind == "band"]
    lines = [m for m in plot.marks if m.kind == "line"]
    assert len(bands) == 1 and f"runs {ids[8]}–{ids[11]}" in bands[0].label
    assert len(lines) == 1 and f"run {ids[7]} and run {ids[8]}" in lines[0].label
    page = render.html(r)
    assert 'class="vmark band server"' in page and 'class="vmark line change"' in page
    assert render.BAND_LEGEND in html.unescape(page)
    assert render.LINE_LEGEND in html.unescape(page)
    assert "<h3>Server state</h3>" in page and "[fresh, server warm-up]" in page
    # no warming run, no change: neither mark nor its legend
    with open_store(store.path + ".flat") as flat:
        for i in range(8):
            add(flat, 60.0 * (1 + 0.003 * (-1) ** i), S1 + 1200 + 60 * i, S1)
        page = render.html(history(flat, SERIES))
    assert "vmark" not in page and render.LINE_LEGEND not in page
    assert "no fresh-server run, none inside a server warm-up" in page


def test_a_restart_whose_runs_are_all_fresh_counts_them_and_says_so(store):
    """Runs that are all fresh (no warm-up with an end shows): counted in the level after
    the change, and said — nothing is left out on freshness alone."""
    ids = [add(store, 60.0 * v, S1 + 1200 + 60 * i, S1) for i, v in enumerate(LATE[:6])]
    ids += [add(store, 50.0 * v, S2 + 30 + 60 * i, S2, draft=4)
            for i, v in enumerate(LATE[:6])]
    h = history(store, SERIES).history
    (c,) = h.changes
    assert h.warm_up == [] and c.word == "REGRESSION"
    assert c.server is not None and c.server.left_out == () and c.server.measured_from is None
    assert c.server.fresh_after == tuple(f"run {i}" for i in ids[6:])
    assert c.decode.current == pytest.approx(50.0, rel=0.01)
    assert f"runs {ids[6]}–{ids[-1]} after it ran on a server warming up (fresh: its server " \
           "started" in c.server.text()
    assert "counted in the level after it" in c.server.text()
    assert c.server.before == ()  # the runs before it ran on another server: not its warm-up


def test_a_step_late_in_a_long_lived_server_stays_a_change_point(store):
    """One server process, 12 runs at 50 then 12 at 60, hours after its start: Mann–Kendall
    reads the step as a "warm-up" of that process (server_state's rule, marked), but no run
    is fresh, so none is left out and the step is a change point."""
    ids = [add(store, 50.0 * v, S1 + 3600 + 120 * i, S1) for i, v in enumerate(LATE + LATE[:4])]
    ids += [add(store, 60.0 * v, S1 + 7200 + 120 * i, S1) for i, v in enumerate(LATE + LATE[:4])]
    h = history(store, SERIES).history
    assert h.warm_up == []
    (c,) = h.changes
    assert c.after == f"run {ids[12]}" and c.decode.rel == pytest.approx(0.2, abs=0.01)
    assert any(p.server is not None and p.server.in_warmup for p in h.points)


def test_a_change_ending_a_servers_fresh_runs_says_it_may_be_its_warm_up():
    """One server process, its first 3 runs fresh and slower (no warm-up trend tested over
    all its runs): the change after them stands — nothing is left out on freshness alone —
    but says that the runs before it ran on a server warming up; no restart is claimed."""
    from decodescope.verdict.server_state import ServerState

    stack = ("box", "llamacpp", "b1", "gemma", "llama-server")
    pts = []
    for i in range(40):
        since = 30.0 + 120.0 * i
        level = 50.0 if i < 3 else 60.0 * LATE[i % 8]
        pts.append(hi.Point(key=f"run {i + 1}", t=S1 + since, decode=level, stack=stack,
                            server=ServerState(i + 1, since, i + 1, 40, None, False)))
    h = hi.detect(pts)
    (c,) = h.changes
    assert (c.before, c.after) == ("run 3", "run 4") and h.warm_up == []
    assert c.server is not None and c.server.before == ("run 1", "run 2", "run 3")
    assert c.server.fresh_after == () and c.server.left_out == ()
    assert c.server.text() == ("runs 1–3 before it ran on a server warming up: this change may "
                               "be the end of a server warm-up (the server's state), not the "
                               "stack's")
    assert [hi.server_mark(p.server) for p in pts[:6]] == ["fresh"] * 5 + [""]


def test_a_warm_up_that_leaves_too_few_runs_after_it_is_counted_and_the_restart_seen(store):
    # As measured on the real llama.cpp (tests/test_e2e_history_llamacpp.py, a loaded host):
    # a launch of 6 runs whose first 4 climb, then a restart with another flag. Leaving the 4
    # out would leave 2 runs of the first launch — too few for a level — and hide the stack
    # change at the restart; they are counted (marked), and the change is found there.
    ids = [add(store, 60.0 * w, S1 + 30 + 40 * i, S1) for i, w in enumerate(WARMUP)]
    ids += [add(store, 60.0 * v, S1 + 200 + 40 * i, S1) for i, v in enumerate(LATE[:2])]
    ids += [add(store, 40.0 * v, S2 + 900 + 60 * i, S2, 4) for i, v in enumerate(LATE[:6])]
    h = history(store, SERIES).history
    assert h.warm_up == []  # nothing left out: the first server keeps 2 runs after its warm-up
    firsts = [p.server for p in h.points[:4]]
    assert all(s is not None and s.in_warmup and not s.left_out for s in firsts)
    (c,) = [c for c in h.changes if c.index == 6]
    assert c.word == "REGRESSION" and c.stack_changed is True, c
