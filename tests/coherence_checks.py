"""Invariants of one coherent explanation (issue 21), over what a user reads: a run's JSON,
terminal text and Markdown report; a verdict's JSON, terminal text and Markdown.

Each invariant is a function of an `Outputs` value that raises AssertionError; RUN_INVARIANTS
and VERDICT_INVARIANTS list them, and `check_run` / `check_verdict` run every one: one deciding
source named everywhere, one number per quantity and statistic, a change carried only by its
largest significant component, next steps with the detected engine's flags only, no warm-up
advice after a warm-up, no length decay below its basis. A new invariant is one more function
appended to a list; the simulator scenarios of tests/test_coherence.py and any real-engine e2e
test that calls these functions then check it too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from decodescope.analysis.decay import MIN_DECAY_OUTPUT_TOKENS
from decodescope.records.quantity import Quantity
from decodescope.verdict.advice import all_spec_flags, engine_kind


@dataclass(frozen=True)
class Outputs:
    doc: dict[str, Any]  # the JSON (a probe / runs show run document, or a triage verdict)
    text: str  # the terminal text of the same thing
    md: str  # its Markdown (report --format md for a run, triage --format md for a verdict)
    html: str = ""  # its HTML (report --format html), when read


def _q(d: dict[str, Any]) -> Quantity:
    return Quantity.from_dict(d)


# -- a run ----------------------------------------------------------------------------------------
def run_one_deciding_source(o: Outputs) -> None:
    """Exactly one deciding source, and the header, reconciliation, warnings, stored field,
    JSON headline and Markdown report all name that one."""
    res = o.doc["result"]
    src = res["deciding"]["source"]
    assert src in ("engine", "client"), res["deciding"]
    other = "client" if src == "engine" else "engine"
    assert o.doc["deciding"]["source"] == src
    assert o.doc["headline"]["source"] == src
    assert res["quantities"]["decode_rate"]["source"] == src
    rec = res.get("reconciliation")
    if rec:
        assert rec["deciding"] == src, rec
        assert f"the {src} number decides" in rec["text"] and f"{other} number decides" \
            not in rec["text"], rec["text"]
    assert f"← {src} decides" in o.text and f"← {other} decides" not in o.text, o.text
    codes = [f["code"] for f in res.get("findings") or []]
    if src == "engine":  # a warning saying the engine does not decide would contradict it
        assert "engine.disagrees" not in codes, codes
    if src == "engine":  # every per-trial engine rate withheld: the engine cannot decide
        assert any(t.get("engine_decode_rate") is not None for t in res["trials"])
    row = next(ln for ln in o.md.splitlines() if ln.startswith("| decode rate (tok/s)"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    client_cell, engine_cell = cells[1], cells[2]
    assert ("← decides" in (engine_cell if src == "engine" else client_cell)), row
    assert "← decides" not in (client_cell if src == "engine" else engine_cell), row
    if o.html:
        m = re.search(r"<tr><td>decode rate \(tok/s\)</td><td>(.*?)</td><td>(.*?)</td></tr>",
                      o.html)
        assert m is not None, "no decode rate row in the HTML"
        deciding_cell, other_cell = (m[2], m[1]) if src == "engine" else (m[1], m[2])
        assert "← decides" in deciding_cell and "← decides" not in other_cell, m[0]


def run_same_number_same_statistic(o: Outputs) -> None:
    """A quantity shown in the JSON headline, the terminal and the Markdown report is one
    record: the same statistic and the same number everywhere."""
    qs = {k: _q(v) for k, v in o.doc["result"]["quantities"].items()}
    head = o.doc["headline"]
    dec = qs["decode_rate"]
    assert head["decode_rate"] == dec.value and head["statistic"] == dec.statistic
    assert head["trials"] == dec.n
    lines = o.text.splitlines()
    for label, key in (("decode rate", "engine_decode_rate"), ("decode rate", "client_decode_rate"),
                       ("MAL", "mal"), ("step rate", "step_rate"),
                       ("tokens per step", "tokens_per_step")):
        q = qs[key]
        if q.value is None:
            continue
        line = next((ln for ln in lines if ln.startswith(label + " ")), None)
        if key == "tokens_per_step" and line is None:
            continue
        assert line is not None and q.cell() in line, (key, q.cell(), line)
        if key in ("engine_decode_rate", "client_decode_rate", "mal", "step_rate"):
            md_label = "decode rate (tok/s)" if label == "decode rate" else label
            md_line = next(ln for ln in o.md.splitlines() if ln.startswith(f"| {md_label} |"))
            assert q.cell().split(")")[0] in md_line, (key, q.cell(), md_line)
    # the statistic is the median over trials of the per-trial values, as the JSON says
    ok = [t for t in o.doc["result"]["trials"] if t["status"] == "ok"]
    per_trial = sorted(t["engine_decode_rate" if dec.source == "engine" else "decode_rate"]
                       for t in ok if t.get("engine_decode_rate" if dec.source == "engine"
                                            else "decode_rate") is not None)
    n = len(per_trial)
    med = per_trial[n // 2] if n % 2 else (per_trial[n // 2 - 1] + per_trial[n // 2]) / 2
    assert dec.value == med and dec.n == n


def run_no_length_decay_below_its_basis(o: Outputs) -> None:
    """Outputs shorter than MIN_DECAY_OUTPUT_TOKENS carry no slope per 1K tokens: withheld,
    with the reason, in the JSON, the terminal and the Markdown."""
    d = o.doc["result"].get("length_decay")
    if not d or (d.get("output_tokens") or 0) >= MIN_DECAY_OUTPUT_TOKENS:
        return
    assert d["per_1k_pct"] is None and d.get("reason"), d
    slope = re.compile(r"[+−-]\d+(?:\.\d+)?% per 1K output tokens")
    assert not slope.search(o.text) and not slope.search(o.md), "length decay printed"


def run_no_warmup_advice_after_a_warmup(o: Outputs) -> None:
    """"Use --warmup 1" is advice for a run without one: never printed after a warm-up."""
    warmup = (o.doc.get("meta") or {}).get("warmup")
    if not isinstance(warmup, int) or warmup < 1:
        return
    for f in o.doc["result"].get("findings") or []:
        assert "--warmup 1 or more" not in (f.get("remedy") or ""), f
    assert "--warmup 1 or more" not in o.text and "--warmup 1 or more" not in o.md


def run_engine_column_one_statistic(o: Outputs) -> None:
    """The engine's decode rate, step rate, MAL and tokens per step share one statistic when
    the decode rate is a pooled count (every per-trial rate withheld): a median MAL beside a
    pooled decode rate breaks decode = step rate × tokens per step within one column. A note
    that explains MAL against tokens per step quotes no second number for either."""
    qs = {k: _q(v) for k, v in o.doc["result"]["quantities"].items()}
    if qs["engine_decode_rate"].value is not None and qs["engine_decode_rate"].statistic == \
            "pooled counts":
        for key in ("step_rate", "mal", "tokens_per_step"):
            q = qs[key]
            assert q.value is None or q.statistic == "pooled counts", (key, q)
    note = ((o.doc["result"].get("decomposition") or {}).get("note")) or ""
    assert not re.search(r"MAL \d|\d tokens per step", note), note


RUN_INVARIANTS: list[Callable[[Outputs], None]] = [
    run_engine_column_one_statistic,
    run_one_deciding_source,
    run_same_number_same_statistic,
    run_no_length_decay_below_its_basis,
    run_no_warmup_advice_after_a_warmup,
]


# -- a verdict ------------------------------------------------------------------------------------
def verdict_one_deciding_source(o: Outputs) -> None:
    src = o.doc["decode_source"]
    assert o.doc["deciding"]["source"] == src and o.doc["deciding"]["reason"]
    assert f"decode rate changed? ({src})" in o.text
    assert f"decode rate changed? ({src})" in o.md
    qs = o.doc["quantities"]
    for side in ("baseline", "current"):
        q = qs["decode_rate"][side]
        if src == "engine":
            assert q["source"] in ("engine", "log"), q
        elif src.startswith("client"):
            assert q["source"] == "client", q
    if src in ("engine", "client"):  # the side table marks that source's row, and only it
        marked = [ln for ln in o.text.splitlines() if "← decides" in ln]
        want = "decode (engine)" if src == "engine" else "decode (client)"
        assert marked and all(ln.startswith(want) for ln in marked), marked


_ARROW = re.compile(r"(?:Decode|decode) (\S+) → (\S+) tok/s")
_MAL_ARROW = re.compile(r"\bMAL (\d+\.\d+|\d+) → (\d+\.\d+|\d+)")


def verdict_same_number_same_statistic(o: Outputs) -> None:
    """The headline's arrows, the change's geometric means and the side table show one
    record per side (the geometric mean the percent compares)."""
    qs = {k: (_q(v["baseline"]), _q(v["current"])) for k, v in o.doc["quantities"].items()}
    ch = o.doc["changes"]
    for key, metric in (("decode_rate", "decode"), ("mal", "mal"),
                        ("tokens_per_step", "tokens_per_step"), ("step_rate", "step_rate")):
        for q, v in zip(qs[key], (ch[metric]["baseline"], ch[metric]["current"]), strict=True):
            if v is not None:
                assert q.value is not None and math.isclose(q.value, v, rel_tol=1e-12), (key, q, v)
                assert q.statistic == "geometric mean"
    words = " ".join([o.doc["headline"], *o.doc["explanation"]])
    qb, qc = qs["decode_rate"]
    for a, b in _ARROW.findall(words):
        assert (a, b) == (qb.number(), qc.number()), (a, b, qb.number(), qc.number())
    mb, mc = qs["mal"]
    for a, b in _MAL_ARROW.findall(words):
        if "MAL (" not in words:
            assert (a, b) == (mb.number(), mc.number()), (a, b, mb.number(), mc.number())
    for q in (*qs["decode_rate"], *qs["mal"], *qs["step_rate"]):
        if q.value is not None:
            assert q.cell() in o.text, (q.cell(), o.text)


def verdict_carrier_is_largest_and_significant(o: Outputs) -> None:
    """The component said to carry a change has the largest share of the log change and is
    significant; a component that is not significant is never said to carry it."""
    dec = o.doc.get("decomposition")
    ch = o.doc["changes"]
    key = {"MAL": "mal", "tokens per step": "tokens_per_step", "step rate": "step_rate"}
    carried = dec.get("carried_by") if dec else None
    if carried is not None:
        acc = dec["log_mal"]
        step = dec["log_step"]
        mine, other = (step, acc) if carried == "step rate" else (acc, step)
        assert abs(mine) >= abs(other), dec
        assert ch[key[carried]]["status"] in ("down", "up"), ch[key[carried]]
    words = " ".join([o.doc["headline"], *o.doc["explanation"]])
    for name in re.findall(r"(?<!not )(?<!partly )carried by (MAL|tokens per step|step rate)",
                           words):
        assert name == carried, (name, carried, words)
    cause = o.doc.get("cause")
    both = all(ch[k]["status"] != "no_data" for k in ("step_rate", "mal"))
    if o.doc["verdict"] in ("REGRESSION", "IMPROVEMENT") and cause in ("acceptance",
                                                                       "step rate") and both:
        assert carried is not None and (carried == "step rate") == (cause == "step rate"), \
            (cause, carried)


def verdict_next_steps_name_only_the_detected_engine(o: Outputs) -> None:
    """Next steps name the speculative-decoding flags of the engine the runs were taken on,
    never another engine's."""
    engines = {engine_kind(o.doc[side].get("engine")) for side in ("baseline", "current")}
    if None in engines:
        return  # an unknown engine gets neutral words (verdict.advice)
    steps = " ".join(o.doc.get("next_steps") or [])
    for kind, flags in all_spec_flags().items():
        if kind in engines:
            continue
        for flag in flags:
            if flag.startswith("--"):
                assert flag.rstrip("*") not in steps, (kind, flag, steps)


