"""Issue 23, class 3: text from a server or a label is text in every output format.

Hostile model ids and labels go through the one escaping module (`decodescope.markup`) and
come out of `triage --format md`, `report --format md` and `report --format html` without
live markup: the Markdown is rendered by a CommonMark renderer (markdown-it, with tables) and
the HTML it makes holds no element, link or image that the hostile text asked for; terminal
output holds no control sequence.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from decodescope import markup
from decodescope.cli.main import main
from decodescope.sim import SimConfig, SimServer

pytestmark = pytest.mark.timeout(300)

# What a hostile server or user can put in a model id or a label.
PAYLOADS = (
    "<script>alert(1)</script>",
    "<svg onload=alert(1)>",
    "<img src=x onerror=alert(1)>",
    "<iframe src=//evil.example></iframe>",
    "[click me](http://evil.example/phish)",
    "![pixel](http://evil.example/track.png)",
    "<http://evil.example/autolink>",
    "a | b | c",
    "`code` and ``more``",
    "**bold** _em_ ~~strike~~",
    "# heading",
    "\x1b[31mred\x1b[0m \x1b]0;title\x07 \x1b]8;;http://evil.example\x1b\\link\x1b]8;;\x1b\\",
    "line one\n| x | y |\n<script>next()</script>",
)
# Elements that would be live in a rendered page; any element with an on* handler or a link
# out of the page is live too (the report's own inline SVG has neither).
LIVE_TAGS = {"script", "img", "iframe", "a", "object", "embed", "link"}
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

_md = MarkdownIt("commonmark").enable("table")


def rendered(markdown: str) -> str:
    return _md.render(markdown)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.live: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        handlers = [k for k, _ in attrs if k.startswith("on")]
        links = [v for k, v in attrs if k in ("href", "src") and v and not v.startswith("#")]
        if handlers or links or tag in LIVE_TAGS:
            self.live.append(f"<{tag} {attrs}>")


def assert_no_live_markup(html: str) -> None:
    p = _Tags()
    p.feed(html)
    assert not p.live, p.live


# -- the module --------------------------------------------------------------------------------
@pytest.mark.parametrize("payload", PAYLOADS)
def test_markdown_prose_renders_as_the_text_itself(payload: str) -> None:
    html = rendered(markup.md_text(payload))
    assert_no_live_markup(html)
    assert "<em>" not in html and "<strong>" not in html and "<code>" not in html
    assert "<h1>" not in html and "<s>" not in html
    assert not CONTROL.search(markup.md_text(payload))


@pytest.mark.parametrize("payload", PAYLOADS)
def test_markdown_cell_keeps_the_table_shape(payload: str) -> None:
    table = f"| a | b |\n|---|---|\n| {markup.md_cell(payload)} | after |\n"
    html = rendered(table)
    assert_no_live_markup(html)
    row = html.split("<tbody>", 1)[1]
    assert row.count("<td>") == 2 and "<td>after</td>" in row  # the payload stayed in its cell


@pytest.mark.parametrize("payload", PAYLOADS)
def test_html_escapes_and_strips_controls(payload: str) -> None:
    out = markup.html(payload)
    assert "<" not in out and ">" not in out and '"' not in out
    assert not CONTROL.search(out)


def test_plain_text_reads_the_same_when_rendered() -> None:
    text = "gemma_3-270m [SIMULATED] a*b 95% CI −3.1% … +2.0% (side=current)"
    html = rendered(markup.md_text(text))
    assert html == f"<p>{text}</p>\n"


def test_code_span_and_fence_line_cannot_be_closed_from_inside() -> None:
    span = markup.md_code_span("a `b` ``c`` <script>")
    html = rendered(span)
    assert html.count("<code>") == 1 and "&lt;script&gt;" in html
    line = markup.md_fence_line("echo ```\n<script>x</script>")
    html = rendered(f"```sh\n{line}\n```\n")
    assert html.count("<pre>") == 1 and "<script" not in html


def test_terminal_text_has_no_control_sequence() -> None:
    for p in PAYLOADS:
        assert not CONTROL.search(markup.terminal(p))


# -- every output format, from a hostile server and hostile labels -----------------------------
HOSTILE_MODEL = ("m<script>alert(1)</script>![x](http://evil.example/p.png)"
                 "[l](http://evil.example)|`x`\x1b]0;pwned\x07")
HOSTILE_LABEL = "<img src=x onerror=alert(1)>[a](http://evil.example)|![i](http://evil.example/i.png)"


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    store = str(tmp_path_factory.mktemp("hostile") / "runs.sqlite")
    handle = SimServer(SimConfig(time_scale=0.25, seed=7, model=HOSTILE_MODEL)).start_in_thread()
    try:
        for side in ("baseline", "current"):
            assert main(["probe", handle.url, "--caliber", "demo-code-rewrite", "--trials", "2",
                         "--store", store, "--label", f"side={side}", "--label",
                         f"note={HOSTILE_LABEL}", "--no-fingerprint", "--json"]) == 0
    finally:
        handle.stop()
    yield store


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    assert not CONTROL.search(out.replace("\n", "").replace("\t", "")), out
    assert not CONTROL.search(err.replace("\n", "").replace("\t", "")), err
    return code, out


def test_the_runs_really_carry_the_hostile_strings(hostile_store: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import json

    _, out = _run(capsys, "runs", "show", "last", "--store", hostile_store, "--json")
    doc: dict[str, Any] = json.loads(out)
    assert doc["model"] == HOSTILE_MODEL and doc["labels"]["note"] == HOSTILE_LABEL


def test_triage_markdown_has_no_live_markup(hostile_store: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, md = _run(capsys, "triage", "side=current", "--baseline", "side=baseline", "--store",
                    hostile_store, "--format", "md")
    assert code in (0, 1, 2, 3, 4), md
    assert md.startswith("## ")
    assert_no_live_markup(rendered(md))


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_report_has_no_live_markup(hostile_store: str, capsys: pytest.CaptureFixture[str],
                                   tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"r.{fmt}"
    code, _ = _run(capsys, "report", "1", "2", "--store", hostile_store, "--format", fmt,
                   "-o", str(out))
    assert code == 0
    text = out.read_text("utf-8")
    assert "evil.example" in text  # the hostile text is there, as text
    assert not CONTROL.search(text.replace("\n", "").replace("\t", ""))
    assert_no_live_markup(rendered(text) if fmt == "md" else text)


def test_terminal_output_has_no_control_sequences(hostile_store: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["triage", "side=current", "--baseline", "side=baseline"],
                 ["runs", "show", "last"], ["runs", "list"], ["report", "1", "2",
                                                              "--format", "md"]):
        _run(capsys, *args, "--store", hostile_store)


def test_sweep_markdown_and_plot_have_no_live_markup(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "sweep.sqlite")
    plot = tmp_path / "load.html"
    handle = SimServer(SimConfig(time_scale=0.25, seed=7, model=HOSTILE_MODEL)).start_in_thread()
    try:
        code, md = _run(capsys, "sweep", handle.url, "--calibers",
                        "demo-code-rewrite,demo-varied-prose", "--trials", "2", "--store", store,
                        "--label", f"note={HOSTILE_LABEL}", "--no-fingerprint", "--format", "md")
        assert code == 0 and "| caliber |" in md and "evil.example" in md  # there, as text
        assert_no_live_markup(rendered(md))
        code, md = _run(capsys, "sweep", handle.url, "--caliber", "demo-code-rewrite",
                        "--concurrency", "1,2", "--trials", "2", "--store", store, "--label",
                        f"note={HOSTILE_LABEL}", "--no-fingerprint", "--format", "md",
                        "--plot", str(plot))
    finally:
        handle.stop()
    assert code == 0
    assert_no_live_markup(rendered(md))
    assert_no_live_markup(plot.read_text("utf-8"))
