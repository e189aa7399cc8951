"""Fingerprint diff → evidence rows in the seed's terms; unknown whenever a side lacks data."""

from __future__ import annotations

from typing import Any

import pytest

from decodescope.fingerprint.diff import cmdline_changes, diff_fingerprints, parse_cmdline
from decodescope.fingerprint.nvml import NO_LOAD_LABEL
from decodescope.fingerprint.stack import Fingerprint, Item
from decodescope.records.evidence import EvidenceRow, render_rows


def fp(**sections: dict[str, Any]) -> Fingerprint:
    """Sections of plain values (collected) or Item objects."""
    return Fingerprint(taken_at="2026-09-15T23:30:00+00:00", url="http://127.0.0.1:8000",
                       sections={s: {k: v if isinstance(v, Item) else Item.ok(v)
                                     for k, v in items.items()}
                                 for s, items in sections.items()})


def rows(a: Fingerprint, b: Fingerprint) -> dict[str, EvidenceRow]:
    return {r.check: r for r in diff_fingerprints(a, b)}


BASE_CMD = ["/venv/bin/python3", "/venv/bin/vllm", "serve", "qwen-flash-nvfp4", "--port", "8000",
            "-tp", "2", "--speculative-config", '{"method":"mtp","num_speculative_tokens":6}']


def test_every_row_unknown_for_empty_fingerprints() -> None:
    out = diff_fingerprints(fp(), fp())
    assert {r.status for r in out} == {"unknown"}
    assert len(out) == 10


def test_cmdline_argument_level_difference() -> None:
    assert cmdline_changes(["llama-server", "-m", "x.gguf", "-t", "2", "--metrics"],
                           ["llama-server", "-m", "x.gguf", "-t", "1", "--spec-type",
                            "ngram-simple"]) == [
        "-t 2 → -t 1", "- --metrics", "+ --spec-type ngram-simple"]
    # --opt=v and --opt v read the same; negative numbers are values, not options.
    assert cmdline_changes(["s", "--port=8000", "--x", "-1"], ["s", "--port", "8000", "--x", "-1"]) == []
    assert parse_cmdline(["a", "--flag", "--k", "v", "b"]) == (["a", "b"], {"--flag": [None],
                                                                          "--k": ["v"]})
    r = rows(fp(process={"cmdline": BASE_CMD}),
             fp(process={"cmdline": [*BASE_CMD[:6], "-tp", "1", *BASE_CMD[8:]]}))
    row = r["same launch cmdline?"]
    assert row.status == "changed" and row.result == "no: -tp 2 → -tp 1"
    same = rows(fp(process={"cmdline": BASE_CMD}), fp(process={"cmdline": list(BASE_CMD)}))
    assert same["same launch cmdline?"].status == "same"


def test_a_launch_on_another_port_is_the_same_launch() -> None:
    """The listen address is not part of the stack: two servers of one launch command on two
    ports (a launched A/B's starts, identical servers side by side) have the same cmdline, and
    the row says the address moved; any other argument still counts."""
    a = ["llama-server", "-m", "x.gguf", "--port", "8181", "--host", "127.0.0.1"]
    b = ["llama-server", "-m", "x.gguf", "--port=8182", "--host", "0.0.0.0"]
    assert cmdline_changes(a, b) == []
    row = rows(fp(process={"cmdline": a}), fp(process={"cmdline": b}))["same launch cmdline?"]
    assert row.status == "same" and "apart from the listen address" in row.result, row
    assert cmdline_changes(a, [*b, "-t", "2"]) == ["+ -t 2"]


