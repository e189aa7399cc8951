"""Numbers a server sends are checked at the edge (issue 22, part 8): type, sign and range of
`usage`, llama.cpp's `timings` and `/tokenize`. A bad value fails its trial with exit 5 and the
field named; every trace measured before it is kept, the run is closed (never left `running`)
and `runs show`, `report`, `runs export` and `triage` of it still work. JSON exports never
carry NaN or Infinity.

Server: tests/sidefaults.py, breaking the second of three trials.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sidefaults import CHUNKS, SideFaultServer, healthy_usage

from decodescope.cli.common import to_jsonable
from decodescope.edge import MAX_TOKEN_COUNT, count_field, finite_or_none, seconds_field
from decodescope.errors import ProtocolError
from decodescope.exitcodes import ExitCode
from decodescope.store import runs as sr
from decodescope.store.connect import open_store

pytestmark = pytest.mark.timeout(300)

CLI = [sys.executable, "-c", "import sys; from decodescope.cli.main import main; sys.exit(main(sys.argv[1:]))"]
CALIBER = ('name = "side"\nversion = 1\n[prompt]\ntask = "Say hi."\n[output]\nmax_tokens = 32\n'
           'min_tokens = 32\nsteady_state_start = 4\n')
BAD_TRIAL = 1  # 0-based: the first trial is measured and kept, the second meets the bad value


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


def one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith(("error:", "internal error:"))]
    assert len(lines) == 1, err
    return lines[0]


def probe(tmp_path: Path, db: Path, **server: Any) -> subprocess.CompletedProcess[str]:
    cal = tmp_path / "side.toml"
    cal.write_text(CALIBER, encoding="utf-8")
    faults = server.pop("faults", {})
    with SideFaultServer(faults, **server) as srv:
        return cli("probe", srv.url, "--caliber", str(cal), "--store", str(db), "--trials", "3",
                   "--warmup", "0", "--no-scrape", "--no-fingerprint")


def strict_json(text: str) -> Any:
    """JSON as the standard has it: NaN and Infinity are not JSON."""
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in a JSON export")
    return json.loads(text, parse_constant=refuse)


def assert_kept_and_readable(db: Path) -> None:
    """The bad trial's run: closed as failed, the first trial whole, the bad trial's trace
    kept; every read command works on it and its JSON is JSON."""
    with open_store(db, read_only=True) as st:
        run_id = sr.resolve_run_id(st, "last")
        run = sr.get_run(st, run_id)
    assert run.status == "failed"
    assert [t.status for t in run.trials] == ["ok", "failed"]
    good, bad = run.trials[0].requests[0], run.trials[1].requests[0]
    assert good.ok and good.completion_tokens == CHUNKS and len(good.chunks) == CHUNKS
    assert bad.error is not None and len(bad.chunks) >= CHUNKS - 1  # what came is kept
    for n in (bad.completion_tokens, bad.prompt_tokens):
        assert n is None or (type(n) is int and 0 <= n <= MAX_TOKEN_COUNT)
    for args in (["runs", "show", str(run_id)], ["report", str(run_id), "--format", "md"]):
        p = cli(*args, "--store", str(db))
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    for args in (["runs", "export", str(run_id)], ["report", str(run_id), "--format", "json"],
                 ["runs", "show", str(run_id), "--json"]):
        p = cli(*args, "--store", str(db))
        assert p.returncode == 0, p.stderr
        strict_json(p.stdout)


def usage_with(field: str, value: Any) -> Any:
    def usage(i: int) -> dict[str, Any]:
        u: dict[str, Any] = healthy_usage(i)
        if i == BAD_TRIAL:
            if field == "reasoning_tokens":
                u["completion_tokens_details"] = {"reasoning_tokens": value}
            else:
                u[field] = value
        return u
    return usage


@pytest.mark.parametrize("field, value", [
    ("completion_tokens", 10**18),
    ("completion_tokens", 1e12),
    ("completion_tokens", "96"),
    ("completion_tokens", -1_000_000),
    ("completion_tokens", float("nan")),
    ("completion_tokens", float("inf")),
    ("completion_tokens", True),
    ("prompt_tokens", -5),
    ("total_tokens", [1]),
    ("reasoning_tokens", 2.5),
])
def test_bad_usage_fails_its_trial_and_keeps_the_rest(tmp_path, field, value):
    db = tmp_path / "s.sqlite"
    p = probe(tmp_path, db, usage=usage_with(field, value))
    line = one_error_line(p.stderr)
    assert p.returncode == ExitCode.PROTOCOL, p.stderr
    assert f"usage.{'completion_tokens_details.' if field == 'reasoning_tokens' else ''}{field}" in line
    assert "/v1/chat/completions" in line
    assert_kept_and_readable(db)


@pytest.mark.parametrize("choice, field", [
    ({"delta": {"content": 5}}, "content"),
    ({"delta": {"content": {"text": "x"}}}, "content"),
    ({"delta": {"reasoning_content": ["x"]}}, "reasoning"),
    ({"finish_reason": 7}, "finish_reason"),
])
def test_chunk_text_that_is_not_text_fails_its_trial(tmp_path, choice, field):
    db = tmp_path / "s.sqlite"
    p = probe(tmp_path, db, choice=lambda i, n: choice if (i == BAD_TRIAL and n == CHUNKS) else None)
    line = one_error_line(p.stderr)
    assert p.returncode == ExitCode.PROTOCOL, p.stderr
    assert f"a chunk's {field}" in line
    assert_kept_and_readable(db)


def test_count_within_range_but_past_max_tokens_is_refused_before_it_is_kept(tmp_path):
    """50 million tokens is a number, but not one a 32-token request can produce: refused
    when it arrives, so nothing derived from the trace allocates per token (1 GiB limit)."""
    import resource

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    cal = tmp_path / "side.toml"
    cal.write_text(CALIBER, encoding="utf-8")
    db = tmp_path / "s.sqlite"
    with SideFaultServer(usage=usage_with("completion_tokens", 50_000_000)) as srv:
        p = subprocess.run([*CLI, "probe", srv.url, "--caliber", str(cal), "--store", str(db),
                            "--trials", "3", "--warmup", "0", "--no-scrape", "--no-fingerprint"],
                           capture_output=True, text=True, timeout=120, preexec_fn=cap)
    line = one_error_line(p.stderr)
    assert p.returncode == ExitCode.PROTOCOL, p.stderr
    assert "more than max_tokens allows (50000000 tokens by usage)" in line
    assert_kept_and_readable(db)


@pytest.mark.parametrize("field, value", [
    ("predicted_n", float("nan")),
    ("predicted_n", -3),
    ("predicted_ms", float("inf")),
    ("predicted_ms", -1.0),
    ("draft_n_accepted", "7"),
    ("prompt_n", 10**18),
])
def test_bad_timings_fail_their_trial_and_keep_the_rest(tmp_path, field, value):
    def timings(i: int) -> dict[str, Any]:
        t: dict[str, Any] = {"predicted_n": CHUNKS, "predicted_ms": 120.0, "prompt_n": 12,
                             "draft_n": 10, "draft_n_accepted": 6}
        if i == BAD_TRIAL:
            t[field] = value
        return t

    db = tmp_path / "s.sqlite"
    p = probe(tmp_path, db, timings=timings)
    line = one_error_line(p.stderr)
    assert p.returncode == ExitCode.PROTOCOL, p.stderr
    assert f"timings.{field}" in line
    assert_kept_and_readable(db)


def test_healthy_run_with_integral_floats_and_timings_is_complete(tmp_path):
    """The control: whole numbers sent as floats (96.0) are numbers, and nothing fails."""
    def usage(i: int) -> dict[str, Any]:
        return {"prompt_tokens": 12.0, "completion_tokens": float(CHUNKS), "total_tokens": 44}

    db = tmp_path / "s.sqlite"
    p = probe(tmp_path, db, usage=usage,
              timings=lambda i: {"predicted_n": CHUNKS, "predicted_ms": 120.0,
                                 "predicted_per_second": float("inf")})
    assert p.returncode in (ExitCode.OK, ExitCode.CALIBER_MISSED), p.stderr
    with open_store(db, read_only=True) as st:
        run = sr.get_run(st, sr.resolve_run_id(st, "last"))
    assert run.status == "complete" and len(run.trials) == 3
    tr = run.trials[0].requests[0]
    assert tr.completion_tokens == CHUNKS and type(tr.completion_tokens) is int
    assert tr.timings is not None and tr.timings["predicted_per_second"] is None  # inf: null
    p = cli("runs", "export", str(run.id), "--store", str(db))
    strict_json(p.stdout)


@pytest.mark.parametrize("answer", [
    [1, 2, 3],
    lambda body: '"just text"',  # a JSON string, sent as it is
    {"count": "12"},
    {"count": 10**18},
    {"count": -1},
    {"count": 1e12},
    {"tokens": "abc"},
    {"tokens": list(range(100_000))},  # more tokens than the text has bytes
])
def test_bad_tokenize_answer_is_exit_5_naming_it(tmp_path, answer):
    db = tmp_path / "s.sqlite"
    p = probe(tmp_path, db, faults={"/tokenize": answer})
    line = one_error_line(p.stderr)
    assert p.returncode == ExitCode.PROTOCOL, p.stderr
    assert "/tokenize" in line


def test_bad_tokenize_count_mid_run_keeps_the_trials(tmp_path):
    """A stream without usage is counted with /tokenize chunk by chunk; a count that turns
    absurd in the second trial fails it, and both trials' traces are kept."""
    calls = [0]

    def tokenize(body: dict[str, Any]) -> dict[str, Any]:
        calls[0] += 1
        # the prompt once, then CHUNKS chunks per trial: the second trial's chunks go bad
        return {"count": -7 if calls[0] > 1 + CHUNKS else 1}

    db = tmp_path / "s.sqlite"
    p = probe(tmp_path, db, usage=lambda i: None, faults={"/tokenize": tokenize})
    line = one_error_line(p.stderr)
    assert p.returncode == ExitCode.PROTOCOL, p.stderr
    assert "/tokenize count" in line
    with open_store(db, read_only=True) as st:
        run = sr.get_run(st, sr.resolve_run_id(st, "last"))
    assert run.status == "failed"
    assert [t.status for t in run.trials] == ["ok", "failed"]
    assert all(len(t.requests[0].chunks) == CHUNKS for t in run.trials)
    assert run.trials[0].requests[0].extra["chunk_tokens"] == [1] * CHUNKS


