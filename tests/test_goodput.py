"""Goodput: SLO parsing, the per-request check, and `probe --slo` against the simulator."""

import pytest

from decodescope.analysis.goodput import goodput, goodput_line, misses, tpot_s
from decodescope.caliber.resolve import resolve
from decodescope.caliber.slo import PRESETS, parse_slo
from decodescope.caliber.spec import SloSpec, element_table
from decodescope.cli.main import main
from decodescope.errors import UsageError
from decodescope.exitcodes import ExitCode
from decodescope.records.request_metrics import compute
from decodescope.records.trace import Chunk, RequestTrace
from decodescope.sim import SimConfig, SimServer
from decodescope.store import runs as sr
from decodescope.store.connect import open_store


def trace(ttft: float, gap: float, tokens: int, error: str | None = None) -> RequestTrace:
    """A request sent at 0, first token at ttft, then one token every gap seconds."""
    chunks = tuple(Chunk(ttft + i * gap, content="x", tokens=1) for i in range(tokens))
    return RequestTrace(0.0, 0.0, chunks, 200, 10, tokens, 0, "length", error=error,
                        t_done_s=ttft + (tokens - 1) * gap)


def test_parse_limits_units_and_presets():
    assert parse_slo("ttft=200ms,tpot=50ms") == SloSpec(ttft_ms=200, tpot_ms=50)
    assert parse_slo("e2e=10s, ttft=0.5s") == SloSpec(ttft_ms=500, e2e_ms=10_000)
    assert parse_slo("tpot=40") == SloSpec(tpot_ms=40)  # ms without a unit
    p = parse_slo("mlperf-llama2-70b")
    assert (p.ttft_ms, p.tpot_ms, p.preset) == (*PRESETS["mlperf-llama2-70b"], "mlperf-llama2-70b")
    for bad in ("ttft=fast", "itl=3ms", "ttft=1ms,ttft=2ms", "ttft=0ms", ""):
        with pytest.raises(UsageError):
            parse_slo(bad)


def test_slo_is_an_element_but_not_in_the_identity():
    cal = resolve("demo-code-rewrite")
    with_slo = cal.with_(slo=parse_slo("ttft=200ms,tpot=50ms"))
    rows = dict(element_table(with_slo))
    assert rows["SLO"] == "ttft ≤ 200 ms, tpot ≤ 50 ms" and dict(element_table(cal))["SLO"] == "-"
    assert with_slo.identity == cal.identity
    back = type(cal).from_dict(with_slo.to_dict())
    assert back.slo == with_slo.slo


def test_per_request_check():
    m = compute(trace(0.1, 0.02, 11))  # TTFT 100 ms, TPOT 20 ms, e2e 300 ms
    assert tpot_s(m) == pytest.approx(0.02)
    lim = goodput([[m]], {"ttft_ms": 150, "tpot_ms": 25})
    assert lim is not None and lim["met"] == 1
    from decodescope.analysis.goodput import Limits

    assert misses(m, Limits(ttft_ms=50)) == ["ttft"]
    assert misses(m, Limits(tpot_ms=10, e2e_ms=200)) == ["tpot", "e2e"]
    assert misses(None, Limits(ttft_ms=1e9)) == ["failed"]


def test_share_is_over_all_requests_and_pooled_over_trials():
    fast, slow = compute(trace(0.1, 0.02, 11)), compute(trace(0.4, 0.02, 11))
    g = goodput([[fast, slow], [fast, None]], {"ttft_ms": 200})
    assert g is not None
    assert (g["requests"], g["met"], g["share"]) == (4, 2, 0.5)
    assert g["per_trial"] == [0.5, 0.5]
    assert g["missed_by_limit"] == {"ttft": 1, "failed": 1}
    assert "2 of 4 requests met ttft ≤ 200 ms" in (goodput_line(g) or "")
    assert goodput([[fast]], None) is None and goodput([], {"ttft_ms": 1}) is None


def test_probe_slo_stores_goodput_and_two_slos_differ(tmp_path, capsys):
    db = str(tmp_path / "s.sqlite")
    shares = []
    with SimServer(SimConfig(seed=2, time_scale=0.05)).start_in_thread() as sim:
        for slo in ("ttft=10s,tpot=1s", "tpot=0.01ms"):
            rc = main(["probe", sim.url, "--caliber", "demo-code-rewrite", "--trials", "2",
                       "--store", db, "--no-fingerprint", "--no-scrape", "--slo", slo])
            assert rc == ExitCode.OK
            out = capsys.readouterr().out
            assert "goodput (SLO)" in out
            with open_store(db) as st:
                run = sr.get_run(st, sr.resolve_run_id(st, "last"), with_traces=False)
            g = run.result["goodput"]
            assert g["requests"] == 2 and run.caliber["slo"] is not None
            shares.append(g["share"])
    # the simulator's TPOT: 25 simulated ms a step of ~4 tokens x 0.05 real s per simulated s
    assert shares == [1.0, 0.0]


