"""One coherent explanation (issue 21): for the scenarios of the verdict-truth suite, every
output of a run (probe JSON, terminal text, Markdown report) and of a verdict (triage JSON,
text, Markdown) is read and the invariants of tests/coherence_checks.py asserted — one deciding
source named everywhere, one number per quantity and statistic, a change carried only by its
largest significant component. The simulator runs are shared by every test (one probe per
scenario, 3 trials), so the suite stays about as fast as one verdict-truth test per scenario.

The content signal of drafters that do not draft every step (n-gram) and the all-withheld /
suspended engine are checked on synthetic values: the simulator drafts every step.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from coherence_checks import Outputs, check_run, check_verdict
from test_decompose_unit import run_of, trace, win
from test_verdict_truth import CAL, WEAK_CODE, sim

from decodescope.analysis.run_result import analyze_run
from decodescope.cli.main import main
from decodescope.records.stored_run import StoredRun
from decodescope.report.text import render_run
from decodescope.sim import ACCEPTANCE_PROFILES, FaultSpec
from decodescope.verdict.bands import DEFAULT_BANDS, Band
from decodescope.verdict.render import render_text
from decodescope.verdict.side import Side, Unit
from decodescope.verdict.triage import triage

pytestmark = pytest.mark.timeout(600)

# label -> simulator settings: the verdict-truth suite's root causes
SCENARIOS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "unchanged": {},
    "spec_off": {"k": 0, "step_rate_hz": 60.0},
    "slow_steps": {"step_rate_hz": 28.0},
    "weak_acceptance": {"acceptance": {**ACCEPTANCE_PROFILES, "code": WEAK_CODE}},
    "stalls": {"faults": FaultSpec.parse("stall=2,stall_after=100")},
}
TRIALS = 3


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One store, one probe per scenario; each run's JSON as `probe --json` printed it."""
    store = str(tmp_path_factory.mktemp("coherence") / "runs.sqlite")
    docs: dict[str, dict[str, Any]] = {}
    for label, kw in SCENARIOS.items():
        with sim(**kw) as h, _capture() as out:
            code = main(["probe", h.url, "--caliber", CAL, "--trials", str(TRIALS), "--store",
                         store, "--label", f"side={label}", "--no-fingerprint", "--json"])
        assert code == 0, out.text
        docs[label] = json.loads(out.text)
    return {"store": store, "docs": docs}


class _capture:
    """stdout of one CLI call (click.echo writes to sys.stdout)."""

    def __enter__(self) -> _capture:
        import contextlib
        import io

        self._buf = io.StringIO()
        self._cm = contextlib.redirect_stdout(self._buf)
        self._cm.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._cm.__exit__(*exc)  # type: ignore[arg-type]
        self.text = self._buf.getvalue()


def _cli(*args: str) -> tuple[int, str]:
    with _capture() as out:
        code = main(list(args))
    return code, out.text


@pytest.mark.parametrize("label", list(SCENARIOS))
def test_every_output_of_a_run_tells_one_story(lab: dict[str, Any], label: str) -> None:
    doc = lab["docs"][label]
    rid = str(doc["id"])
    _, text = _cli("runs", "show", rid, "--store", lab["store"])
    _, md = _cli("report", rid, "--format", "md", "--store", lab["store"])
    _, html = _cli("report", rid, "--format", "html", "--store", lab["store"])
    check_run(Outputs(doc, text, md, html))


@pytest.mark.parametrize("label", [x for x in SCENARIOS if x != "baseline"])
def test_every_output_of_a_verdict_tells_one_story(lab: dict[str, Any], label: str) -> None:
    args = ("triage", f"side={label}", "--baseline", "side=baseline", "--store", lab["store"])
    _, js = _cli(*args, "--json")
    _, text = _cli(*args)
    _, md = _cli(*args, "--format", "md")
    check_verdict(Outputs(json.loads(js), text, md))


# -- the engine never decides when its per-trial rates are suspended or withheld ---------------
def _run(res_run: StoredRun) -> StoredRun:
    import dataclasses

    return dataclasses.replace(res_run, result=analyze_run(res_run))