def verdict_no_length_decay_below_its_basis(o: Outputs) -> None:
    """A side without a length-decay slope (too short outputs) gets no length-decay row."""
    if any(o.doc[side].get("length_decay_pct") is None for side in ("baseline", "current")):
        assert "length decay (per 1K output tokens)" not in o.text


def verdict_spec_off_mal_is_one_everywhere(o: Outputs) -> None:
    """Where the verdict says MAL is 1 by definition (one side without drafts), no row calls
    MAL unknown or missing: the MAL row says it changed to 1, the content row says the side
    without drafts has no content signal, and the split reads tokens per step."""
    words = " ".join([o.doc["headline"], *o.doc["explanation"]])
    if "MAL is 1 by definition" not in words:
        return
    rows = {r["check"]: r for r in o.doc["evidence"]}
    assert rows["MAL changed?"]["status"] == "changed", rows["MAL changed?"]
    assert "1 by definition" in rows["MAL changed?"]["result"]
    for r in rows.values():
        assert "no engine MAL" not in r["result"], r
    assert "no engine MAL" not in o.text and "needs engine MAL" not in o.text
    # the side table and the Markdown's numbers side by side show it too (never "—")
    assert "1 by definition (no drafts)" in o.text and "1 by definition (no drafts)" in o.md
    dec = o.doc.get("decomposition")
    if dec:
        assert dec["acceptance_metric"] == "tokens per step", dec