def test_triage_of_a_run_with_a_bad_field_works(tmp_path):
    db = tmp_path / "s.sqlite"
    assert probe(tmp_path, db).returncode in (ExitCode.OK, ExitCode.CALIBER_MISSED)
    probe(tmp_path, db, timings=lambda i: {"predicted_n": float("nan") if i == BAD_TRIAL else 32,
                                           "predicted_ms": 100.0})
    p = cli("triage", "2", "--baseline", "1", "--store", str(db))
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode not in (ExitCode.INTERNAL, ExitCode.USAGE), p.stderr


# ---- the checks themselves ---------------------------------------------------------------------

@pytest.mark.parametrize("value", [-1, 10**18, 1e12, "96", float("nan"), float("inf"), True,
                                   2.5, [1], {"n": 1}])
def test_count_field_refuses(value):
    with pytest.raises(ProtocolError) as info:
        count_field(value, "usage.completion_tokens", "http://x/v1/chat/completions")
    assert "usage.completion_tokens" in info.value.cause
    assert info.value.where == "http://x/v1/chat/completions"


def test_count_field_takes_whole_numbers():
    assert count_field(None, "f", "w") is None
    assert count_field(0, "f", "w") == 0
    assert count_field(96.0, "f", "w") == 96 and type(count_field(96.0, "f", "w")) is int
    assert count_field(MAX_TOKEN_COUNT, "f", "w") == MAX_TOKEN_COUNT
    with pytest.raises(ProtocolError):
        count_field(11, "f", "w", limit=10)


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf"), "120", 1e15])
def test_seconds_field_refuses(value):
    with pytest.raises(ProtocolError, match="timings.predicted_ms"):
        seconds_field(value, "timings.predicted_ms", "w", scale=1e-3)


