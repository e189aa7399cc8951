"""`decodescope import` of AIPerf's `profile_export_aiperf.json` and `.csv`, written by the real
AIPerf 0.13.0 against the simulator (tests/data/peers/README.md says how)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from peers_triage import probe_sim_and_triage

from decodescope.cli.main import main
from decodescope.peers import ELEMENTS
from decodescope.store.peer_import import read_peer_file

PEERS = Path(__file__).parent / "data" / "peers"
C2 = [PEERS / "aiperf-c2-1.json", PEERS / "aiperf-c2-2.json"]  # one workload, two runs
GAMMA = PEERS / "aiperf-rate-gamma.json"
CSV = PEERS / "aiperf-c2-1.csv"


def _doc(p: Path) -> dict:
    return json.loads(p.read_text())


def test_every_element_the_file_carries_is_read_and_the_rest_is_unknown():
    for path in C2:
        doc, r = _doc(path), read_peer_file(str(path))
        cfg = doc["input_config"]
        phase = cfg["phases"][0]
        extra = cfg["endpoint"]["extra"]
        isl = cfg["datasets"][0]["prompts"]["isl"]
        osl = doc["output_sequence_length"]
        assert extra["ignore_eos"] is True
        assert r.tool == "aiperf" and r.tool_version == doc["aiperf_version"] == "0.13.0"
        assert r.url == cfg["endpoint"]["urls"][0]
        assert r.elements == {
            "model": cfg["models"]["items"][0]["name"],
            "endpoint": "chat",
            "dataset": "synthetic",
            "dataset sha256": None,
            "input tokens (mean)": f"{doc['input_sequence_length']['avg']:g}",
            "input length distribution": f"normal mean {isl['mean']:g}, sd {isl['stddev']:g}",
            "output max_tokens": f"{cfg['datasets'][0]['prompts']['osl']['mean']:g}",
            "output tokens (mean)": f"{osl['avg']:g}",
            "output length distribution": f"fixed {osl['min']:g}",  # ignore_eos: every one
            "ignore_eos": "true",
            "temperature": f"{extra['temperature']:g}",
            "top_p": f"{extra['top_p']:g}",
            "top_k": None,  # not in --extra-inputs: the server's default, unknown
            "concurrency": str(phase["concurrency"]),
            "request rate": "inf",  # a concurrency phase: no arrival rate
            "burstiness": "-",
            "requests per trial": str(phase["requests"]),
        }
        assert r.trial["decode_rate"] == doc["output_token_throughput_per_user"]["p50"]
        assert r.trial["ttft_s"] == pytest.approx(doc["time_to_first_token"]["p50"] / 1000)
        assert r.trial["requests"] == doc["completed_request_count"]["avg"]
        assert r.trial["failed"] == 0  # error_summary is an empty list: none failed, known
        assert r.started_at is not None and r.notes == []


def test_a_rate_phase_gives_rate_burstiness_and_a_drawn_max_tokens():
    doc, r = _doc(GAMMA), read_peer_file(str(GAMMA))
    phase = doc["input_config"]["phases"][0]
    osl = doc["input_config"]["datasets"][0]["prompts"]["osl"]
    e = r.elements
    assert phase["type"] == "gamma"
    assert e["request rate"] == f"{phase['rate']:g}" and e["burstiness"] == f"{phase['smoothness']:g}"
    assert e["concurrency"] == "no cap" and e["endpoint"] == "completions"
    assert e["output max_tokens"] == f"normal mean {osl['mean']:g}, sd {osl['stddev']:g}"
    assert e["input length distribution"].startswith("fixed ")  # --isl without a stddev
    for k in ("ignore_eos", "temperature", "top_p", "top_k", "dataset sha256"):
        assert e[k] is None, k  # no --extra-inputs: unknown, never the server's default
    assert any("--use-server-token-count" in n for n in r.notes)


def test_the_csv_has_metrics_but_no_configuration():
    r, doc = read_peer_file(str(CSV)), _doc(C2[0])
    assert r.tool == "aiperf" and r.tool_version is None
    known = {k for k in ELEMENTS if r.elements.get(k) is not None}
    assert known == {"input tokens (mean)", "output tokens (mean)", "output length distribution"}
    assert r.trial["decode_rate"] == pytest.approx(
        doc["output_token_throughput_per_user"]["p50"], abs=0.01)  # the CSV rounds to 0.01
    assert any("records no configuration" in n for n in r.notes)


def test_two_files_of_one_workload_are_one_run_and_other_workloads_are_refused(tmp_path, capsys):
    store = str(tmp_path / "runs.sqlite")
    assert main(["import", *map(str, C2), "--store", store, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tool"] == "aiperf" and out["tool_version"] == "0.13.0"
    assert len(out["trials"]) == 2
    assert out["unknown"] == ["dataset sha256", "top_k"]
    assert main(["import", str(C2[0]), str(GAMMA), "--store", store]) == 2
    err = capsys.readouterr().err
    assert "different workloads" in err and "endpoint: chat vs completions" in err


def test_triage_against_a_probe_of_the_same_simulator_names_the_differing_elements(
        tmp_path, capsys):
    """A probe of the same simulator with decodescope's demo caliber: the AIPerf run's dataset
    (synthetic) and load (concurrency 2) differ from the caliber's, whatever the timings."""
    store = str(tmp_path / "runs.sqlite")
    assert main(["import", *map(str, C2), "--store", store, "--json"]) == 0
    imported = json.loads(capsys.readouterr().out)
    code, v = probe_sim_and_triage(capsys, store, imported["run_id"])
    assert v["verdict"] == "CALIBER_MISMATCH" and code == 3, v["headline"]
    text = v["caliber"]["text"]
    assert "aiperf 0.13.0" in text and "the elements differ" in text
    differ = text.split("the elements differ: ")[1].split(" (unknown")[0]
    for k in ("dataset", "concurrency", "output max_tokens"):
        assert k in differ, (k, text)
    for k in ("endpoint", "ignore_eos", "temperature", "top_p"):  # known on both and the same
        assert k not in differ, (k, text)
    assert "top_k" in text.split("(unknown")[1]  # unknown on the AIPerf side: said, not a row
    rows = {r["element"] for r in v["caliber"]["rows"]}
    assert "top_k" not in rows and "temperature" in rows
