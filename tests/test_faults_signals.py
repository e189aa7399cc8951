"""Issue 13, item 6: signals. SIGTERM is handled like Ctrl-C (completed trials kept, the run
marked interrupted, exit 143); a run left `running` by a process that no longer exists reads as
abandoned; `runs show` of a failed run says why it failed (docs/faults.md).

The probe runs as a real subprocess against the simulator (in a thread here) and is signalled
once the store holds a committed trial: no timing assertions beyond generous bounds.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from test_faults_server import FaultServer

from decodescope.cli.main import main
from decodescope.console import run_click
from decodescope.exitcodes import ExitCode
from decodescope.records.stored_run import StoredRun
from decodescope.signals import Terminated, sigterm_as_interrupt, stop_signal
from decodescope.sim import SimConfig, SimHandle, SimServer
from decodescope.store import runs as sr
from decodescope.store.connect import open_store

pytestmark = pytest.mark.timeout(240)

BOUND_S = 60  # generous: a probe that ignores the signal runs its 1000 trials (minutes)
MAIN = "import sys\nfrom decodescope.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimHandle]:
    with SimServer(SimConfig(time_scale=0.2)).start_in_thread() as handle:
        yield handle


def small_caliber(tmp_path: Path) -> Path:
    cal = tmp_path / "small.toml"
    cal.write_text('name = "small"\nversion = 1\nconcurrency = 1\n[prompt]\ntask = "Say hi."\n'
                   '[output]\nmax_tokens = 24\n', encoding="utf-8")
    return cal


def start_probe(sim: SimHandle, tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    """A probe of 1000 trials (minutes), as its own process."""
    db = tmp_path / "s.sqlite"
    p = subprocess.Popen(
        [sys.executable, "-c", MAIN, "probe", sim.url, "--caliber", str(small_caliber(tmp_path)),
         "--store", str(db), "--trials", "1000", "--warmup", "0", "--no-scrape",
         "--no-fingerprint", "--timeout", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p, db


def committed_trials(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with open_store(db, read_only=True) as st:
            runs = sr.list_runs(st, limit=1)
            return len(sr.get_run(st, runs[0].id, with_traces=False).trials) if runs else 0
    except Exception:  # the writer is still creating the store
        return 0


def wait_for_trials(p: subprocess.Popen[str], db: Path, n: int = 2) -> None:
    deadline = time.monotonic() + BOUND_S
    while committed_trials(db) < n:
        if p.poll() is not None:
            out, err = p.communicate()
            pytest.fail(f"probe ended early ({p.returncode}): {err}")
        if time.monotonic() > deadline:
            p.kill()
            p.communicate()
            pytest.fail("no trial was committed within the bound")
        time.sleep(0.05)


def last_run(db: Path) -> StoredRun:
    with open_store(db, read_only=True) as st:
        return sr.get_run(st, sr.resolve_run_id(st, "last"), with_traces=False)


# ---- SIGTERM is Ctrl-C ------------------------------------------------------------------------

def test_sigterm_keeps_trials_marks_the_run_interrupted_and_exits_143(sim, tmp_path, capsys):
    p, db = start_probe(sim, tmp_path)
    try:
        wait_for_trials(p, db)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=BOUND_S)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == ExitCode.TERMINATED == 143, err
    assert "terminated (SIGTERM)" in err and "Traceback" not in err
    run = last_run(db)
    assert run.status == "interrupted"
    assert run.finished_at is not None
    assert run.meta["stop"] == {"signal": "SIGTERM"}
    kept = [t for t in run.trials if t.status == "ok"]
    assert 2 <= len(kept) < 1000
    assert run.result is not None and run.result["client"]["decode_rate"]["n"] == len(kept)

    assert main(["runs", "show", "last", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"run {run.id} · interrupted" in out
    assert "interrupted by SIGTERM" in out
    assert f"trials: {len(kept)} of 1000 completed and kept" in out


def test_sigterm_inside_a_command_is_exit_143_and_the_handler_is_restored(capsys):
    @click.command()
    def cmd() -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
        raise AssertionError("SIGTERM was not handled")

    before = signal.getsignal(signal.SIGTERM)
    t0 = time.monotonic()
    assert run_click(cmd, [], "t") == ExitCode.TERMINATED
    assert time.monotonic() - t0 < 4
    assert "terminated (SIGTERM)" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) == before


def test_sigterm_is_a_keyboard_interrupt_and_ignored_stays_ignored():
    assert issubclass(Terminated, KeyboardInterrupt)
    with pytest.raises(Terminated), sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert stop_signal(Terminated()) == "SIGTERM"
    assert stop_signal(KeyboardInterrupt()) == "SIGINT"
    wrapped = click.exceptions.Abort()
    wrapped.__cause__ = Terminated()
    assert stop_signal(wrapped) == "SIGTERM"  # click turns interrupts into Abort
    assert stop_signal(ValueError()) is None

    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with sigterm_as_interrupt():
            assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN  # started ignored: stays
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_ctrl_c_stays_130(capsys):
    @click.command()
    def cmd() -> None:
        raise KeyboardInterrupt

    assert run_click(cmd, [], "t") == ExitCode.INTERRUPTED == 130
    assert "interrupted" in capsys.readouterr().err


# ---- a killed process: abandoned ----------------------------------------------------------------

def test_killed_probe_leaves_a_run_shown_as_abandoned(sim, tmp_path, capsys):
    p, db = start_probe(sim, tmp_path)
    try:
        wait_for_trials(p, db)
        pid = p.pid
        p.kill()  # SIGKILL: no handler runs, the store still says `running`
        p.communicate(timeout=BOUND_S)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    with open_store(db, read_only=True) as st:
        stored = st.conn.execute("SELECT status FROM runs").fetchone()[0]
    assert stored == "running"  # the store is not rewritten by readers
    run = last_run(db)
    assert run.status == sr.ABANDONED
    assert run.meta["writer"]["pid"] == pid and run.meta["writer"]["host"] == socket.gethostname()
    assert f"pid {pid}" in (run.status_note or "") and "no longer exists" in (run.status_note or "")
    kept = sum(1 for t in run.trials if t.status == "ok")
    assert kept >= 2

    assert main(["runs", "show", "last", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"run {run.id} · abandoned" in out
    assert f"abandoned: its probe process (pid {pid}" in out
    assert f"trials: {kept} of 1000 completed and kept" in out
    # the numbers of the completed trials, not dashes
    decode = next(ln for ln in out.splitlines() if ln.startswith("decode rate"))
    assert f"(n={kept})" in decode

    assert main(["runs", "show", "last", "--store", str(db), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "abandoned" and "no longer exists" in doc["status_note"]
    assert main(["runs", "list", "--store", str(db)]) == 0
    assert " abandoned " in capsys.readouterr().out


def test_a_live_writer_keeps_its_run_running(tmp_path):
    with open_store(tmp_path / "s.sqlite") as st:
        rid = sr.create_run(st, url="http://127.0.0.1:1", model="m", engine="vllm", caliber=None,
                            caliber_ref="c@1", caliber_identity="abc", labels={})
        run = sr.get_run(st, rid)
    assert run.status == "running" and run.status_note is None
    assert run.meta["writer"]["pid"] == os.getpid()


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait(timeout=30)
    return p.pid


def test_writer_gone_rules():
    me = sr.writer_identity()
    assert sr.writer_gone(me) is None
    assert sr.writer_gone(None) is None  # runs written before writers were recorded
    assert sr.writer_gone({"pid": "x"}) is None
    # another host: its processes cannot be seen from here
    assert sr.writer_gone({**me, "pid": dead_pid(), "host": "elsewhere.example"}) is None
    gone = sr.writer_gone({**me, "pid": dead_pid()})
    assert gone is not None and "no longer exists" in gone
    if me["boot_id"]:
        assert "rebooted" in (sr.writer_gone({**me, "boot_id": "another-boot"}) or "")
    # a pid reused by another process (here: our parent, started at another time)
    parent = {**me, "pid": os.getppid(), "started": 1.0}
    assert "another process" in (sr.writer_gone(parent) or "")
    assert sr.writer_gone({**me, "pid": os.getppid(), "started": None}) is None


# ---- a failed run says why ----------------------------------------------------------------------

def test_runs_show_of_a_failed_run_shows_the_failing_traces_error(tmp_path, capsys):
    db = tmp_path / "s.sqlite"
    with FaultServer("error_endless") as srv:
        rc = main(["probe", srv.url, "--caliber", "demo-code-rewrite", "--store", str(db),
                   "--no-scrape", "--no-fingerprint", "--trials", "1", "--warmup", "0"])
    assert rc == ExitCode.PROTOCOL
    capsys.readouterr()
    assert main(["runs", "show", "last", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("failed:"))
    assert "server error HTTP 500" in line and "(trial 1, request 1)" in line
    assert main(["runs", "show", "last", "--store", str(db), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "failed"
    assert "HTTP 500" in doc["failure"]["error"] and doc["failure"]["trial"] == 1
    assert doc["meta"]["stop"]["error_kind"] == "ServerError"


def test_a_failure_outside_any_trace_is_shown_from_the_runs_stop_record(tmp_path):
    with open_store(tmp_path / "s.sqlite") as st:
        rid = sr.create_run(st, url=None, model=None, engine=None, caliber=None,
                            caliber_ref="c@1", caliber_identity="abc", labels={})
        run = sr.get_run(st, rid)
        sr.update_run(st, rid, status="failed",
                      meta={**run.meta, "stop": {"error": "boom (x)", "error_kind": "OSError"}})
        run = sr.get_run(st, rid, with_traces=False)
    assert run.failure == {"error": "boom (x)", "error_kind": "OSError"}
    from decodescope.report.text import render_run

    assert "failed: boom (x)" in render_run(run)
