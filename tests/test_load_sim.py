"""Load shape options against the simulator: each option is a caliber element, and the stored
trials hold what the option promises (numbers are simulated; only invariants are asserted)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from decodescope.caliber.derive import derive_caliber
from decodescope.caliber.resolve import resolve
from decodescope.caliber.spec import DEFAULT_RATE_REQUESTS, MAX_CONCURRENCY, element_table
from decodescope.cli.main import main
from decodescope.probe.load_shape import arrival_gaps
from decodescope.records.stored_run import StoredRun, StoredTrial
from decodescope.sim import SimConfig, SimServer
from decodescope.store import runs as sr
from decodescope.store.connect import open_store

pytestmark = pytest.mark.timeout(180)

CAL = "demo-code-rewrite"
FAST = ["--no-fingerprint", "--scrape-interval", "0.1", "--warmup", "0"]


@contextmanager
def sim(time_scale: float = 0.05) -> Iterator[str]:
    handle = SimServer(SimConfig(time_scale=time_scale, seed=5)).start_in_thread()
    try:
        yield handle.url
    finally:
        handle.stop()


def probe(url: str, store: str, *args: str) -> int:
    return main(["probe", url, "--caliber", CAL, "--store", store, *FAST, "--json", *args])


def max_in_flight(trial: StoredTrial) -> int:
    events = sorted([(r.t_send_s, 1) for r in trial.requests]
                    + [(r.t_done_s or r.t_send_s, -1) for r in trial.requests],
                    key=lambda e: (e[0], e[1]))
    cur = best = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def stored(store: str, run_id: int) -> StoredRun:
    with open_store(store, read_only=True) as st:
        return sr.get_run(st, run_id)


def test_concurrency_and_num_requests_make_closed_loop_trials(tmp_path, capsys):
    store = str(tmp_path / "runs.sqlite")
    with sim() as url:
        assert probe(url, store, "--trials", "2", "--concurrency", "3", "--num-requests", "7") == 0
    doc = json.loads(capsys.readouterr().out)
    run = stored(store, doc["id"])
    assert run.caliber["concurrency"] == 3 and run.caliber["load"]["num_requests"] == 7
    assert [len(t.requests) for t in run.trials] == [7, 7]  # one trial = one load period
    assert all(max_in_flight(t) <= 3 for t in run.trials)
    assert all(t.status == "ok" for t in run.trials)
    lat = doc["distributions"]["latency"]
    assert lat["ttft_s"]["n"] == 14
    for key in ("ttft_s", "ttfot_s", "itl_s", "tpot_s", "e2e_s"):
        d = lat[key]
        assert d["min"] <= d["p50"] <= d["p90"] <= d["p99"] <= d["max"]
    assert doc["headline"]["source"] in ("engine", "client")


def test_request_rate_and_burstiness_send_num_requests_per_trial(tmp_path, capsys):
    store = str(tmp_path / "runs.sqlite")
    with sim() as url:
        assert probe(url, store, "--trials", "2", "--request-rate", "40", "--burstiness", "0.5",
                     "--num-requests", "5", "--concurrency", "4") == 0
    doc = json.loads(capsys.readouterr().out)
    run = stored(store, doc["id"])
    assert run.caliber["load"] == {"request_rate": 40.0, "burstiness": 0.5, "num_requests": 5,
                                   "duration_s": None}
    assert [len(t.requests) for t in run.trials] == [5, 5]
    assert all(max_in_flight(t) <= 4 for t in run.trials)
    assert run.meta["load"]["request_rate"] == 40.0


def test_duration_stops_sending_after_the_period(tmp_path, capsys):
    store = str(tmp_path / "runs.sqlite")
    with sim() as url:
        assert probe(url, store, "--trials", "1", "--duration", "0.3", "--concurrency", "2") == 0
    run = stored(store, json.loads(capsys.readouterr().out)["id"])
    t = run.trials[0]
    first = min(r.t_send_s for r in t.requests)
    assert len(t.requests) >= 2
    assert all(r.t_send_s - first < 0.3 for r in t.requests)


def test_base_url_with_v1_works_and_warmup_is_not_counted(tmp_path, capsys):
    store = str(tmp_path / "runs.sqlite")
    with sim() as url:
        code = main(["probe", url + "/v1/", "--caliber", CAL, "--store", store, "--trials", "1",
                     "--no-fingerprint", "--no-scrape", "--warmup", "2"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "prompt ? tokens" not in captured.err and "tokens (tokenize)" in captured.err
    run = stored(store, 1)
    assert len(run.trials) == 1 and len(run.trials[0].requests) == 1  # warm-ups not stored
    assert run.meta["warmup"] == 2


def test_each_load_option_changes_the_identity_and_the_diff_names_it():
    base = resolve(CAL)
    variants = {
        "concurrency": derive_caliber(base, concurrency=4),
        "request rate": derive_caliber(base, request_rate=2.0),
        "requests per trial": derive_caliber(base, num_requests=9),
        "trial duration": derive_caliber(base, duration_s=5.0),
    }
    rows = dict(element_table(base))
    for element, cal in variants.items():
        assert cal.identity != base.identity, element
        assert dict(element_table(cal))[element] != rows[element], element
    bursty = derive_caliber(base, request_rate=2.0, burstiness=0.5)
    assert bursty.identity != variants["request rate"].identity
    assert len(element_table(bursty)) == len(element_table(base))  # the diff zips rows
    assert derive_caliber(base).identity == base.identity  # no option: same caliber
    rate = variants["request rate"]
    assert rate.concurrency == MAX_CONCURRENCY and rate.load.num_requests == DEFAULT_RATE_REQUESTS


def test_caliber_diff_in_triage_names_the_load(tmp_path, capsys):
    from decodescope.verdict.side import Side
    from decodescope.verdict.triage import compare_calibers

    base = resolve(CAL)
    other = derive_caliber(base, concurrency=8, num_requests=16)

    def side(c: object) -> Side:
        return Side(name="x", kind="run", unit_name="trial", units=(), source="", caliber=c,  # type: ignore[arg-type]
                    caliber_ref=c.ref, caliber_identity=c.identity)  # type: ignore[attr-defined]

    cmp = compare_calibers(side(base), side(other))
    assert cmp.same is False
    changed = {r.element for r in cmp.rows if not r.same}
    assert {"concurrency", "requests per trial"} <= changed


def test_arrival_gaps_are_reproducible_with_the_requested_mean():
    a = [g for g, _ in zip(arrival_gaps(4.0, 1.0, seed=1), range(4000), strict=False)]
    b = [g for g, _ in zip(arrival_gaps(4.0, 1.0, seed=1), range(4000), strict=False)]
    assert a == b
    assert sum(a) / len(a) == pytest.approx(0.25, rel=0.1)
    bursty = [g for g, _ in zip(arrival_gaps(4.0, 0.25, seed=1), range(4000), strict=False)]
    assert sum(bursty) / len(bursty) == pytest.approx(0.25, rel=0.15)


def test_bad_load_options_are_usage_errors(tmp_path, capsys):
    store = str(tmp_path / "runs.sqlite")
    assert main(["probe", "http://127.0.0.1:9", "--caliber", CAL, "--store", store,
                 "--burstiness", "0.5"]) == 2
    assert "burstiness needs" in capsys.readouterr().err


def test_ctrl_c_names_the_run_it_kept(tmp_path, capsys, monkeypatch):
    from decodescope.run import runner

    real = runner.count_tokens
    calls = [0]

    def interrupt_second(*a: object, **k: object) -> object:
        calls[0] += 1
        if calls[0] == 2:
            raise KeyboardInterrupt
        return real(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(runner, "count_tokens", interrupt_second)
    store = str(tmp_path / "runs.sqlite")
    with sim() as url:
        code = main(["probe", url, "--caliber", CAL, "--store", store, "--trials", "3", *FAST])
    err = capsys.readouterr().err
    assert code == 130
    assert "kept run 1 (1 of 3 trials completed)" in err and "runs show 1" in err
    assert stored(store, 1).status == "interrupted"


def test_sweep_over_concurrency_prints_table_csv_and_plots(tmp_path, capsys):
    store = str(tmp_path / "runs.sqlite")
    plot = tmp_path / "sweep.html"
    with sim() as url:
        code = main(["sweep", url, "--caliber", CAL, "--concurrency", "1,3", "--trials", "2",
                     "--num-requests", "3", "--store", store, "--no-fingerprint",
                     "--scrape-interval", "0.1", "--format", "csv", "--plot", str(plot)])
        out = capsys.readouterr().out
        assert code == 0
        lines = out.strip().splitlines()
        head = lines[0].split(",")
        assert {"load", "decode_rate_tok_s", "output_throughput_all_tok_s", "ttft_p50_ms",
                "ttft_p90_ms", "ttft_p99_ms", "itl_p99_ms"} <= set(head)
        assert [float(ln.split(",")[head.index("load")]) for ln in lines[1:]] == [1.0, 3.0]
        html = plot.read_text()
        for pid in ("decode-vs-load", "throughput-vs-load", "ttft-vs-load", "itl-vs-load"):
            assert f'data-plot="{pid}" data-state="data"' in html
        code = main(["sweep", url, "--caliber", CAL, "--request-rate", "20,40", "--trials", "1",
                     "--num-requests", "3", "--store", store, "--no-fingerprint", "--no-scrape",
                     "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["axis"] == "request_rate"
    assert [p["load"] for p in doc["points"]] == [20.0, 40.0]
    assert all(p["created_at"].endswith("+00:00") for p in doc["points"])