def test_seconds_field_converts_milliseconds():
    assert seconds_field(120, "f", "w", scale=1e-3) == pytest.approx(0.12)
    assert seconds_field(None, "f", "w") is None


def test_exports_have_no_nan_or_infinity():
    doc = {"a": float("nan"), "b": [float("inf"), -float("inf"), 1.5], "c": {"d": 2}}
    for clean in (to_jsonable(doc), finite_or_none(doc)):
        text = json.dumps(clean, allow_nan=False)
        assert strict_json(text) == {"a": None, "b": [None, None, 1.5], "c": {"d": 2}}
    assert math.isnan(doc["a"])  # the input is not changed


def test_a_run_stored_with_bad_numbers_by_an_older_version_still_reads(tmp_path):
    """Before the edge checks, such values reached the store: every read of the run was then
    exit 70. They now read as unknown."""
    import sqlite3

    db = tmp_path / "s.sqlite"
    assert probe(tmp_path, db, timings=lambda i: {"predicted_n": CHUNKS,
                                                   "predicted_ms": 100.0}).returncode == 0
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT id, trace_json FROM requests").fetchall()
    for rid, text in rows:
        tr = json.loads(text)
        tr["completion_tokens"], tr["prompt_tokens"] = "96", -1_000_000
        tr["chunks"]["tokens"] = [10**18] * len(tr["chunks"]["tokens"])
        tr["timings"]["predicted_n"] = float("nan")
        conn.execute("UPDATE requests SET trace_json = ? WHERE id = ?",
                     (json.dumps(tr), rid))  # json writes NaN, as the store did
    conn.execute("UPDATE runs SET result_json = NULL")
    conn.commit()
    conn.close()
    for args in (["runs", "show", "1"], ["report", "1", "--format", "md"],
                 ["runs", "export", "1"], ["triage", "1", "--baseline", "1"]):
        p = cli(*args, "--store", str(db))
        assert "Traceback" not in p.stderr, (args, p.stderr)
        assert p.returncode not in (ExitCode.INTERNAL, ExitCode.USAGE), (args, p.stderr)
        if args[:2] == ["runs", "export"]:
            strict_json(p.stdout)


@pytest.mark.parametrize("version, shown", [("9" * 50_000, "9" * 119 + "…"), (1.5, "1.5"),
                                            ({"v": 1}, "{'v': 1}")])
def test_version_of_any_type_or_length_is_short_text(tmp_path, version, shown):
    db = tmp_path / "s.sqlite"
    p = probe(tmp_path, db, faults={"/version": {"version": version}})
    assert p.returncode == 0, p.stderr
    header = next(ln for ln in p.stderr.splitlines() if ln.startswith("engine:"))
    assert f"engine: vllm {shown} " in header and len(header) < 400
