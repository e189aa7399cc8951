"""The HTML report in a real headless Chromium: loads without console errors, draws every plot,
shows model text as text. Screenshots go to artifacts/ (gitignored) and their paths are printed.

Needs Debian's chromium (`apt-get install -y chromium`); skips with that reason without it.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_report_cdp import SKIP_REASON, find_chromium, open_page, page_state
from test_report_fixtures import EVIL, code_run, evil_pair, prose_run

from decodescope.report import html
from decodescope.report.model import build_report

CHROMIUM = find_chromium()
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason=SKIP_REASON)
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
PLOT_IDS = ["decode-over-time", "mal-over-time", "step-rate-over-time", "decode-by-position",
            "acceptance-by-position"]


def artifact(name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS / name


def write_report(path: Path, runs: list, **kw: object) -> Path:  # type: ignore[type-arg]
    report = build_report(runs, generated_at=1_790_000_500.0, **kw)  # type: ignore[arg-type]
    path.write_text(html.render(report), encoding="utf-8")
    return path


def assert_all_plots_drawn(state: dict) -> None:  # type: ignore[type-arg]
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
