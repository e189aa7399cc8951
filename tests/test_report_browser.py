"""The HTML report in a real headless Chromium: loads without console errors, draws every plot,
shows model text as text. Screenshots go to artifacts/ (gitignored) and their paths are printed.

Needs Debian's chromium (`apt-get install -y chromium`); skips with that reason without it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from test_report_cdp import SKIP_REASON, find_chromium, open_page, page_state
from test_report_fixtures import EVIL, code_run, evil_pair, prose_run

from decodescope.records.stored_run import StoredRun
from decodescope.report import report_html
from decodescope.report.document import build_report

CHROMIUM = find_chromium()
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason=SKIP_REASON)
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
PLOT_IDS = ["decode-over-time", "mal-over-time", "step-rate-over-time", "decode-by-position",
            "acceptance-by-position"]


def artifact(name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS / name


def write_report(path: Path, runs: list[StoredRun]) -> Path:
    report = build_report(runs, generated_at=1_790_000_500.0)
    path.write_text(report_html.render(report), encoding="utf-8")
    return path


def assert_all_plots_drawn(state: dict[str, Any]) -> None:
    assert [p["id"] for p in state["plots"]] == PLOT_IDS
    for p in state["plots"]:
        assert p["state"] == "data", p
        assert p["svgWidth"] > 300, p
        assert p["drawn"] >= 1 and p["drawn"] == p["marks"], p
        assert p["legend"] >= 1, p
        assert len(p["axisLabels"]) == 2 and all("(" in t for t in p["axisLabels"]), p


@needs_chromium
def test_pair_report_renders_every_plot_without_console_errors(tmp_path: Path) -> None:
    assert CHROMIUM is not None
    f = write_report(tmp_path / "pair.html", [code_run(), prose_run()])
    with open_page(CHROMIUM, f) as page:
        state = page_state(page)
        shot = page.screenshot(artifact("report-synthetic-pair.png"))
        problems = page.problems()
    print(f"screenshot: {shot}")
    assert problems == []
    assert state["scripts"] == 0
    assert_all_plots_drawn(state)
    assert state["verdicts"] == ["CALIBER_MISMATCH"]
    assert state["evidenceRows"] >= 3
    assert state["runs"] == ["run-11", "run-12"]
    assert "Numbers side by side" in state["text"]
    assert shot.stat().st_size > 20_000


@needs_chromium
def test_the_harness_sees_errors_dialogs_and_blocked_scripts(tmp_path: Path) -> None:
    """The checks above would fail on a page that misbehaves (no false comfort)."""
    assert CHROMIUM is not None
    bad = tmp_path / "bad.html"
    bad.write_text("<!doctype html><title>x</title><script>console.error('boom');"
                   "alert(1)</script>")
    with open_page(CHROMIUM, bad) as page:
        page.evaluate("1")
        problems = page.problems()
    assert any("boom" in p for p in problems) and any(p.startswith("dialog") for p in problems)
    blocked = tmp_path / "blocked.html"
    blocked.write_text(f'<!doctype html><meta http-equiv="Content-Security-Policy" '
                       f'content="{report_html.CSP}"><title>x</title><script>alert(1)</script>')
    with open_page(CHROMIUM, blocked) as page:
        page.evaluate("1")
        problems = page.problems()
    assert problems and not any(p.startswith("dialog") for p in problems)  # CSP refused it


@needs_chromium
def test_script_in_model_text_labels_and_model_name_shows_as_text(tmp_path: Path) -> None:
    assert CHROMIUM is not None
    a, b = evil_pair()
    f = write_report(tmp_path / "evil.html", [a, b])
    source = f.read_text()
    assert "<script" not in source.lower()
    with open_page(CHROMIUM, f) as page:
        page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        state = page_state(page)
        time.sleep(0.2)  # a dialog or error would arrive as an event by now
        page.evaluate("1")
        problems = page.problems()
    assert problems == []  # no alert dialog, no console error, no CSP violation
    assert state["scripts"] == 0
    assert state["text"].count(EVIL) >= 3  # output sample, label, model name
    assert "<b>after</b>" in state["text"]


@needs_chromium
def test_plots_without_engine_data_say_so_in_words(tmp_path: Path) -> None:
    assert CHROMIUM is not None
    run = code_run(windows=False, simulated=True)
    f = write_report(tmp_path / "client-only.html", [run])
    with open_page(CHROMIUM, f) as page:
        state = page_state(page)
        shot = page.screenshot(artifact("report-no-engine-data.png"))
        problems = page.problems()
    print(f"screenshot: {shot}")
    assert problems == []
    by_id = {p["id"]: p for p in state["plots"]}
    for pid in ("decode-over-time", "decode-by-position"):
        assert by_id[pid]["state"] == "data" and by_id[pid]["drawn"] >= 1
    for pid in ("mal-over-time", "step-rate-over-time", "acceptance-by-position"):
        assert by_id[pid]["state"] == "no-data"
        assert by_id[pid]["marks"] == 0
        assert by_id[pid]["noData"].startswith("No data:")
    assert state["simBanner"] and "SIMULATED" in state["text"]


# -- stored runs from the simulator, through the CLI --------------------------------------------
@needs_chromium
def test_simulator_pair_through_probe_and_report_commands(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from decodescope.cli.main import main
    from decodescope.sim.config import SimConfig
    from decodescope.sim.server import SimServer

    assert CHROMIUM is not None
    store = str(tmp_path / "runs.sqlite")
    with SimServer(SimConfig(time_scale=0.05, seed=3)).start_in_thread() as sim:
        for cal in ("demo-code-rewrite", "demo-varied-prose"):
            assert main(["probe", sim.url, "--caliber", cal, "--trials", "2", "--store", store,
                         "--no-fingerprint", "--json"]) == 0
    capsys.readouterr()
    out = artifact("report-simulated-pair.html")
    assert main(["report", "1", "2", "-o", str(out), "--store", store]) == 0
    with open_page(CHROMIUM, out) as page:
        state = page_state(page)
        shot = page.screenshot(artifact("report-simulated-pair.png"))
        problems = page.problems()
    print(f"screenshot: {shot}")
    assert problems == []
    assert state["simBanner"] and state["text"].count("SIMULATED") >= 3
    assert state["verdicts"] == ["CALIBER_MISMATCH"] and state["runs"] == ["run-1", "run-2"]
    by_id = {p["id"]: p for p in state["plots"]}
    for pid in ("decode-over-time", "decode-by-position"):  # client data always exists
        assert by_id[pid]["state"] == "data" and by_id[pid]["drawn"] >= 1
    for p in state["plots"]:  # engine plots: drawn, or say why not in words
        assert (p["state"] == "data" and p["drawn"] >= 1) or (
            p["state"] == "no-data" and p["marks"] == 0 and p["noData"].startswith("No data: "))


# -- the real engine: the seed's phenomenon on a CPU ---------------------------------------------
@pytest.mark.e2e
@pytest.mark.timeout(1500)
@needs_chromium
def test_real_engine_caliber_mismatch_pair_report(llamacpp_pair: Any) -> None:
    """The session's real n-gram llama.cpp pair (tests/llamacpp_pair.py: code rewrite, then
    varied prose, two trials each; probed here only when this test runs without
    tests/test_e2e_llamacpp_decompose.py) in one report."""
    import json

    from decodescope.cli.main import main

    if _no_llamacpp():
        pytest.skip("embedded engine not installed: run `decodescope engine install`")
    assert CHROMIUM is not None
    try:
        ids = [str(llamacpp_pair.run(cal)["id"])
               for cal in ("demo-code-rewrite", "demo-varied-prose")]
    finally:
        llamacpp_pair.stop()  # started here when the decompose module did not run
    store = llamacpp_pair.store
    html_out = artifact("report-real-engine.html")
    for fmt, path in (("html", html_out), ("md", artifact("report-real-engine.md")),
                      ("json", artifact("report-real-engine.json"))):
        assert main(["report", *ids, "--format", fmt, "-o", str(path),
                     "--store", str(store)]) == 0
    doc = json.loads(artifact("report-real-engine.json").read_text())
    assert all(r["engine_pool"]["mal"] > 1.0 for r in doc["runs"])  # real speculation counted
    assert doc["comparisons"][0]["caliber_same"] is False
    with open_page(CHROMIUM, html_out) as page:
        state = page_state(page)
        shot = page.screenshot(artifact("report-real-engine.png"))
        problems = page.problems()
    print(f"screenshot: {shot}\nreport: {html_out}")
    assert problems == []
    assert not state["simBanner"] and "llamacpp" in state["text"]
    assert state["runs"] == [f"run-{i}" for i in ids]
    assert state["verdicts"] == ["CALIBER_MISMATCH"]
    assert state["evidenceRows"] >= 3 and "same caliber?" in state["text"]
    assert_all_plots_drawn(state)


def _no_llamacpp() -> bool:
    from llamacpp_pair import INSTALL

    return INSTALL is None