def test_backend_lines_line_by_line() -> None:
    lines = ["Using 'MARLIN' NvFp4 MoE backend out of potential backends: ['MARLIN']",
             "Using TRITON Unquantized MoE backend out of potential backends: ['TRITON']"]
    r = rows(fp(backend={"lines": lines}), fp(backend={"lines": list(reversed(lines))}))
    assert r["same backend selection?"].status == "same"
    assert r["same backend selection?"].result == "yes (2 selection lines identical)"
    one = rows(fp(backend={"lines": lines[:1]}), fp(backend={"lines": lines[:1]}))
    assert one["same backend selection?"].result == "yes (1 selection line identical)"
    gone = rows(fp(backend={"lines": lines}), fp(backend={"lines": lines[1:]}))
    assert gone["same backend selection?"].result == "no: 1 line gone, 0 new"
    changed = ["Using 'FLASHINFER_CUTLASS' NvFp4 MoE backend out of potential backends: []",
               lines[1]]
    row = rows(fp(backend={"lines": lines}), fp(backend={"lines": changed}))["same backend selection?"]
    assert row.status == "changed"
    assert row.detail is not None and f"- {lines[0]}" in row.detail
    assert f"+ {changed[0]}" in row.detail
    row = rows(fp(backend={"lines": lines}), fp())["same backend selection?"]
    assert row.status == "unknown" and "current" in (row.detail or "")


def pkg(mtime: float, iso: str, **kw: Any) -> dict[str, Any]:
    return {"name": "vllm", "version": "0.11.2.dev499", "location": "/venv/site-packages/vllm",
            "editable": False, "newest_mtime": mtime, "newest_mtime_iso": iso,
            "newest_file": "vllm/x.py", "files_scanned": 3000, "truncated": False, **kw}


def test_engine_package_modified() -> None:
    a = fp(packages={"engine_package": pkg(1.0, "2026-09-08T10:00:00+00:00")})
    same = rows(a, fp(packages={"engine_package": pkg(1.0, "2026-09-08T10:00:00+00:00")}))
    row = same["was the engine package modified?"]
    assert row.status == "same"
    assert row.result == "no (vllm 0.11.2.dev499, files unchanged since 2026-09-08 10:00)"
    row = rows(a, fp(packages={"engine_package": pkg(2.0, "2026-09-15T23:24:00+00:00")}))[
        "was the engine package modified?"]
    assert row.status == "changed" and "2026-09-08 10:00 → 2026-09-15 23:24" in row.result
    row = rows(a, fp(packages={"engine_package": pkg(1.0, "2026-09-08T10:00:00+00:00",
                                                     truncated=True)}))[
        "was the engine package modified?"]
    assert row.status == "unknown"
    binary = {"path": "/opt/llama-server", "size_bytes": 10, "mtime": 5.0,
              "mtime_iso": "2026-09-01T00:00:00+00:00"}
    row = rows(fp(packages={"engine_binary": binary}),
               fp(packages={"engine_binary": {**binary, "mtime": 6.0}}))[
        "was the engine package modified?"]
    assert row.status == "changed"


def ref(referenced: bool | None, hits: int = 0) -> dict[str, Any]:
    return {"pythonpath_entries": [], "binary_inside_repo": False, "sys_path_entries": [],
            "pth_hits": [], "referenced": referenced,
            "package_grep": {"dir": "/venv/vllm", "needles": ["Qwen-Flash-SM80-170HX"],
                             "hits": ["x"] * hits, "files_scanned": 3120, "truncated": False}}


def test_watched_repo_reference_rows() -> None:
    key = "/src/Qwen-Flash-SM80-170HX"
    a = fp(repos={f"referenced:{key}": ref(False),
                  f"git:{key}": {"sha": "78c9a59", "subject": "x"}})
    b = fp(repos={f"referenced:{key}": ref(False),
                  f"git:{key}": {"sha": "d73d882", "subject": "y", "describe": "v0.1.7"}})
    row = rows(a, b)["does the stack reference the watched repo?"]
    assert row.status == "same"
    assert row.result == ("Qwen-Flash-SM80-170HX: no (PYTHONPATH no, .pth no, grep of engine "
                          "package: 0 hits in 3120 files)")
    assert row.detail == "repo HEAD moved 78c9a59 → d73d882 (v0.1.7)"
    row = rows(a, fp(repos={f"referenced:{key}": ref(True, hits=2)}))[
        "does the stack reference the watched repo?"]
    assert row.status == "changed" and row.result.startswith("Qwen-Flash-SM80-170HX: yes")
    row = rows(fp(), b)["does the stack reference the watched repo?"]
    assert row.status == "unknown"


