"""`decodescope import` of SGLang `bench_serving --output-file` JSONL, written by the real
client of SGLang 0.5.23 (installed without its server stack) against the simulator
(tests/data/peers/README.md says how)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from peers_triage import probe_sim_and_triage

from decodescope.cli.main import main
from decodescope.peers import read_file
from decodescope.store.peer_import import read_peer_file

PEERS = Path(__file__).parent / "data" / "peers"
C2 = [PEERS / "sglang-c2-1.jsonl", PEERS / "sglang-c2-2.jsonl"]  # one workload, two runs
RATE = PEERS / "sglang-rate.jsonl"


def _doc(p: Path) -> dict:
    return json.loads(p.read_text().splitlines()[-1])


def test_every_element_the_line_carries_is_read_and_the_rest_is_unknown():
    for path in C2:
        doc, r = _doc(path), read_peer_file(str(path))
        assert math.isinf(doc["request_rate"])  # written as JSON `Infinity`
        assert r.tool == "sglang bench_serving" and r.tool_version is None
        n = doc["completed"]
        assert r.elements == {
            "model": None,  # not in the file
            "endpoint": "chat",  # backend vllm-chat
            "dataset": doc["dataset_name"],
            "dataset sha256": None,
            "input tokens (mean)": f"{doc['total_input_tokens'] / n:g}",
            "input length distribution": f"fixed {doc['random_input_len']}",  # range ratio 1
            "output max_tokens": str(doc["random_output_len"]),
            "output tokens (mean)": f"{doc['total_output_tokens'] / n:g}",
            "output length distribution": None,  # only totals
            "ignore_eos": None, "temperature": None, "top_p": None, "top_k": None,
            "concurrency": str(doc["max_concurrency"]),
            "request rate": "inf",
            "burstiness": "-",
            "requests per trial": None,  # --num-prompts is not in the file
        }
        assert r.trial["decode_rate"] == pytest.approx(1000.0 / doc["median_tpot_ms"])
        assert r.trial["ttft_s"] == pytest.approx(doc["median_ttft_ms"] / 1000.0)
        assert r.trial["requests"] == n
        assert any("the model" in x and "ignore_eos" in x for x in r.notes)


def test_a_poisson_rate_and_drawn_lengths():
    doc, r = _doc(RATE), read_peer_file(str(RATE))
    lo = int(doc["random_range_ratio"] * doc["random_output_len"])
    assert r.elements["endpoint"] == "completions"  # backend vllm
    assert r.elements["request rate"] == f"{doc['request_rate']:g}"
    assert r.elements["burstiness"] == "1" and r.elements["concurrency"] == "no cap"
    assert r.elements["output max_tokens"] == f"uniform {lo}–{doc['random_output_len']}"


def test_every_line_of_an_appended_file_is_read_and_mixed_workloads_are_refused(tmp_path, capsys):
    f = tmp_path / "appended.jsonl"
    f.write_text(RATE.read_text() + C2[0].read_text())  # bench_serving appends to --output-file
    rs = read_file(str(f))
    assert [r.line for r in rs] == [1, 2]
    assert rs[1].elements["endpoint"] == "chat" and rs[1].elements["concurrency"] == "2"
    assert rs[0].elements["concurrency"] != "2"
    assert main(["import", str(f), "--store", str(tmp_path / "r.sqlite")]) == 2
    assert "different workloads" in capsys.readouterr().err


def test_two_lines_of_one_workload_are_one_run_and_triage_against_a_probe_names_them(
        tmp_path, capsys):
    store = str(tmp_path / "runs.sqlite")
    assert main(["import", *map(str, C2), "--tool-version", "0.5.23", "--store", store,
                 "--json"]) == 0
    imported = json.loads(capsys.readouterr().out)
    assert len(imported["trials"]) == 2
    assert main(["import", str(C2[0]), str(RATE), "--store", store]) == 2
    assert "different workloads" in capsys.readouterr().err
    code, v = probe_sim_and_triage(capsys, store, imported["run_id"])
    assert v["verdict"] == "CALIBER_MISMATCH" and code == 3, v["headline"]
    text = v["caliber"]["text"]
    differ = text.split("the elements differ: ")[1].split(" (unknown")[0]
    for k in ("dataset", "concurrency", "output max_tokens"):
        assert k in differ, (k, text)
    unknown = text.split("(unknown: ")[1]
    for k in ("model", "ignore_eos", "temperature"):
        assert k in unknown, (k, text)
