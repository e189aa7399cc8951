"""Imports that decide: files of one recorded workload give the verdict the numbers support,
with every element the tool does not record named as assumed; a changed element is a
CALIBER_MISMATCH; one import is one workload; every imported number passes one contract.

Fixtures: tests/data/peers/derived/ (derive.py: the real tools' files with numbers edited —
per-token times ×1/0.70 (−30 %) or ×1/0.98 (−2 %), input lengths changed; SGLang's
server_info synthetic). README.md in tests/data/peers says how.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from decodescope.cli.main import main
from decodescope.peers import read_file
from decodescope.peers.common import check_trial

DERIVED = Path(__file__).parent / "data" / "peers" / "derived"
TOOLS = {"vllm": "vllm bench serve", "aiperf": "aiperf", "sglang": "sglang bench_serving"}
CHANGED_INPUT = {"vllm": "in8192", "aiperf": "in8192", "sglang": "in1024"}


def _files(tool: str, case: str) -> list[str]:
    return sorted(str(p) for p in (DERIVED / tool / case).iterdir())


def _import(capsys: pytest.CaptureFixture[str], store: str, files: list[str]) -> dict[str, Any]:
    assert main(["import", *files, "--store", store, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _triage(capsys: pytest.CaptureFixture[str], tmp_path: Path, tool: str,
            case: str) -> tuple[int, dict[str, Any]]:
    store = str(tmp_path / "runs.sqlite")
    b = _import(capsys, store, _files(tool, "base"))
    c = _import(capsys, store, _files(tool, case))
    code = main(["triage", str(c["run_id"]), "--baseline", str(b["run_id"]), "--store", store,
                 "--json"])
    return code, json.loads(capsys.readouterr().out)


def _prose(v: dict[str, Any]) -> str:
    """Every sentence of the verdict (the JSON document holds all that the text shows)."""
    return json.dumps(v, ensure_ascii=False)


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_thirty_percent_slower_per_token_is_a_regression_with_the_unrecorded_named(
        tmp_path, capsys, tool):
    code, v = _triage(capsys, tmp_path, tool, "slow30")
    assert (v["verdict"], code) == ("REGRESSION", 1), v["headline"]
    assert v["changes"]["decode"]["rel"] == pytest.approx(-0.30, abs=0.005)
    assert v["caliber"]["same"] is True
    text = v["caliber"]["text"]
    assert f"not recorded by `{TOOLS[tool]}`:" in text and "taken as the same on both sides" in text
    unrecorded = text.split(f"not recorded by `{TOOLS[tool]}`: ")[1].split(" — ")[0].split(", ")
    assert "dataset sha256" in unrecorded  # none of the three records one
    if tool != "aiperf":  # AIPerf records --extra-inputs; the others do not record sampling
        assert "temperature" in unrecorded and "ignore_eos" in unrecorded
    prose = _prose(v)
    assert f"imported `{TOOLS[tool]}` files" in v["headline"]
    assert "log windows" not in prose.lower()
    assert "probed with --no-fingerprint" not in prose


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_two_percent_is_not_called_a_regression(tmp_path, capsys, tool):
    code, v = _triage(capsys, tmp_path, tool, "slow2")
    assert v["verdict"] in ("NO_CHANGE", "INCONCLUSIVE"), v["headline"]
    assert v["caliber"]["same"] is True and code in (0, 3)
    assert v["changes"]["decode"]["rel"] == pytest.approx(-0.02, abs=0.005)


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_a_changed_input_length_is_a_caliber_mismatch(tmp_path, capsys, tool):
    code, v = _triage(capsys, tmp_path, tool, CHANGED_INPUT[tool])
    assert (v["verdict"], code) == ("CALIBER_MISMATCH", 3), v["headline"]
    differ = v["caliber"]["text"].split("the recorded workload differs: ")[1]
    assert "input tokens (mean)" in differ or "input length distribution" in differ


def test_sglang_model_is_read_from_server_info_and_a_change_is_seen(tmp_path, capsys):
    rs = read_file(_files("sglang", "base")[0])
    assert {r.elements["model"] for r in rs} == {"google/gemma-3-270m"}
    code, v = _triage(capsys, tmp_path, "sglang", "model")
    assert (v["verdict"], code) == ("CALIBER_MISMATCH", 3)
    assert "model google/gemma-3-270m vs google/gemma-3-1b-it" in v["caliber"]["text"]


def test_appended_sglang_lines_of_one_workload_are_trials(tmp_path, capsys):
    (path,) = _files("sglang", "base")
    lines = [ln for ln in Path(path).read_text().splitlines() if ln.strip()]
    out = _import(capsys, str(tmp_path / "r.sqlite"), [path])
    assert len(out["trials"]) == len(lines) == 3
    assert [(f["path"], f["results"]) for f in out["files"]] == [(path, 3)]
    assert [t["decode_rate"] for t in out["trials"]] == pytest.approx(
        [1000.0 / json.loads(ln.replace("Infinity", "1e999"))["median_tpot_ms"] for ln in lines])


def test_files_of_two_workloads_in_one_import_are_refused(tmp_path, capsys):
    code = main(["import", _files("vllm", "base")[0], _files("vllm", "in8192")[0],
                 "--store", str(tmp_path / "r.sqlite")])
    err = capsys.readouterr().err
    assert code == 2 and "different workloads" in err and "input tokens (mean)" in err
    assert "Traceback" not in err


def test_an_element_recorded_in_one_file_only_is_refused_and_one_side_only_mismatches(
        tmp_path, capsys):
    src = json.loads(Path(_files("vllm", "base")[0]).read_text())
    declared = tmp_path / "declared.json"
    declared.write_text(json.dumps({**src, "temperature": "0"}))  # `--metadata temperature=0`
    store = str(tmp_path / "r.sqlite")
    assert main(["import", _files("vllm", "base")[1], str(declared), "--store", store]) == 2
    err = capsys.readouterr().err
    assert "temperature: recorded in" in err and "declared.json only" in err
    b = _import(capsys, store, _files("vllm", "base"))
    c = _import(capsys, store, [str(declared)] * 3)
    code = main(["triage", str(c["run_id"]), "--baseline", str(b["run_id"]), "--store", store,
                 "--json"])
    v = json.loads(capsys.readouterr().out)
    assert (v["verdict"], code) == ("CALIBER_MISMATCH", 3)
    assert "temperature recorded on run 2 only (0)" in v["caliber"]["text"]


BAD_TPOT = [-20.0, math.nan, 0.0, math.inf, "2.1", True]


@pytest.mark.parametrize("bad", BAD_TPOT, ids=repr)
def test_a_bad_tpot_is_withheld_with_a_note_naming_file_field_and_value(tmp_path, capsys, bad):
    src = json.loads(Path(_files("vllm", "base")[0]).read_text())
    f = tmp_path / "bad.json"
    f.write_text(json.dumps({**src, "median_tpot_ms": bad}))  # NaN / Infinity as Python writes
    (r,) = read_file(str(f))
    assert r.trial["decode_rate"] is None
    note = next(n for n in r.notes if n.startswith("withheld:"))
    assert str(f) in note and "median_tpot_ms" in note and repr(bad) in note
    out = _import(capsys, str(tmp_path / "r.sqlite"), [str(f)])
    assert out["trials"][0]["decode_rate"] is None and note in out["notes"]


@pytest.mark.parametrize("bad", [-20.0, math.nan, 0.0, "2.1"], ids=repr)
def test_a_bad_tpot_in_an_appended_sglang_line_names_the_line(tmp_path, bad):
    (path,) = _files("sglang", "base")
    rows = [json.loads(ln.replace("Infinity", "1e999")) for ln in Path(path).read_text().splitlines()]
    rows[1]["median_tpot_ms"] = bad
    f = tmp_path / "runs.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rs = read_file(str(f))
    assert rs[1].trial["decode_rate"] is None
    assert rs[0].trial["decode_rate"] and rs[2].trial["decode_rate"]
    assert any(f"{f} line 2: median_tpot_ms = {bad!r}" in n for n in rs[1].notes)
    assert not any("median_itl_ms" in n for n in rs[1].notes)  # withheld, not replaced by ITL


def test_a_negative_aiperf_rate_per_user_is_withheld(tmp_path):
    doc = json.loads(Path(_files("aiperf", "base")[0]).read_text())
    doc["output_token_throughput_per_user"]["p50"] = -50.0
    f = tmp_path / "profile_export_aiperf.json"
    f.write_text(json.dumps(doc))
    (r,) = read_file(str(f))
    assert r.trial["decode_rate"] is None
    assert any("output_token_throughput_per_user.p50 = -50.0" in n for n in r.notes)


def test_the_last_guard_withholds_what_a_reader_let_through():
    trial, notes = check_trial({"idx": 0, "status": "ok", "decode_rate": -50.0, "ttft_s": 0.01,
                                "wall_rate": math.nan, "requests": 6}, "f.json")
    assert trial["decode_rate"] is None and trial["wall_rate"] is None
    assert trial["ttft_s"] == 0.01 and trial["requests"] == 6
    assert len(notes) == 2 and all(n.startswith("withheld: f.json: ") for n in notes)


@pytest.mark.parametrize("cell", ["-473.04", "nan", "inf", "n/a"])
def test_a_bad_cell_of_aiperf_csv_is_withheld_with_a_note(tmp_path, cell):
    src = Path(__file__).parent / "data" / "peers" / "aiperf-c2-1.csv"
    rows = src.read_text().splitlines()
    row = next(i for i, r in enumerate(rows) if r.startswith("Output Token Throughput Per User"))
    cells = rows[row].split(",")
    header = rows[0].split(",")
    cells[header.index("p50")] = cell
    rows[row] = ",".join(cells)
    f = tmp_path / "profile_export_aiperf.csv"
    f.write_text("\n".join(rows) + "\n")
    (r,) = read_file(str(f))
    assert r.trial["decode_rate"] is None
    assert any(n.startswith(f"withheld: {f}: output_token_throughput_per_user.p50 = ")
               for n in r.notes), r.notes


def test_a_bad_recorded_element_is_withheld_not_kept_as_the_workload(tmp_path):
    src = json.loads(Path(_files("vllm", "base")[0]).read_text())
    f = tmp_path / "bad.json"
    f.write_text(json.dumps({**src, "max_concurrency": -2, "num_prompts": 6.5}))
    (r,) = read_file(str(f))
    assert r.elements["concurrency"] is None and r.elements["requests per trial"] is None
    assert any("max_concurrency = -2" in n for n in r.notes)
    assert any("num_prompts = 6.5" in n for n in r.notes)
    doc = json.loads(Path(_files("aiperf", "base")[0]).read_text())
    doc["input_config"]["phases"][0]["concurrency"] = -2
    g = tmp_path / "profile_export_aiperf.json"
    g.write_text(json.dumps(doc))
    (a,) = read_file(str(g))
    assert a.elements["concurrency"] is None
    assert any("phases[profiling].concurrency = -2" in n for n in a.notes)
