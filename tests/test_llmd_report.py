"""The llm-d benchmark report (BR 0.2.1): `runs export --format br` and `import` of it; a
round trip decodescope -> report -> decodescope keeps every element; reports written by the
real `benchmark-report` converter (llmd-benchmark-report 0.2.1, tests/data/peers/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from decodescope.cli.main import main
from decodescope.peers import ELEMENTS, llmd_report
from decodescope.peers.common import REALIZED_MEANS as REALIZED
from decodescope.sim import SimConfig, SimServer
from decodescope.store import runs as sr
from decodescope.store.connect import open_store
from decodescope.store.peer_import import read_peer_file
from decodescope.verdict.imported_run import run_elements

PEERS = Path(__file__).parent / "data" / "peers"


def _same(a: dict, b: dict) -> None:
    for k in ELEMENTS:
        if k in REALIZED and a[k] is not None and b[k] is not None:
            assert float(a[k]) == pytest.approx(float(b[k]), abs=0.05), k
        else:
            assert a[k] == b[k], k


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("br") / "s.sqlite")
    with SimServer(SimConfig(seed=5, time_scale=0.05)).start_in_thread() as sim:
        assert main(["probe", sim.url, "--caliber", "demo-code-rewrite", "--trials", "2",
                     "--store", db, "--no-fingerprint", "--no-scrape"]) == 0
    return db


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_round_trip_keeps_every_element(probed, tmp_path, suffix, capsys):
    out = str(tmp_path / ("r" + suffix))
    assert main(["runs", "export", "1", "--format", "br", "-o", out, "--store", probed]) == 0
    text = Path(out).read_text()
    doc = yaml.safe_load(text) if suffix == ".yaml" else json.loads(text)
    assert llmd_report.is_report(doc) and doc["version"] == "0.2.1"
    std = doc["scenario"]["load"]["standardized"]
    assert std["tool"] == "decodescope" and std["concurrency"] == 1
    agg = doc["results"]["request_performance"]["aggregate"]
    assert agg["requests"]["total"] == 2 and agg["requests"]["failures"] == 0
    assert agg["latency"]["time_to_first_token"]["units"] == "ms"
    capsys.readouterr()
    assert main(["import", out, "--store", probed, "--json"]) == 0
    rid = json.loads(capsys.readouterr().out)["run_id"]
    with open_store(probed) as st:
        src, back = sr.get_run(st, 1), sr.get_run(st, rid)
    _same(run_elements(src), run_elements(back))
    # and again, from the imported run: the same elements, exactly
    out2 = str(tmp_path / ("r2" + suffix))
    assert main(["runs", "export", str(rid), "--format", "br", "-o", out2, "--store", probed]) == 0
    assert main(["import", out2, "--store", probed, "--json"]) == 0
    rid2 = json.loads(capsys.readouterr().out)["run_id"]
    with open_store(probed) as st:
        assert run_elements(sr.get_run(st, rid2)) == run_elements(back)


def test_the_reports_numbers_come_back_from_the_traces(probed, tmp_path):
    out = str(tmp_path / "r.json")
    assert main(["runs", "export", "1", "--format", "br", "-o", out, "--store", probed]) == 0
    r = read_peer_file(out)
    lat = json.loads(Path(out).read_text())["results"]["request_performance"]["aggregate"]["latency"]
    assert r.trial["decode_rate"] == pytest.approx(1000.0 / lat["time_per_output_token"]["p50"])
    assert r.trial["ttft_s"] == pytest.approx(lat["time_to_first_token"]["p50"] / 1000.0)
    assert r.trial["requests"] == 2 and r.trial["failed"] == 0


def test_br_export_of_several_runs_is_refused(probed, capsys):
    rc = main(["runs", "export", "1", "2", "--format", "br", "--store", probed])
    assert rc == 2 and "one run per report" in capsys.readouterr().err


def test_report_of_inference_perf_by_the_real_converter():
    p = PEERS / "br-0.2.1-inference-perf-c2-1.yaml"
    doc = yaml.safe_load(p.read_text())
    r = read_peer_file(str(p))
    agg = doc["results"]["request_performance"]["aggregate"]
    assert r.tool == "llm-d benchmark report (inference-perf)"
    assert r.trial["decode_rate"] == pytest.approx(
        1.0 / agg["latency"]["time_per_output_token"]["p50"])  # units: s/token
    assert r.trial["requests"] == agg["requests"]["total"] - agg["requests"]["failures"]
    assert float(r.elements["output tokens (mean)"]) == agg["requests"]["output_length"]["mean"]
    assert r.elements["model"] is None and r.elements["temperature"] is None  # not in it


def test_report_of_guidellm_by_the_real_converter():
    p = PEERS / "br-0.2.1-guidellm-0.8.1-c2-1.yaml"
    doc = yaml.safe_load(p.read_text())
    r = read_peer_file(str(p))
    std = doc["scenario"]["load"]["standardized"]
    assert r.elements["model"] == doc["scenario"]["load"]["native"]["config"]["spec"][
        "backend"]["model"]
    assert r.elements["concurrency"] == str(std["concurrency"])
    assert r.elements["input length distribution"] == f"fixed {std['input_seq_len']['value']:g}"
    itl = doc["results"]["request_performance"]["aggregate"]["latency"]["inter_token_latency"]
    assert r.trial["decode_rate"] == pytest.approx(1000.0 / itl["p50"])  # ms/token, no TPOT
    assert any("ITL" in n for n in r.notes)


def test_a_bad_number_in_a_report_is_withheld_with_a_note(tmp_path):
    """The report's reader passes the registry's contract (peers.common.Fields): a negative
    median TPOT is no decode rate, with a note naming the file and the field."""
    doc = yaml.safe_load((PEERS / "br-0.2.1-inference-perf-c2-1.yaml").read_text())
    doc["results"]["request_performance"]["aggregate"]["latency"]["time_per_output_token"][
        "p50"] = -2.5
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(doc))
    r = read_peer_file(str(p))
    assert r.trial["decode_rate"] is None
    assert any(n.startswith(f"withheld: {p}: ") and "time_per_output_token.p50 = -2.5" in n
               for n in r.notes), r.notes
    assert r.trial["ttft_s"] is not None  # the other numbers are kept