def gpu(offset: int, median: float | None, label: str = "probe", reasons: tuple[str, ...] = ()
        ) -> dict[str, Any]:
    items: dict[str, Any] = {"gpu0.name": "NVIDIA H200", "gpu0.gpc_clock_offset_mhz": offset,
                             "gpu0.mem_clock_offset_mhz": 0,
                             "gpu0.applications_clocks_mhz": {"sm": 1980, "mem": 3201},
                             "gpu0.enforced_power_limit_w": 700.0,
                             "gpu0.throttle_reasons_sampled": list(reasons)}
    if median is not None:
        items["gpu0.sm_clock_sampled_mhz"] = {"min": median - 5, "median": median,
                                              "max": median + 5, "n": 50, "during": label}
    return items


def test_gpu_clocks_and_offsets() -> None:
    check = "GPU clocks and offsets in place?"
    row = rows(fp(gpu=gpu(200, 1400)), fp(gpu=gpu(200, 1395)))[check]
    assert row.status == "same"  # the seed: 1395 MHz under the 1400 lock, offset +200 kept
    assert "GPU0 SM clock offset +200 MHz" in row.result
    row = rows(fp(gpu=gpu(200, 1400)), fp(gpu=gpu(0, 1400)))[check]
    assert row.status == "changed" and "GPU0 SM clock offset +200 → +0 MHz" in row.result
    row = rows(fp(gpu=gpu(200, 1400)), fp(gpu=gpu(200, 1200)))[check]
    assert row.status == "changed" and "1400 → 1200 MHz" in row.result
    row = rows(fp(gpu=gpu(200, 1400)), fp(gpu=gpu(200, 1400, reasons=("hw_slowdown",))))[check]
    assert row.status == "changed" and "hw_slowdown" in row.result
    # gpu_idle is not a lost tuning.
    row = rows(fp(gpu=gpu(200, 1400)), fp(gpu=gpu(200, 1400, reasons=("gpu_idle",))))[check]
    assert row.status == "same"
    # A fingerprint's own short sample (no probe load) is never compared with a probe's.
    row = rows(fp(gpu=gpu(200, 345, label=NO_LOAD_LABEL)), fp(gpu=gpu(200, 1400)))[check]
    assert row.status == "same" and "not compared" in (row.detail or "")
    row = rows(fp(gpu={"nvml": Item.missing("nvidia-ml-py is not installed")}),
               fp(gpu=gpu(200, 1400)))[check]
    assert row.status == "unknown" and "nvidia-ml-py" in (row.detail or "")


def test_host_engine_model_rows() -> None:
    a = fp(host={"hostname": "gpu-box", "kernel": "6.1"},
           endpoint={"engine": "vllm", "engine_version": "0.11.2", "models": ["m"],
                     "model_card": {"id": "m", "max_model_len": 32768}})
    b = fp(host={"hostname": "gpu-box", "kernel": "6.2"},
           endpoint={"engine": "vllm", "engine_version": "0.11.3", "models": ["m"],
                     "model_card": {"id": "m", "max_model_len": 65536}})
    r = rows(a, b)
    assert r["same host"].status == "changed" and "kernel 6.1 → 6.2" in r["same host"].result
    assert r["engine version"].result == "vllm 0.11.2 → vllm 0.11.3"
    assert r["served model"].status == "changed" and "max_model_len" in r["served model"].result
    r = rows(a, a)
    assert r["engine version"].result == "same (vllm 0.11.2)"
    assert r["served model"].result == "same (m)"


