"""`decodescope import` of inference-perf's lifecycle reports with the config.yaml beside them,
written by the real inference-perf 0.7.0 against the simulator (tests/data/peers/README.md says
how)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from peers_triage import probe_sim_and_triage

from decodescope.cli.main import main
from decodescope.peers import ELEMENTS
from decodescope.peers.inference_perf import read_config
from decodescope.store.peer_import import read_peer_file

PEERS = Path(__file__).parent / "data" / "peers"
C2 = [PEERS / f"inference-perf-c2-{n}" / "summary_lifecycle_metrics.json" for n in (1, 2)]
POISSON = PEERS / "inference-perf-poisson"
VERSION = (PEERS / "VERSION-inference-perf").read_text().strip()


def _doc(p: Path) -> dict:
    return json.loads(p.read_text())


def test_the_config_beside_the_report_gives_the_workload_and_the_report_the_numbers():
    for path in C2:
        doc, r = _doc(path), read_peer_file(str(path))
        ok = doc["successes"]
        assert r.tool == "inference-perf" and r.tool_version is None  # not in its files
        assert r.url == "http://127.0.0.1:18113"
        assert r.elements == {
            "model": "sim-vllm/decodescope-sim",
            "endpoint": "completions",
            "dataset": "synthetic",
            "dataset sha256": None,
            "input tokens (mean)": f"{ok['prompt_tokens']['mean']:g}",
            "input length distribution": "normal mean 128, sd 16, 96–160",
            "output max_tokens": "256",
            "output tokens (mean)": f"{ok['output_tokens']['mean']:g}",
            "output length distribution": "fixed 256",
            "ignore_eos": "true",
            "temperature": None, "top_p": None, "top_k": None,  # never sent: server defaults
            "concurrency": "2",
            "request rate": "inf",
            "burstiness": "-",
            "requests per trial": "8",
        }
        tpot = ok["latency"]["time_per_output_token"]["median"]
        assert r.trial["decode_rate"] == pytest.approx(1.0 / tpot)
        assert r.trial["ttft_s"] == ok["latency"]["time_to_first_token"]["median"]
        assert r.trial["requests"] == ok["count"] and r.trial["failed"] == 0
        assert any("sends no temperature" in n for n in r.notes)


def test_a_summary_of_several_stages_leaves_the_load_unknown_and_a_stage_file_knows_it():
    summary = read_peer_file(str(POISSON / "summary_lifecycle_metrics.json"))
    for k in ("concurrency", "request rate", "burstiness"):
        assert summary.elements[k] is None, k
    assert any("spans 2 load stages" in n for n in summary.notes)
    for n, rate in ((0, "2"), (1, "4")):
        r = read_peer_file(str(POISSON / f"stage_{n}_lifecycle_metrics.json"))
        assert r.elements["request rate"] == rate and r.elements["burstiness"] == "1"  # poisson
        assert r.elements["ignore_eos"] == "false"
        assert r.elements["output max_tokens"] == "normal mean 64, sd 16, 32–96"
        assert r.elements["requests per trial"] is None  # a duration, not a count
        assert r.elements["concurrency"] == "100"  # 1 worker × worker_max_concurrency 100
        assert any("cap on requests in flight" in n for n in r.notes)


def test_without_its_config_only_the_realized_elements_are_known(tmp_path):
    report = tmp_path / "summary_lifecycle_metrics.json"
    shutil.copy(C2[0], report)
    r = read_peer_file(str(report))
    known = {k for k in ELEMENTS if r.elements[k] is not None}
    assert known == {"input tokens (mean)", "output tokens (mean)", "output length distribution"}
    assert any("no config.yaml beside the report" in n for n in r.notes)
    (tmp_path / "config.yaml").write_text("load: {type: [concurrent\n")  # not YAML
    r = read_peer_file(str(report))
    assert r.elements["concurrency"] is None
    assert any("could not be read" in n for n in r.notes)


def test_the_tools_config_is_read():
    cfg, why = read_config(POISSON / "config.yaml")
    assert why is None and cfg is not None
    assert [s["rate"] for s in cfg["load"]["stages"]] == [2.0, 4.0]
    assert cfg["load"]["stages"][0]["num_requests"] is None
    assert cfg["server"]["base_url"] == "http://127.0.0.1:18113"  # a colon inside a value
    assert cfg["server"]["ignore_eos"] is False
    assert isinstance(cfg["report"]["request_lifecycle"]["percentiles"], list)
    assert cfg["load"]["circuit_breakers"] == []


def test_a_broken_config_says_why(tmp_path):
    bad = tmp_path / "config.yaml"
    bad.write_text("a:\n  b: 1\n    c: 2\n")
    cfg, why = read_config(bad)
    assert cfg is None and why is not None and "could not be read" in why


def test_two_reports_of_one_workload_are_one_run_and_two_stages_are_refused(tmp_path, capsys):
    store = str(tmp_path / "runs.sqlite")
    assert main(["import", *map(str, C2), "--tool-version", VERSION, "--store", store,
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tool"] == "inference-perf" and out["tool_version"] == VERSION
    assert len(out["trials"]) == 2
    assert out["unknown"] == ["dataset sha256", "temperature", "top_p", "top_k"]
    stages = [str(POISSON / f"stage_{n}_lifecycle_metrics.json") for n in (0, 1)]
    assert main(["import", *stages, "--store", store]) == 2
    assert "request rate: 2 vs 4" in capsys.readouterr().err


def test_triage_against_a_probe_of_the_same_simulator_is_a_caliber_mismatch(tmp_path, capsys):
    """inference-perf's synthetic data is for the completions API; decodescope's demo caliber
    is chat: the endpoint alone makes it not like-for-like, whatever the timings."""
    store = str(tmp_path / "runs.sqlite")
    assert main(["import", *map(str, C2), "--tool-version", VERSION, "--store", store,
                 "--json"]) == 0
    imported = json.loads(capsys.readouterr().out)
    code, v = probe_sim_and_triage(capsys, store, imported["run_id"])
    assert v["verdict"] == "CALIBER_MISMATCH" and code == 3, v["headline"]
    text = v["caliber"]["text"]
    assert f"inference-perf {VERSION}" in text
    differ = text.split("the elements differ: ")[1].split(" (unknown")[0]
    for k in ("endpoint completions vs chat", "dataset", "concurrency"):
        assert k in differ, (k, text)
    assert "ignore_eos" not in differ  # true on both sides
    unknown = text.split("(unknown: ")[1]
    for k in ("temperature", "top_p", "top_k"):
        assert k in unknown, (k, text)