def test_suspended_engine_rates_leave_the_client_deciding_everywhere() -> None:
    """Client 200 tok/s, engine windows 150 tok/s at concurrency 1: the engine's per-trial
    rates are suspended, so the client decides — in the stored field, the reconciliation line,
    the header and the warning alike (the H200 anchor probe said three things)."""
    trials = [[trace(0.0, 0.2, 400, 200.0)], [trace(10.0, 0.2, 400, 200.0)]]
    ws = [win(t, t + 0.5, 75, 19, 56) for t in (0.5, 1.0, 1.5, 10.5, 11.0, 11.5)]
    run = _run(run_of(trials, ws))
    res = run.result or {}
    assert all(t["engine_decode_rate"] is None for t in res["trials"])
    assert res["deciding"]["source"] == "client" and "suspended" in res["deciding"]["reason"]
    assert res["reconciliation"]["deciding"] == "client"
    assert "the client number decides" in res["reconciliation"]["text"]
    assert "engine number decides" not in res["reconciliation"]["text"]
    # the reconciliation's gap is the warning's gap (from the suspended rates)
    gap = res["reconciliation"]["gap_pct"]
    warn = next(f for f in res["findings"] if f["code"] == "engine.disagrees")
    assert f"{gap:+.1f}%" in warn["cause"] and "the client's does" in warn["cause"]
    text = render_run(run)
    assert "← client decides" in text and "← engine decides" not in text
    assert res["quantities"]["decode_rate"]["source"] == "client"


def test_withheld_engine_rates_never_decide() -> None:
    """Every trial's engine rate withheld (stalls inside whole-request timings): the engine
    cannot decide, and the reason says so."""
    from decodescope.analysis.run_quantities import who_decides

    trials = [{"status": "ok", "decode_rate": 100.0, "engine_decode_rate": None,
               "engine_withheld": "stalls took 5% of this trial"} for _ in range(3)]
    d = who_decides(trials, "request")
    assert d["source"] == "client" and "withheld" in d["reason"]
    trials[0]["engine_decode_rate"] = 99.0  # one of three: too few to decide
    assert who_decides(trials, "request")["source"] == "client"
    for t in trials:
        t["engine_decode_rate"] = 99.0
    assert who_decides(trials, "request")["source"] == "engine"


# -- drafters that do not draft every step --------------------------------------------------------
def _side(name: str, mal: list[float], tps: list[float], step: list[float],
          coverage: float) -> Side:
    units = tuple(Unit(f"trial {i + 1}", decode_rate=t * s, engine_decode_rate=t * s, mal=m,
                       tokens_per_step=t, step_rate=s)
                  for i, (m, t, s) in enumerate(zip(mal, tps, step, strict=True)))
    return Side(name, "run", "trial", units, f"{name}: probe", caliber_ref=f"{name}@1",
                caliber_identity=name, concurrency=1, pooled={"draft_coverage": coverage})


def _ngram_pair() -> tuple[Side, Side]:
    """The H200 case: code drafted on nearly every step; varied prose on 12 % of steps with a
    MAL of ~5 over those steps. MAL barely moves (not significant); tokens per step falls."""
    code = _side("code", [6.10, 6.20, 6.15], [5.95, 5.88, 5.91], [140.0, 139.0, 141.0], 0.98)
    prose = _side("prose", [5.60, 4.60, 5.30], [1.52, 1.56, 1.54], [140.5, 139.5, 140.0], 0.12)
    return code, prose