def test_env_row() -> None:
    r = rows(fp(process={"env": {"VLLM_USE_V1": "1", "HF_TOKEN": "<redacted>"}}),
             fp(process={"env": {"VLLM_USE_V1": "0", "CUDA_VISIBLE_DEVICES": "0,1"}}))
    row = r["same engine environment?"]
    assert row.status == "changed"
    assert row.detail is not None
    assert "VLLM_USE_V1=1 → VLLM_USE_V1=0" in row.detail and "- HF_TOKEN=<redacted>" in row.detail


def test_evidence_row_value_semantics() -> None:
    row = EvidenceRow("same launch cmdline?", "no: -t 2 → -t 1", "changed", "-t 2 → -t 1")
    assert EvidenceRow.from_dict(row.to_dict()) == row
    bad: Any = "maybe"  # not a status: rejected at construction
    with pytest.raises(ValueError):
        EvidenceRow("x", "y", bad)
    text = render_rows([row])
    assert "same launch cmdline?" in text and "no: -t 2 → -t 1" in text



def test_a_change_named_whole_in_the_result_is_shown_once() -> None:
    """The cmdline row names up to three changes in its result and keeps them all in its
    detail: every renderer shows the detail only where it adds a line the result lacks."""
    from decodescope.records.evidence import detail_to_show, shown_detail_of
    from decodescope.report import report_html

    short = rows(fp(process={"cmdline": BASE_CMD}),
                 fp(process={"cmdline": [*BASE_CMD[:6], "-tp", "1", *BASE_CMD[8:]]}))
    row = short["same launch cmdline?"]
    assert row.detail == "-tp 2 → -tp 1"  # the record keeps it (JSON has every line)
    assert row.shown_detail is None
    assert render_rows([row]).count("-tp 2 → -tp 1") == 1
    assert shown_detail_of(row.to_dict()) is None
    assert report_html._evidence([row.to_dict()]).count("-tp 2 → -tp 1") == 1
    # more changes than the result names: the detail is shown, whole
    long_cmd = [*BASE_CMD[:6], "-tp", "1", "--a", "1", "--b", "2", "--c", "3"]
    many = rows(fp(process={"cmdline": BASE_CMD}), fp(process={"cmdline": long_cmd}))
    mrow = many["same launch cmdline?"]
    assert "more" in mrow.result and mrow.shown_detail == mrow.detail
    text = render_rows([mrow])
    assert all(line in text for line in (mrow.detail or "").splitlines())
    assert "+ --c 3" in report_html._evidence([mrow.to_dict()])
    # a detail that explains more than the result says is never dropped
    assert detail_to_show("unknown", "baseline: no pid") == "baseline: no pid"
    assert detail_to_show("no: a", "a\nb") == "a\nb"
    assert detail_to_show("x", None) is None and detail_to_show("x", "") is None


def test_two_servers_at_two_addresses_are_never_called_a_restart() -> None:
    """Two live servers on two ports (an A/B, or n-gram vs off side by side) are another server
    process, not a restart; one address with a new pid is a restart."""
    import dataclasses

    def proc(pid: int, epoch: float, port: str) -> dict[str, Any]:
        return {"pid": pid, "create_time": {"epoch": epoch, "iso": "2026-12-02T07:41:00+00:00"},
                "cmdline": ["llama-server", "--port", port]}

    a = dataclasses.replace(fp(process=proc(6083, 1000.0, "8181")), url="http://127.0.0.1:8181")
    b = dataclasses.replace(fp(process=proc(6084, 1001.0, "8182")), url="http://127.0.0.1:8182")
    row = rows(a, b)["did the server restart?"]
    assert row.status == "changed" and row.result.startswith("another server process"), row
    assert "127.0.0.1:8181" in row.result and "127.0.0.1:8182" in row.result
    assert "restart" not in (row.detail or "")
    same_place = dataclasses.replace(b, url="http://127.0.0.1:8181/v1")
    row = rows(a, same_place)["did the server restart?"]
    assert row.result.startswith("yes: started"), row
