"""One record per number (issue 32, item 4): every output of a stored run renders the run's
Quantity records (analysis.run_quantities.quantities_of) — `runs list`, `runs show`, the Markdown and
JSON reports, the CSV export and the demos' side by side show one MAL and one decode rate under
one statistic; a decode-rate split always closes; a stored run is never called windows."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

import pytest
from test_triage_support import seed_windows, store_run, trial

from decodescope.cli.main import main
from decodescope.records.quantity import Quantity
from decodescope.store import runs as sr
from decodescope.store.connect import open_store
from decodescope.store.db import Store
from decodescope.verdict.rate_change import Decomposition, carrier_why
from decodescope.verdict.side import Side, Unit
from decodescope.verdict.side_from_runs import side_from_runs
from decodescope.verdict.side_from_windows import side_from_windows
from decodescope.verdict.stats import relative_change
from decodescope.verdict.triage import triage

T0 = 1_789_000_000.0
# The engine's pooled counts over the run's windows: what the run reports when no trial has a
# per-trial engine decode rate (one statistic for the engine's column). The per-trial MALs
# (2.00, 2.20, 2.40: median 2.20) are what the old `runs list` and CSV showed instead.
POOL = {"decode_rate_per_request": 61.0, "mal": 2.5, "step_rate": 24.4, "tokens_per_step": 2.5,
        "windows": 6, "drafts": 600, "generation_tokens": 1500}


def _pooled_run(st: Store) -> int:
    trials = [{**trial(d, m), "engine_decode_rate": None, "engine_tokens_per_step": m,
               "ttft_s": 0.2, "output_tokens": 256, "requests": 1}
              for d, m in ((58.0, 2.0), (60.0, 2.2), (62.0, 2.4))]
    rid = store_run(st, "chat-short-3k", trials)
    res = sr.get_run(st, rid).result or {}
    sr.update_run(st, rid, status="complete", result={**res, "engine": {"prometheus": POOL}})
    return rid


def _out(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    out = capsys.readouterr().out
    assert code == 0, out
    return out


def test_every_output_shows_the_runs_one_mal_and_decode_rate(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]):
    store = str(tmp_path / "runs.sqlite")
    with open_store(store) as st:
        rid = _pooled_run(st)
    # runs list --json: the record itself
    listed = json.loads(_out(capsys, ["runs", "list", "--store", store, "--json"]))
    row = next(r for r in listed if r["id"] == rid)
    mal, decode = row["quantities"]["mal"], row["quantities"]["decode_rate"]
    assert mal["value"] == pytest.approx(2.5) and mal["statistic"] == "pooled counts"
    assert row["mal"] == pytest.approx(2.5)  # was 2.2: the per-trial median, another statistic
    assert row["mal_statistic"] == "pooled counts of 6 engine windows"
    assert decode["value"] == pytest.approx(60.0) and decode["statistic"] == "median over trials"
    assert row["decode_rate"] == pytest.approx(60.0)
    assert row["decode_statistic"] == "median over 3 trials"
    # runs list (text): the same number, the pooled count marked
    text = _out(capsys, ["runs", "list", "--store", store])
    assert "2.50 pooled" in text and "60.0" in text and "2.20" not in text
    # runs show --json and text
    shown = json.loads(_out(capsys, ["runs", "show", str(rid), "--store", store, "--json"]))
    assert shown["quantities"]["mal"] == mal and shown["quantities"]["decode_rate"] == decode
    show_text = _out(capsys, ["runs", "show", str(rid), "--store", store])
    assert "2.50 (pooled counts of 6 engine windows)" in show_text
    assert "60.0 tok/s median (n=3)" in show_text
    # report --format json: the run section and the side-by-side row carry the same record
    rep = json.loads(_out(capsys, ["report", str(rid), "--store", store, "--format", "json"]))
    section = rep["runs"][0]
    assert section["quantities"]["mal"] == mal and section["quantities"]["decode_rate"] == decode
    sbs = rep["side_by_side"][0]
    assert sbs["mal"] == "2.50 (pooled counts of 6 engine windows)"
    assert sbs["decode"].startswith("60.0 tok/s median (n=3)")
    # report --format md: every MAL in the document is that one number under that statistic
    md = _out(capsys, ["report", str(rid), "--store", store, "--format", "md"])
    sbs_row = md.split("| caliber | decode tokens/s | MAL | source |")[1].splitlines()[2]
    run_mal = next(line for line in md.splitlines() if line.startswith("| MAL |"))
    assert sbs_row.split(" | ")[2] == "2.50 (pooled counts of 6 engine windows)", sbs_row
    assert sbs_row.split(" | ")[1] == "60.0 tok/s median (n=3) (client)", sbs_row
    assert run_mal == "| MAL | — | 2.50 (pooled counts of 6 engine windows) |", run_mal
    assert "2.00–2.40" not in md, md  # the trials' range, unnamed, no longer beside it
    # runs export (JSON): the same records
    exported = json.loads(_out(capsys, ["runs", "export", str(rid), "--store", store]))
    assert exported["run"]["quantities"]["mal"] == mal
    assert exported["run"]["quantities"]["decode_rate"] == decode
    # CSV export: the same values, the statistic in its own column
    rows = list(csv.DictReader(io.StringIO(_out(
        capsys, ["runs", "export", str(rid), "--store", store, "--format", "csv"]))))
    assert float(rows[0]["mal"]) == pytest.approx(2.5)  # was 2.2
    assert rows[0]["mal_statistic"] == "pooled counts of 6 engine windows"
    assert float(rows[0]["decode_rate_tok_s"]) == pytest.approx(60.0)
    assert rows[0]["decode_rate_statistic"] == "median over 3 trials"
    assert float(rows[0]["decode_rate_engine_tok_s"]) == pytest.approx(61.0)
    assert rows[0]["decode_rate_engine_statistic"] == "pooled counts of 6 engine windows"


def test_demo_side_by_side_renders_the_same_records(tmp_path: Path):
    from decodescope.cli.demo.parts import numbers, side_by_side

    with open_store(tmp_path / "runs.sqlite") as st:
        run = sr.get_run(st, _pooled_run(st))
    n = numbers(run)
    assert n["mal"] == pytest.approx(2.5) and n["client_decode"] == pytest.approx(60.0)
    assert n["engine_decode"] == pytest.approx(61.0) and n["speculative"] is True
    line = side_by_side([n]).splitlines()[1]
    assert "2.50p" in line and "61.0p" in line and "60.0" in line


# -- the decomposition closes -----------------------------------------------------------------
def _terms(text: str) -> tuple[float, list[float]]:
    """ln(D2/D1) and the printed terms of the split, from the evidence's equation."""
    total = float(re.search(r"ln\(D2/D1\) = ([+-][0-9.]+)", text).group(1))  # type: ignore[union-attr]
    rest = text.split(" = ", 2)[2]
    return total, [float(x) for x in re.findall(r"([+-][0-9]+\.[0-9]{3})", rest)]