def test_probe_bad_slo_is_a_usage_error(capsys):
    rc = main(["probe", "http://127.0.0.1:9", "--caliber", "demo-code-rewrite", "--slo", "x=1"])
    assert rc == ExitCode.USAGE
    assert "Traceback" not in capsys.readouterr().err


def test_triage_shows_goodput_beside_the_verdict(tmp_path, capsys):
    db = str(tmp_path / "s.sqlite")
    with SimServer(SimConfig(seed=4, time_scale=0.05)).start_in_thread() as sim:
        for _ in range(2):
            assert main(["probe", sim.url, "--caliber", "demo-code-rewrite", "--trials", "2",
                         "--store", db, "--no-fingerprint", "--no-scrape",
                         "--slo", "ttft=10s"]) == ExitCode.OK
    capsys.readouterr()
    rc = main(["triage", "2", "--baseline", "1", "--store", db])
    out = capsys.readouterr().out
    assert rc in (ExitCode.OK, ExitCode.INCONCLUSIVE)
    assert "goodput (beside the decode verdict" in out
    assert out.count("2 of 2 requests met ttft ≤ 10000 ms") == 2
    rc2 = main(["triage", "2", "--baseline", "1", "--store", db, "--json"])
    import json

    doc = json.loads(capsys.readouterr().out)
    assert rc2 == rc and doc["goodput"]["comparable"] is True and "verdict" in json.dumps(doc)


def test_runs_show_slo_recomputes_goodput_of_a_stored_probe(tmp_path, capsys):
    db = str(tmp_path / "s.sqlite")
    with SimServer(SimConfig(seed=6, time_scale=0.05)).start_in_thread() as sim:
        assert main(["probe", sim.url, "--caliber", "demo-code-rewrite", "--trials", "2",
                     "--store", db, "--no-fingerprint", "--no-scrape"]) == ExitCode.OK
    capsys.readouterr()
    import json

    shares = []
    for slo in ("mlperf-llama2-70b", "tpot=0.01ms"):
        assert main(["runs", "show", "1", "--slo", slo, "--store", db, "--json"]) == 0
        shares.append(json.loads(capsys.readouterr().out)["result"]["goodput"]["share"])
    assert shares == [1.0, 0.0]
    with open_store(db) as st:  # not stored
        assert "goodput" not in sr.get_run(st, 1, with_traces=False).result


def test_sweep_goodput_names_the_highest_load_that_meets_the_target():
    from decodescope.analysis.goodput import sweep_goodput, sweep_lines

    recs = [{"share": 1.0, "requests": 4, "met": 4, "slo": {"ttft_ms": 40}},
            {"share": 0.99, "requests": 100, "met": 99, "slo": {"ttft_ms": 40}},
            {"share": 0.5, "requests": 8, "met": 4, "slo": {"ttft_ms": 40}}]
    g = sweep_goodput("concurrency", [1, 4, 16], recs)
    assert g is not None and g["highest_load_meeting"] == 4
    assert sweep_goodput("concurrency", [1, 4, 16], recs, target=1.0)["highest_load_meeting"] == 1
    none = sweep_goodput("concurrency", [16], recs[2:])
    assert none is not None and none["highest_load_meeting"] is None
    assert "none of the loads" in sweep_lines(none)[1]
    assert sweep_goodput("concurrency", [1], [None]) is None


def test_load_sweep_with_slo_reports_goodput_per_point(tmp_path, capsys):
    import json

    db = str(tmp_path / "s.sqlite")
    with SimServer(SimConfig(seed=8, time_scale=0.05)).start_in_thread() as sim:
        rc = main(["sweep", sim.url, "--caliber", "demo-code-rewrite", "--concurrency", "1,2",
                   "--trials", "1", "--slo", "ttft=10s", "--store", db, "--no-fingerprint",
                   "--no-scrape", "--json"])
    assert rc == 0
    g = json.loads(capsys.readouterr().out)["goodput"]
    assert [p["load"] for p in g["points"]] == [1, 2] and g["highest_load_meeting"] == 2
    assert [p["requests"] for p in g["points"]] == [1, 2]