VERDICT_INVARIANTS: list[Callable[[Outputs], None]] = [
    verdict_spec_off_mal_is_one_everywhere,
    verdict_one_deciding_source,
    verdict_same_number_same_statistic,
    verdict_carrier_is_largest_and_significant,
    verdict_next_steps_name_only_the_detected_engine,
    verdict_no_length_decay_below_its_basis,
]


def check_run(o: Outputs) -> None:
    for inv in RUN_INVARIANTS:
        inv(o)


def check_verdict(o: Outputs) -> None:
    for inv in VERDICT_INVARIANTS:
        inv(o)


# -- over a store, through the CLI (the real-engine e2e tests) -----------------------------------
def _cli(*args: str) -> str:
    import contextlib
    import io

    from decodescope.cli.main import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main(list(args))
    return buf.getvalue()


def check_stored_run(store: str, run: str) -> dict[str, Any]:
    """Every invariant of a stored run (id, `last` or key=value) over `runs show` (JSON and
    text) and `report` (Markdown and HTML); returns the JSON."""
    import json

    doc: dict[str, Any] = json.loads(_cli("runs", "show", run, "--store", store, "--json"))
    check_run(Outputs(doc, _cli("runs", "show", run, "--store", store),
                      _cli("report", run, "--format", "md", "--store", store),
                      _cli("report", run, "--format", "html", "--store", store)))
    return doc


def check_stored_verdict(store: str, current: str, baseline: str, *extra: str
                         ) -> dict[str, Any]:
    """Every invariant of `triage CURRENT --baseline BASELINE` (JSON, text, Markdown) and of
    both runs; returns the verdict's JSON."""
    import json

    args = ("triage", current, "--baseline", baseline, "--store", store, *extra)
    doc: dict[str, Any] = json.loads(_cli(*args, "--json"))
    check_verdict(Outputs(doc, _cli(*args), _cli(*args, "--format", "md")))
    for run in (current, baseline):
        check_stored_run(store, run)
    return doc