def test_ngram_content_is_read_from_tokens_per_step_not_mal_bands() -> None:
    code, prose = _ngram_pair()
    assert prose.drafts_every_step is False and code.drafts_every_step is True
    v = triage(code, prose)
    # MAL 5 over 12 % of steps is not "code-like": no band applies to that side
    # and none on the other either: the pair's content is read from tokens per step, and the
    # evidence says the bands do not apply (a "code-like" label beside it would contradict it)
    assert v.bands == (None, None)
    rows = {r.check: r for r in v.evidence}
    assert "what content does MAL imply?" not in rows
    content = rows["what content do tokens per step imply?"]
    assert "12%" in content.result and content.status == "changed"
    assert not v.changes["mal"].changed  # MAL over the drafted steps: within noise
    dec = v.decomposition
    assert dec is not None and dec.acceptance_metric == "tokens per step"
    assert dec.carried_by == "tokens per step"
    words = " ".join([v.headline, *v.explanation])
    assert "carried by MAL" not in words and "carried by tokens per step" in words
    mal_row = next(ln for ln in render_text(v).splitlines() if ln.startswith("MAL "))
    assert "code-like" not in mal_row and "(drafted steps only)" in mal_row
    check_verdict(Outputs(json.loads(json.dumps(v.to_dict(), default=str)), render_text(v),
                          _md(v)))


def test_mal_never_carries_a_change_it_did_not_make_significantly() -> None:
    """Every step drafts on both sides, so MAL is the acceptance factor. The decode rate fell
    25 % on every trial; MAL moved most of that but is noisy (step rate moved against it trial
    by trial): MAL is not said to carry the drop, whatever its share of the log change."""
    b = _side("a", [4.0, 5.0, 3.2], [4.0, 5.0, 3.2], [40.0, 32.0, 50.0], 1.0)
    c = _side("b", [3.0, 4.5, 2.4], [3.0, 4.5, 2.4], [40.0, 80.0 / 3.0, 50.0], 1.0)
    v = triage(b, c)
    assert v.changes["decode"].changed and not v.changes["mal"].changed
    dec = v.decomposition
    assert dec is not None and dec.share_mal is not None and dec.share_mal > 0.5
    assert dec.carried_by is None
    words = " ".join([v.headline, *v.explanation])
    assert "carried by MAL" not in words.replace("not carried by MAL", "")
    check_verdict(Outputs(json.loads(json.dumps(v.to_dict(), default=str)), render_text(v),
                          _md(v)))


def test_bands_still_classify_mal_where_every_step_drafts() -> None:
    b = _side("a", [4.5, 4.6, 4.4], [4.5, 4.6, 4.4], [40.0, 40.2, 39.8], 1.0)
    c = _side("b", [2.8, 2.9, 2.7], [2.8, 2.9, 2.7], [40.1, 40.0, 39.9], 1.0)
    bands: tuple[Band, ...] = tuple(DEFAULT_BANDS)
    v = triage(b, c, bands=bands)
    assert [x.name if x else None for x in v.bands] == ["code-like", "ordinary text"]
    assert "what content does MAL imply?" in {r.check for r in v.evidence}


def _md(v: Any) -> str:
    from decodescope.report.verdict_md import render_verdict_md

    return render_verdict_md(v)


# -- one statistic per column when the engine's per-trial rates are withheld (real llama.cpp) --
def test_withheld_engine_rates_leave_one_statistic_in_the_engine_column() -> None:
    """Every per-trial engine rate withheld (stalls on a loaded host), MAL and tokens per step
    still known per trial: the engine column is the pooled counts throughout, so its decode
    rate = step rate × tokens per step, and the n-gram note quotes no second MAL (the real
    llama.cpp prose probe showed MAL 4.91 median beside 'MAL 5.35 counts drafted steps')."""
    from decodescope.analysis.run_quantities import run_quantities

    trials = [{"status": "ok", "decode_rate": r, "engine_decode_rate": None,
               "engine_withheld": "stalls took 24% of this trial", "engine_mal": m,
               "engine_tokens_per_step": t}
              for r, m, t in ((11.0, 2.44, 1.2), (16.7, 4.91, 2.23), (33.0, 7.84, 3.1))]
    pool = {"decode_rate_per_request": 9.08, "step_rate": 5.45, "mal": 5.35,
            "tokens_per_step": 9.08 / 5.45, "windows": 3}
    qs = run_quantities({"trials": trials, "engine": {"log": pool}})
    eng = [qs[k] for k in ("engine_decode_rate", "step_rate", "mal", "tokens_per_step")]
    assert {q.statistic for q in eng} == {"pooled counts"}
    assert qs["mal"].value == pool["mal"] and qs["tokens_per_step"].value == pool["tokens_per_step"]
    assert qs["decode_rate"].source == "client"


