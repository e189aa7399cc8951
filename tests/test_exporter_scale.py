"""The exporter at fleet scale: bounded concurrency (max_workers, the queue served), shards of a
fleet across instances, and the consecutive-regression counter the alert rules need
(docs/exporter.md). Scripted runners through the library seam: no timing asserts."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from test_exporter_fleet import of, samples

from decodescope.cli.main import main
from decodescope.errors import UsageError
from decodescope.exporter import CheckSpec, Exporter, Outcome, parse_config
from decodescope.exporter.config import default_max_workers, parse_shard, shard_of

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


def fleet(n: int, **exporter: object) -> dict:
    return {"exporter": dict(exporter),
            "check": [{"name": f"ep{i:03d}", "baseline": "b",
                       "url": f"http://gpu-{i:03d}:8000", "every_s": 1} for i in range(n)]}


class Meter:
    """A scripted runner that records how many checks run at once."""

    def __init__(self, meet: int = 0, on_meet=None) -> None:
        self.lock = threading.Lock()
        self.active = 0
        self.peak = 0
        self.runs: dict[str, int] = {}
        # the first `meet` runs wait for each other: proof that that many ran at once
        self.barrier = threading.Barrier(meet, action=on_meet, timeout=60) if meet else None
        self.met = 0

    def __call__(self, spec: CheckSpec, store: str | None) -> Outcome:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.runs[spec.name] = self.runs.get(spec.name, 0) + 1
            first = self.barrier is not None and self.met < self.barrier.parties
            self.met += first
        try:
            if first:
                assert self.barrier is not None
                self.barrier.wait()
            time.sleep(0.002)
        finally:
            with self.lock:
                self.active -= 1
        return Outcome(time.time(), 0.002, verdict="OK", exit_code=0, decode_rate=100.0,
                       source="client")


def test_a_round_of_30_checks_never_runs_more_than_max_workers_and_the_queue_is_served():
    cfg = parse_config(fleet(30, max_workers=3))
    assert cfg.workers == 3
    seen: dict[str, object] = {}
    exp: Exporter | None = None

    def at_meet() -> None:  # the three first runs are all running; nothing else has started
        assert exp is not None
        seen["queue"] = exp.queue_stats()
        seen["text"] = exp.metrics_text()

    meter = Meter(meet=3, on_meet=at_meet)
    exp = Exporter(cfg, runner=meter)
    exp.run_once()
    assert meter.runs == {f"ep{i:03d}": 1 for i in range(30)}  # every check, once
    assert meter.peak == 3 and exp.peak_running == 3  # three at once (the barrier met), never 4
    q = seen["queue"]
    assert (q.max_workers, q.running, q.waiting) == (3, 3, 27)  # type: ignore[attr-defined]
    s = samples(str(seen["text"]))
    assert s["decodescope_fleet_max_workers"][0][1] == 3.0
    assert s["decodescope_fleet_checks_running"][0][1] == 3.0
    assert s["decodescope_fleet_checks_waiting"][0][1] == 27.0
    assert s["decodescope_fleet_queue_wait_seconds"][0][1] >= 0.0
    after = samples(exp.metrics_text())
    assert after["decodescope_fleet_checks_waiting"][0][1] == 0.0
    assert after["decodescope_fleet_checks_running"][0][1] == 0.0
    late = after["decodescope_check_start_lateness_seconds"]
    assert len(late) == 30 and all(v >= 0.0 for _, v in late)
    assert after["decodescope_fleet_checks"] == [({"shard": ""}, 30.0)]
    assert after["decodescope_fleet_checks_configured"][0][1] == 30.0


def test_on_a_schedule_30_due_checks_wait_their_turn_never_more_than_max_workers():
    cfg = parse_config(fleet(30, max_workers=2))
    meter = Meter(meet=2)
    exp = Exporter(cfg, runner=meter).start(serve=False)
    try:
        t_end = time.monotonic() + 120
        while time.monotonic() < t_end:
            with meter.lock:
                if len(meter.runs) == 30 and min(meter.runs.values()) >= 2:
                    break
            time.sleep(0.05)
    finally:
        exp.stop()
    assert len(meter.runs) == 30 and min(meter.runs.values()) >= 2, meter.runs
    assert meter.peak == 2 and exp.peak_running == 2


def test_max_workers_default_config_and_flag():
    assert parse_config(fleet(2)).workers == default_max_workers() == min(4, default_max_workers())
    for bad in (0, -1, 1.5, True, "4", 100000):
        with pytest.raises(UsageError, match="max_workers must be a whole number") as e:
            parse_config(fleet(2, max_workers=bad), "f.toml")
        assert "f.toml [exporter] max_workers" in str(e.value.where)


def test_shards_split_a_fleet_exactly_once_by_a_stable_hash():
    names = [f"gpu-{i}" for i in range(200)]
    for n in (1, 2, 3, 7):
        owners = {m: [i for i in range(n) if parse_shard(f"{i}/{n}", "t").holds(m)]
                  for m in names}
        assert all(len(v) == 1 for v in owners.values())  # every check in exactly one shard
        assert all(0 <= shard_of(m, n) < n for m in names)
    # stable: SHA-256 of the name, never Python's salted hash()
    want = int.from_bytes(hashlib.sha256(b"gpu-7").digest()[:8], "big") % 3
    assert shard_of("gpu-7", 3) == want
    cfg = parse_config(fleet(30))
    parts = [cfg.sharded(parse_shard(f"{i}/2", "t")) for i in range(2)]
    got = sorted(c.name for p in parts for c in p.checks)
    assert got == sorted(c.name for c in cfg.checks) and all(p.fleet_size == 30 for p in parts)
    assert all(p.checks for p in parts)  # 30 names: both shards hold some (the hash spreads)
    # the config key; --shard re-shards from the whole file, never from a shard of it
    a = parse_config(fleet(30, shard="1/2"))
    assert a.checks == parts[1].checks and str(a.shard) == "1/2"
    assert a.sharded(parse_shard("0/2", "t")).checks == parts[0].checks
    for bad in ("2/2", "1/0", "a/b", "1", 1, "-1/2"):
        with pytest.raises(UsageError, match="shard must be"):
            parse_shard(bad, "--shard")


def test_cli_rejects_a_bad_shard_and_max_workers_with_exit_2(tmp_path: Path, capsys):
    f = tmp_path / "fleet.toml"
    f.write_text('[[check]]\nname = "a"\nbaseline = "b"\nurl = "http://127.0.0.1:9"\n')
    assert main(["exporter", "--config", str(f), "--once", "--shard", "3/2"]) == 2
    err = capsys.readouterr().err
    assert "shard must be" in err and "--shard" in err and "Traceback" not in err
    assert main(["exporter", "--config", str(f), "--once", "--max-workers", "0"]) == 2
    err = capsys.readouterr().err
    assert "max_workers must be" in err and "Traceback" not in err


def scripted(verdicts: list[str | None]):
    """A runner answering each run with the next verdict (None: a failed run)."""
    queue = list(verdicts)

    def runner(spec: CheckSpec, store: str | None) -> Outcome:
        v = queue.pop(0)
        if v is None:
            return Outcome(time.time(), 0.1, error_kind="ProbeError", error="endpoint down")
        code = 1 if v.startswith("BELOW") else 3 if v == "INCONCLUSIVE" else 0
        return Outcome(time.time(), 0.1, verdict=v, exit_code=code, decode_rate=90.0,
                       source="client", floor=95.0, floor_given=False)
    return runner


def test_one_slow_run_is_a_point_two_in_a_row_are_a_change():
    cfg = parse_config({"check": [{"name": "a", "baseline": "b", "url": "http://gpu-a:8000"}]})
    verdicts = ["BELOW_BAND", None, "BELOW_FLOOR", "OK", "BELOW_BAND", "INCONCLUSIVE",
                "BELOW_BAND", "BELOW_BAND", "ABOVE_BAND"]
    # a failed run (no verdict) keeps the count; any other verdict resets it
    want = [1, 1, 2, 0, 1, 0, 1, 2, 0]
    exp = Exporter(cfg, runner=scripted(verdicts))
    for n in want:
        exp.run_once()
        s = samples(exp.metrics_text())
        assert of(s, "decodescope_check_consecutive_regressions", "a") == [float(n)]
        assert exp.states["a"].consecutive_regressions == n


def test_runs_that_moved_with_the_fleet_are_not_counted_as_regressions():
    from test_exporter_fleet_rule import judged

    cfg = parse_config(fleet(5))

    def runner(spec: CheckSpec, store: str | None) -> Outcome:
        return judged(-0.08, t=time.time())  # all five down together: the environment

    exp = Exporter(cfg, runner=runner)
    exp.run_once()
    exp.run_once()
    s = samples(exp.metrics_text())
    assert of(s, "decodescope_check_verdict", "ep000", verdict="ENVIRONMENT") == [1.0]
    # a round's first finishers are counted before the fleet is seen (fewer than 4 fresh
    # results); the next round sees the whole fleet move: ENVIRONMENT, reset, never 2 in a row
    assert [st.consecutive_regressions for st in exp.states.values()] == [0] * 5


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian package "
                    "`prometheus`)")
def test_alert_rules_are_valid_and_one_slow_run_never_pages():
    assert PROMTOOL is not None
    ok = subprocess.run([PROMTOOL, "check", "rules", str(DEPLOY / "prometheus-rules.yml")],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # promtool's rule unit tests: one slow run, two in a row, a user's floor (deploy/)
    tested = subprocess.run([PROMTOOL, "test", "rules",
                             str(DEPLOY / "prometheus-rules.test.yml")],
                            capture_output=True, text=True, timeout=60, cwd=DEPLOY)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout + tested.stderr


def test_a_shard_holding_no_check_says_so_and_serves_only_the_exporters_series(tmp_path: Path,
                                                                              capsys):
    f = tmp_path / "fleet.toml"
    f.write_text('[[check]]\nname = "a"\nbaseline = "b"\nurl = "http://127.0.0.1:9"\n')
    empty = 1 - shard_of("a", 2)
    assert main(["exporter", "--config", str(f), "--once", "--shard", f"{empty}/2"]) == 0
    out, err = capsys.readouterr()
    assert f"shard {empty}/2: 0 of the 1 check(s)" in err and "none here" in err
    s = samples(out)
    assert "decodescope_check_runs_total" not in s
    assert s["decodescope_fleet_checks"] == [({"shard": f"{empty}/2"}, 0.0)]
    assert s["decodescope_fleet_checks_configured"] == [({}, 1.0)]
