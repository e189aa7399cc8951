"""`runs export --format json|csv`, `runs list` (the verdict's number and its source),
`runs show`, `runs rm`: ISO-8601 timestamps with a zone, one statistic everywhere."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest

from decodescope.cli.main import main
from decodescope.report.iso import EPOCH_FIELDS, with_iso
from decodescope.sim import SimConfig, SimServer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("export") / "runs.sqlite")
    handle = SimServer(SimConfig(time_scale=0.05, seed=4)).start_in_thread()
    try:
        for conc in ("1", "2"):
            assert main(["probe", handle.url, "--caliber", "demo-code-rewrite", "--trials", "2",
                         "--concurrency", conc, "--store", path, "--no-fingerprint",
                         "--scrape-interval", "0.1", "--json", "--label", f"c={conc}"]) == 0
    finally:
        handle.stop()
    return path


def walk(doc: Any, path: str = "") -> list[tuple[str, str, Any, dict]]:
    out = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.append((path, k, v, doc))
            out += walk(v, f"{path}.{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += walk(v, f"{path}[{i}]")
    return out


def test_json_export_has_an_iso_sibling_for_every_epoch_stamp(store, capsys):
    capsys.readouterr()
    assert main(["runs", "export", "1", "--store", store]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "decodescope.run" and doc["exported_at"].endswith("+00:00")
    stamps = 0
    for where, key, value, parent in walk(doc):
        if key in EPOCH_FIELDS and isinstance(value, (int, float)) and value > 946684800:
            iso = parent[f"{key}_iso"]
            assert iso.endswith("+00:00"), (where, key)
            stamps += 1
    assert stamps >= 3  # created_at, finished_at, trials' started_at at least
    run = doc["run"]
    assert isinstance(run["created_at"], float)  # the epoch float stays for existing readers
    assert run["headline"]["source"] in ("engine", "client")
    lat = run["distributions"]["latency"]["ttft_s"]
    assert {"p50", "p90", "p99", "mean", "min", "max"} <= set(lat)


def test_several_runs_export_as_a_list(store, capsys):
    capsys.readouterr()
    assert main(["runs", "export", "1", "2", "--store", store]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "decodescope.runs" and [r["id"] for r in doc["runs"]] == [1, 2]


@pytest.mark.parametrize(("table", "rows", "columns"), [
    ("runs", 2, {"run_id", "decode_rate_tok_s", "decode_rate_source", "ttft_p90_ms",
                 "itl_p99_ms", "output_throughput_all_tok_s", "concurrency", "created_at"}),
    ("trials", 4, {"run_id", "trial", "decode_rate_per_request_tok_s",
                   "output_throughput_all_tok_s", "started_at"}),
    ("requests", 6, {"run_id", "trial", "request", "ttft_s", "tpot_s", "e2e_s", "sent_at"}),
])
def test_csv_tables(store, capsys, tmp_path, table, rows, columns):
    out = tmp_path / f"{table}.csv"
    capsys.readouterr()
    assert main(["runs", "export", "1", "2", "--format", "csv", "--table", table, "-o", str(out),
                 "--store", store]) == 0
    records = list(csv.DictReader(io.StringIO(out.read_text())))
    assert len(records) == rows
    assert columns <= set(records[0])
    stamp = next(c for c in ("created_at", "started_at", "sent_at") if c in records[0])
    assert all(r[stamp].endswith("+00:00") for r in records)


def test_runs_list_shows_the_verdicts_number_and_its_source(store, capsys):
    capsys.readouterr()
    assert main(["runs", "list", "--store", store, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    capsys.readouterr()
    assert main(["runs", "export", "1", "--store", store]) == 0
    run = json.loads(capsys.readouterr().out)["run"]
    trials = [t for t in run["result"]["trials"] if t["status"] == "ok"]
    row = next(r for r in rows if r["id"] == 1)
    key = "engine_decode_rate" if row["decode_source"] == "engine" else "decode_rate"
    vals = sorted(t[key] for t in trials if t.get(key) is not None)
    med = (vals[0] + vals[-1]) / 2 if len(vals) == 2 else vals[len(vals) // 2]
    assert row["decode_rate"] == pytest.approx(med)
    assert row["created_at_iso"].endswith("+00:00")
    assert main(["runs", "list", "--store", store]) == 0
    text = capsys.readouterr().out
    assert "source" in text.splitlines()[0] and "per request, median over trials" in text


def test_runs_show_prints_distributions_and_labels_throughputs(store, capsys):
    capsys.readouterr()
    assert main(["runs", "show", "2", "--store", store]) == 0
    text = capsys.readouterr().out
    for needle in ("p50", "p90", "p99", "TTFT", "TTFOT", "ITL", "TPOT", "e2e latency",
                   "(per request)", "all requests"):
        assert needle in text, needle


def test_runs_rm_deletes_one_run(store, tmp_path, capsys):
    import shutil

    copy = str(tmp_path / "copy.sqlite")
    shutil.copy(store, copy)
    assert main(["runs", "rm", "1", "--store", copy]) == 0
    assert "deleted run 1" in capsys.readouterr().err
    assert main(["runs", "show", "1", "--store", copy]) == 2
    assert main(["runs", "show", "2", "--store", copy, "--json"]) == 0
    capsys.readouterr()
    assert main(["runs", "rm", "1", "--store", copy]) == 2


def test_with_iso_leaves_perf_counter_times_alone():
    doc = with_iso({"t_start_s": 1234.5, "created_at": 1.8e9, "trial_span_s": [1.8e9, 1.8e9 + 1]})
    assert "t_start_s_iso" not in doc
    assert doc["created_at_iso"].endswith("+00:00") and len(doc["trial_span_s_iso"]) == 2


def test_report_json_has_iso_stamps(store, capsys):
    capsys.readouterr()
    assert main(["report", "1", "2", "--format", "json", "--store", store]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["generated_at_iso"].endswith("+00:00")
    assert doc["runs"][0]["created_at_iso"].endswith("+00:00")
    assert doc["runs"][0]["distributions"]["latency"]["itl_s"]["p90"] is not None
