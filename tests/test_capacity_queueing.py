"""Issue 21, class 6: load that the server queues is said to queue.

The server's capacity is read where it tells it (llama.cpp /props total_slots, SGLang
/get_server_info max_running_requests, vLLM --max-num-seqs on the launch command line) and
its queue gauge during the run; when the offered concurrency exceeds the capacity, or the
gauge shows requests waiting, the probe's findings and the sweep say that TTFT includes
queueing — and say nothing when nothing waited.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from test_decompose_unit import run_of, trace

from decodescope.analysis.queueing import cmdline_value, queueing, server_capacity
from decodescope.analysis.run_result import analyze_run
from decodescope.cli.main import main
from decodescope.records.stored_run import StoredRun
from decodescope.records.window import EngineWindow
from decodescope.sim import SimConfig, SimServer

pytestmark = pytest.mark.timeout(300)


def fp(cmd: list[str] | None = None, engine: str | None = None,
       **endpoint: Any) -> dict[str, Any]:
    sections: dict[str, Any] = {"endpoint": {k: {"value": v, "status": "collected", "why": None}
                                             for k, v in endpoint.items()},
                                "process": {}}
    if engine:
        sections["endpoint"]["engine"] = {"value": engine, "status": "collected", "why": None}
    if cmd is not None:
        sections["process"]["cmdline"] = {"value": cmd, "status": "collected", "why": None}
    return {"schema_version": 1, "taken_at": "", "url": None, "sections": sections}


# -- where each engine tells its capacity ------------------------------------------------------
def test_llamacpp_slots_from_props() -> None:
    cap = server_capacity("llamacpp", {"props": {"total_slots": 4}}, None)
    assert cap is not None and cap.slots == 4 and "total_slots" in cap.source
    cap = server_capacity("llamacpp", None, fp(props={"total_slots": 2, "build_info": "b1"}))
    assert cap is not None and cap.slots == 2
    cap = server_capacity("llamacpp", None, fp(["llama-server", "-m", "x.gguf", "-np", "6"]))
    assert cap is not None and cap.slots == 6


def test_sglang_max_running_requests_from_server_info() -> None:
    cap = server_capacity("sglang", {"server_info": {"max_running_requests": 48}}, None)
    assert cap is not None and cap.slots == 48 and "SGLang" in cap.source
    per_rank = {"server_info": {"max_running_requests": None,
                                "internal_states": [{"max_running_requests": 32}]}}
    cap = server_capacity("sglang", per_rank, None)
    assert cap is not None and cap.slots == 32


@pytest.mark.parametrize("cmd", [["vllm", "serve", "m", "--max-num-seqs", "8"],
                                 ["python", "-m", "vllm.entrypoints.openai.api_server",
                                  "--max-num-seqs=8"],
                                 ["vllm", "serve", "m", "--max_num_seqs", "8"]])
def test_vllm_max_num_seqs_from_the_launch_command(cmd: list[str]) -> None:
    cap = server_capacity("vllm", None, fp(cmd))
    assert cap is not None and cap.slots == 8 and "--max-num-seqs 8" in cap.source


def test_no_capacity_is_none_never_a_default() -> None:
    assert server_capacity("vllm", None, fp(["vllm", "serve", "m"])) is None
    assert server_capacity("openai", None, fp(["server", "--max-num-seqs", "8"])) is None
    assert server_capacity(None, {}, None) is None
    assert cmdline_value(["--max-num-seqs", "x"], ("--max-num-seqs",)) is None


# -- what a run says ---------------------------------------------------------------------------
def _run(engine: str, waiting: float | None, raw: dict[str, Any] | None) -> StoredRun:
    ws = [EngineWindow("prometheus", engine, 10.0 + i, 11.0 + i, generation_tokens=100,
                       running=4, waiting=waiting) for i in range(3)]
    run = run_of([[trace(0.0, 0.1, 100, 100.0)]], windows=ws, concurrency=16, engine=engine)
    return dataclasses.replace(run, meta={"engine_info": {"raw": raw or {}}})


def test_offered_over_slots_says_how_many_waited() -> None:
    """The H200 case: concurrency 16 against a 4-slot llama.cpp server."""
    q = queueing(_run("llamacpp", 12.0, {"props": {"total_slots": 4}}), 16)
    assert q is not None and q["queued"] and q["slots"] == 4
    assert q["text"].startswith("16 offered, 4 slots (llama.cpp /props total_slots): 12 "
                                "requests waited at a time; TTFT includes queueing")
    assert "llamacpp:requests_deferred averaged up to 12 over a scrape window" in q["text"]


def test_the_queue_gauge_alone_says_requests_waited() -> None:
    q = queueing(_run("vllm", 3.0, None), 8)
    assert q is not None and q["queued"] and q["slots"] is None
    assert "vllm:num_requests_waiting averaged up to 3 requests waiting" in q["text"]
    assert "TTFT includes queueing" in q["text"]


def test_nothing_said_when_nothing_waited() -> None:
    q = queueing(_run("llamacpp", 0.0, {"props": {"total_slots": 16}}), 16)
    assert q is not None and not q["queued"] and q["text"] is None
    assert queueing(_run("vllm", None, None), None) is None


def test_the_finding_is_stored_with_the_run() -> None:
    run = _run("llamacpp", 12.0, {"props": {"total_slots": 4}})
    res = analyze_run(run)
    assert res["queueing"]["queued"]
    found = [f for f in res["findings"] if f["code"] == "load.queued"]
    assert len(found) == 1 and "TTFT includes queueing" in found[0]["cause"]
    calm = analyze_run(_run("llamacpp", 0.0, {"props": {"total_slots": 16}}))
    assert not [f for f in calm["findings"] if f["code"] == "load.queued"]


# -- a sweep against a server that queues ------------------------------------------------------
def test_sweep_says_which_point_queued(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "s.sqlite")
    handle = SimServer(SimConfig(time_scale=0.25, seed=7, max_num_seqs=2)).start_in_thread()
    try:
        capsys.readouterr()
        rc = main(["sweep", handle.url, "--caliber", "demo-code-rewrite", "--concurrency", "1,4",
                   "--trials", "2", "--store", store, "--no-fingerprint", "--json"])
    finally:
        handle.stop()
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    notes = doc["notes"]
    assert len(notes) == 1 and notes[0].startswith("concurrency 4: 4 offered")
    assert "requests waiting" in notes[0] and "TTFT includes queueing" in notes[0]


def test_a_capacity_that_is_not_an_ascii_number_is_unknown() -> None:
    """A server-sent slot count like "²" (str.isdigit accepts it, int() refuses it) is no
    capacity, never a crash."""
    from decodescope.analysis.queueing import _int

    assert _int("²") is None and _int("٣") is None and _int("0") is None and _int(True) is None
    assert _int(" 4 ") == 4 and _int(4) == 4


def test_requests_running_at_once_are_at_most_the_slots() -> None:
    """Real llama.cpp, -np 2 probed at --concurrency 4: the probe's 4 streams ran 2 at a time,
    so a whole-trial window's per-request divisor is 2 (it was 4, and triage's 'running
    requests 1 → 4' contradicted '4 offered, 2 slots: 2 requests waited')."""
    from test_decompose_unit import ANCHOR

    ws = [EngineWindow("prometheus", "llamacpp", ANCHOR - 0.1, ANCHOR + 1.2,
                       generation_tokens=400, running=2.0, flags=("trial",))]
    reqs = [trace(0.0, 0.1, 100, 100.0) for _ in range(4)]
    run = dataclasses.replace(run_of([reqs], windows=ws, concurrency=4, engine="llamacpp"),
                              meta={"engine_info": {"raw": {"props": {"total_slots": 2}}}})
    res = analyze_run(run)
    assert [t["engine_running"] for t in res["trials"]] == [2.0]
    assert res["queueing"]["slots"] == 2 and res["queueing"]["queued"]