def test_a_pooled_split_uses_one_source_and_the_factor_it_names() -> None:
    """No per-unit step rate on the current side: the split falls back to the pooled engine
    counts — the engine's pooled decode, step rate and tokens per step alike, so the identity
    closes (no 'unexplained' share from mixing a client decode with engine factors), and the
    factor labelled T is tokens per step, never MAL."""
    import dataclasses
    import math

    code = dataclasses.replace(
        _side("code", [6.15, 6.15, 6.15], [5.91, 5.90, 5.93], [1.6, 1.9, 1.2], 0.95),
        pooled={"draft_coverage": 0.95, "decode_rate_per_request": 8.8, "step_rate": 1.49,
                "tokens_per_step": 8.8 / 1.49, "mal": 6.15})
    units = tuple(Unit(f"trial {i + 1}", decode_rate=r, mal=m, tokens_per_step=t)
                  for i, (r, m, t) in enumerate(((11.0, 2.44, 1.2), (16.7, 4.91, 2.23),
                                                 (33.0, 7.84, 3.1))))
    prose = Side("prose", "run", "trial", units, "prose: probe", caliber_ref="prose@1",
                 caliber_identity="prose", concurrency=1,
                 pooled={"draft_coverage": 0.15, "decode_rate_per_request": 9.08,
                         "step_rate": 5.45, "tokens_per_step": 9.08 / 5.45, "mal": 5.35})
    v = triage(code, prose)
    dec = v.decomposition
    assert dec is not None and dec.basis.startswith("pooled engine counts")
    assert dec.acceptance_metric == "tokens per step"
    assert dec.log_mal is not None and dec.log_step is not None
    assert math.isclose(dec.log_mal, math.log((9.08 / 5.45) / (8.8 / 1.49)))
    assert math.isclose(dec.log_decode, dec.log_mal + dec.log_step, abs_tol=1e-9)
    words = " ".join([v.headline, *v.explanation])
    assert "drafts per second" not in words and "5.5 steps/s" in words  # the side table's
    check_verdict(Outputs(json.loads(json.dumps(v.to_dict(), default=str)), render_text(v),
                          _md(v)))


def test_a_pair_report_without_drafts_on_one_side_says_mal_is_one(lab: dict[str, Any]) -> None:
    """`report BASE CUR` of a speculation-off pair: its statistics table says why MAL has no
    per-trial test (MAL 1 by definition), never a bare 'no data' beside the evidence's
    'MAL changed? yes: … → 1 by definition'."""
    base, off = (str(lab["docs"][k]["id"]) for k in ("baseline", "spec_off"))
    for fmt in ("md", "html"):
        _, out = _cli("report", base, off, "--format", fmt, "--store", lab["store"])
        assert "1 by definition (no drafts)" in out
        assert "MAL | no data" not in out and "<td>MAL</td><td>no data" not in out
        assert "MAL 1 by definition there" in out


def test_a_gap_from_stalls_names_the_stalls() -> None:
    """The server paused inside the outputs (the stall warning): a client–engine gap that the
    pauses explain names them among its likely causes (a real llama.cpp prose probe on a
    loaded host read 'gap, likely ttft, steady state' beside the stall warning; its numbers)."""
    from decodescope.analysis.reconcile import reconcile

    trials = [{"status": "ok", "decode_rate": r, "decode_rate_with_stalls": p, "stall_count": 15,
               "engine_decode_rate": None, "engine_withheld": "stalls took 24% of this trial"}
              for r, p in ((11.0, 8.3), (16.7, 8.4), (33.0, 10.5))]
    rec = reconcile({"decode_rate": {"median": 16.7}}, {"decode_rate_per_request": 9.1},
                    trials, None, "prometheus", {"source": "client", "reason": "withheld"})
    assert "gap, likely" in rec["text"] and "stalls" in rec["text"], rec["text"]
    assert any(c["cause"] == "stalls" for c in rec["explained_by"])