def _side(name: str, units: list[tuple[float, float, float, float]]) -> Side:
    """A run side of per-trial (client decode, MAL, tokens per step, step rate)."""
    return Side(name, "run", "trial", tuple(
        Unit(f"t{i}", decode_rate=d, engine_decode_rate=s * t, mal=m, tokens_per_step=t,
             step_rate=s) for i, (d, m, t, s) in enumerate(units)), source=name,
        caliber_ref="x@1", caliber_identity="abc")


def test_partial_drafting_split_uses_tokens_per_step_and_closes():
    """The real-vLLM demo's pair: code (every step drafts, but a few steps without a draft:
    MAL 3.5, 3.3 tokens per step) → prose (drafting on 3 % of steps: MAL 1.05 on the drafted
    steps, 1.0015 tokens per step). Neither side's tokens per step sits 10 % under its MAL, so
    the old rule split by MAL and printed terms that did not add up; D = S × T holds, so the
    split reads T — labelled so — and adds up to ln(D2/D1)."""
    code = _side("code", [(102.0, 3.5, 3.3, 31.0), (99.0, 3.45, 3.28, 30.5),
                          (101.0, 3.55, 3.32, 31.2)])
    prose = _side("prose", [(21.0, 1.05, 1.0015, 21.0), (20.5, 1.04, 1.0012, 20.6),
                            (21.3, 1.06, 1.0018, 21.2)])
    assert code.drafts_every_step is True and prose.drafts_every_step is False
    v = triage(code, prose)
    dec = v.decomposition
    assert dec is not None and dec.acceptance_metric == "tokens per step"
    row = next(r for r in v.evidence if r.check == "what carries the delta?")
    assert "ln(T2/T1)" in (row.detail or "") and "tokens per step" in (row.detail or "")
    total, terms = _terms(row.detail or "")
    assert abs(sum(terms) - total) <= 0.0015, row.detail  # within rounding of 3 decimals
    # the MAL split would not have closed: ln(S2/S1) + ln(M2/M1) misses ln(D2/D1)
    log_m = math.log(prose.typical("mal") / code.typical("mal"))  # type: ignore[operator]
    assert abs(total - (dec.log_step or 0.0) - log_m) > 0.01


def test_a_split_that_does_not_close_prints_its_remainder():
    """The client's decode timing against the engine's counts: the remainder is its own term."""
    dec = Decomposition(100.0, 20.0, -1.626, -0.340, -1.249, 0.77, 0.21, 0.02,
                        "per-unit geometric means", "MAL")
    total, terms = _terms(dec.equation())
    assert total == pytest.approx(-1.626)
    assert terms == [pytest.approx(-0.340), pytest.approx(-1.249), pytest.approx(-0.037)]
    assert abs(sum(terms) - total) <= 0.0015
    assert "unexplained" in dec.equation()
    # a split that closes prints no remainder
    closed = Decomposition(100.0, 20.0, -1.589, -0.340, -1.249, 0.79, 0.21, 0.0,
                           "per-unit geometric means", "MAL")
    assert "unexplained" not in closed.equation()


# -- a stored run is worded as a stored run -------------------------------------------------
@pytest.mark.parametrize("window_name, words", [
    ("prom:?job=vllm@23:00..23:30", "Prometheus windows"),
    ("engine.log@23:00..23:30", "log windows"),
])
def test_run_versus_windows_words_the_run_as_a_stored_run(tmp_path: Path, window_name: str,
                                                         words: str):
    with open_store(tmp_path / "runs.sqlite") as st:
        # no engine MAL on the run: the windows' MAL band cannot be matched, so the caliber
        # row says why it is not established, naming both sides' kinds
        rid = store_run(st, "chat-short-3k", [trial(100.0 + i, None, 36.0 + 0.1 * i)
                                               for i in range(4)])
        run_side = side_from_runs([sr.get_run(st, rid)])
    win = side_from_windows(window_name, seed_windows(T0, 20, 2.6, 3.0, seed=3))
    for b, c in ((win, run_side), (run_side, win)):
        v = triage(b, c)
        cal = next(r for r in v.evidence if r.check == "same caliber?")
        assert f"{window_name} is {words} (no caliber), run {rid} a stored run" in cal.result, \
            cal.result
        everything = " ".join([v.headline, *v.explanation, *(r.result + " " + (r.detail or "")
                                                           for r in v.evidence)])
        assert f"run {rid} is" not in everything.replace(f"run {rid} a stored run", "")
        other = "log windows" if words == "Prometheus windows" else "Prometheus windows"
        assert other not in everything, everything


def test_carrier_row_repeats_the_component_rows_judgements():
    """Step rate beyond noise on its own row, MAL the larger share but within noise: the carrier
    row says so from the same Change records — never "no component carries it beyond noise"
    beside a step-rate row that says "beyond noise"."""
    decode = relative_change("decode rate", [100.0, 101.0, 99.0, 100.5], [70.0, 70.5, 69.5, 70.2])
    step = relative_change("step rate", [33.3, 33.4, 33.2, 33.3], [29.0, 29.1, 28.9, 29.0])
    mal = relative_change("MAL", [3.0, 3.02, 2.98, 3.01], [1.5, 3.6, 1.4, 3.3])
    assert decode.changed and step.changed and not mal.changed
    name, why = carrier_why(decode, [("MAL", mal), ("step rate", step)])
    assert name is None and why is not None
    assert why.startswith(f"MAL, the largest share, did not move beyond noise ({mal.describe()})")
    assert f"step rate {step.describe()}, a smaller share" in why
    dec = Decomposition(85.0, 60.0, decode.log_ratio or 0.0, step.log_ratio, mal.log_ratio,
                        0.6, 0.4, 0.0, "per-unit geometric means", "MAL", name, why)
    assert "no component carries it beyond noise" not in dec.describe()
    assert why in dec.describe()
    # carried: the name, no reason
    mal_tight = relative_change("MAL", [3.0, 3.02, 2.98, 3.01], [2.2, 2.21, 2.19, 2.2])
    assert carrier_why(decode, [("MAL", mal_tight), ("step rate", step)]) == ("MAL", None)


SIM_CALIBER = """
name = "sim-code"
version = 1
description = "short code rewrite for the one-record test"
task_class = "rewrite"
thinking = false
endpoint = "chat"
concurrency = 1

[prompt]
content_class = "code"
material = "code"
material_seed = 3
blocks = 1
task = "Rewrite the code above."

[output]
max_tokens = 300
min_tokens = 300
ignore_eos = true
steady_state_start = 16

[sampling]
temperature = 0.0
"""


@pytest.mark.timeout(120)
def test_a_simulated_probe_run_shows_one_record_everywhere(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]):
    """The same over a real stored run: a probe of the simulated engine (stored quantities)."""
    from decodescope.sim import SimConfig, SimServer

    store = str(tmp_path / "runs.sqlite")
    cal = tmp_path / "sim-code.toml"
    cal.write_text(SIM_CALIBER)
    handle = SimServer(SimConfig(time_scale=0.2, seed=1, batch_slowdown=0.0)).start_in_thread()
    try:
        assert main(["probe", handle.url, "--caliber", str(cal), "--trials", "2",
                     "--store", store, "--no-fingerprint", "--scrape-interval", "0.05",
                     "--json"]) == 0
    finally:
        handle.stop()
    capsys.readouterr()
    row = json.loads(_out(capsys, ["runs", "list", "--store", store, "--json"]))[0]
    rid = row["id"]
    qs = row["quantities"]
    assert qs["mal"]["value"] is not None and qs["decode_rate"]["value"] is not None
    shown = json.loads(_out(capsys, ["runs", "show", str(rid), "--store", store, "--json"]))
    rep = json.loads(_out(capsys, ["report", str(rid), "--store", store, "--format", "json"]))
    exported = json.loads(_out(capsys, ["runs", "export", str(rid), "--store", store]))
    for doc in (shown["quantities"], rep["runs"][0]["quantities"], exported["run"]["quantities"]):
        assert doc["mal"] == qs["mal"] and doc["decode_rate"] == qs["decode_rate"]
    csv_row = next(csv.DictReader(io.StringIO(_out(
        capsys, ["runs", "export", str(rid), "--store", store, "--format", "csv"]))))
    assert float(csv_row["mal"]) == pytest.approx(qs["mal"]["value"])
    assert float(csv_row["decode_rate_tok_s"]) == pytest.approx(qs["decode_rate"]["value"])
    mal_q = Quantity.from_dict(qs["mal"])
    assert csv_row["mal_statistic"] == mal_q.basis_text() == row["mal_statistic"]
    md = _out(capsys, ["report", str(rid), "--store", store, "--format", "md"])
    assert f"| MAL | — | {mal_q.cell()}" in md
    assert rep["side_by_side"][0]["mal"] == mal_q.cell()
    assert mal_q.number() in _out(capsys, ["runs", "list", "--store", store])
