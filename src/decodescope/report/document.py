"""The report as data: runs, their numbers, the comparison and the plots (pure).

Built from stored runs by `build_report`; rendered by `report.report_html`, `report.report_md`
and `report.report_json`. Numbers stay numbers here (None = no data); renderers format them.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from decodescope import __version__
from decodescope.analysis.decay import decay_pct, withheld_reason
from decodescope.analysis.run_quantities import deciding_of, quantities_of, speculative_of
from decodescope.records.stored_run import StoredRun
from decodescope.report import curves, verdict_md
from decodescope.report.comparison import Comparison, Judge, compare, with_result
from decodescope.report.distributions import run_distributions
from decodescope.report.plotdata import Plot, all_plots
from decodescope.verdict.side import Side
from decodescope.verdict.side_from_runs import side_from_runs

REPORT_SCHEMA_VERSION = 1  # bump with a note in docs/reports.md when a field changes meaning
REPORT_KIND = "decodescope.report"
OUTPUT_SAMPLE_CHARS = 600  # enough to see what the model wrote (code or prose), not a dump

@dataclass(frozen=True)
class RunSection:
    run_id: int
    name: str  # "run 12 · demo-code-rewrite@1"
    short: str  # legend name: "#12 demo-code-rewrite"
    color: int
    simulated: bool
    status: str
    created_at: float
    caliber_ref: str | None
    caliber_identity: str | None
    caliber: dict[str, Any]  # content class, task class, thinking, output, sampling
    engine: str | None
    model: str | None
    url: str | None
    labels: dict[str, str]
    client: dict[str, Any]  # Summary dicts by metric (None = no data)
    engine_source: str | None
    engine_pool: dict[str, Any] | None  # counts pooled over the windows of engine_source
    engine_windows: dict[str, Any]  # per-window spread: decode median/peak, MAL min/max
    caliber_status: str | None
    reconciliation: str | None
    length_decay_pct: float | None
    trials: tuple[dict[str, Any], ...]
    findings: tuple[dict[str, Any], ...]
    output_sample: str | None = None  # the start of the first request's text, as the model wrote it
    # report.distributions.run_distributions: per-request latency percentiles and per-trial
    # throughput (per request / all requests); None when the traces were not read
    distributions: dict[str, Any] | None = None
    # analysis.run_quantities: who decides the decode rate (decided once) and the run's reported
    # quantities (records.quantity.Quantity dicts): the report renders these, never recomputes
    deciding: dict[str, Any] = field(default_factory=dict)
    quantities: dict[str, dict[str, Any]] = field(default_factory=dict)
    # why the run states no length decay (outputs too short for a slope per 1K tokens)
    length_decay_withheld: str | None = None


@dataclass(frozen=True)
class Report:
    title: str
    generated_at: float
    runs: tuple[RunSection, ...]
    comparisons: tuple[Comparison, ...]
    plots: tuple[Plot, ...]
    side_by_side: tuple[dict[str, str], ...] = ()  # caliber | decode | mal | source, per run
    tool_version: str = __version__
    schema_version: int = REPORT_SCHEMA_VERSION
    kind: str = REPORT_KIND
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def simulated(self) -> bool:
        return any(r.simulated for r in self.runs)

    def run(self, run_id: int) -> RunSection:
        return next(r for r in self.runs if r.run_id == run_id)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        head = {"schema_version": self.schema_version, "kind": self.kind,
                "tool_version": self.tool_version, "simulated": self.simulated}
        return {**head, **{k: v for k, v in d.items() if k not in head}}


def build_report(runs: Sequence[StoredRun], *, baseline: StoredRun | None = None,
                 generated_at: float, judge: Judge | None = None,
                 title: str | None = None, sides: Mapping[int, Side] | None = None,
                 store: Any = None) -> Report:
    """Runs in the given order (the baseline first); pairs: every run against `baseline`, or
    the first of exactly two runs against the second when there is no baseline.

    `sides`: the verdict sides of engine-log windows given in place of runs (`FILE@A..B`),
    by the (negative) id of the run that carries their windows (`log_window_run`).
    `store`: the run store the runs came from; the verdict learns each stack's between-run
    spread from it (verdict.judge), as `triage` does, so report and triage read one verdict."""
    sides = dict(sides or {})
    if judge is None:
        def judge(b: StoredRun, c: StoredRun) -> Any:
            from decodescope.verdict.judge import judge as verdict_of

            return verdict_of(_side_of(b, sides), _side_of(c, sides), store=store)
    ordered = [with_result(r) for r in ([baseline] if baseline else [])
               + [r for r in runs if not baseline or r.id != baseline.id]]
    sections = tuple(run_section(r, i) for i, r in enumerate(ordered))
    if baseline is not None:
        pairs = [(baseline, r) for r in ordered[1:]]
    elif len(ordered) == 2:
        pairs = [(ordered[0], ordered[1])]
    else:
        pairs = []
    comparisons = tuple(compare(b, c, judge) for b, c in pairs)
    if title is None:
        title = ("decodescope report: " + " vs ".join(s.short for s in sections)
                 if len(sections) > 1 else f"decodescope report: {sections[0].name}")
    return Report(title=title, generated_at=generated_at, runs=sections,
                  comparisons=comparisons, plots=all_plots(ordered, [s.short for s in sections]),
                  side_by_side=tuple(side_by_side_row(r, sides.get(r.id)) for r in ordered))


def _side_of(run: StoredRun, sides: Mapping[int, Side]) -> Side:
    return sides[run.id] if run.id in sides else side_from_runs([with_result(run)])


def log_window_run(side: Side, windows: Sequence[Any], selector: str, run_id: int) -> StoredRun:
    """An engine-log window as a report section: no trials, its engine windows (plotted like a
    run's), the side's name. `run_id` is negative: it names no stored run."""
    t0 = min((w.t_start_s for w in windows if w.t_start_s is not None), default=0.0)
    return StoredRun(
        id=run_id, created_at=t0, finished_at=None, kind="log", status="log window",
        url=None, model=None, engine=side.engine, simulated=side.simulated, caliber_ref=None,
        caliber_identity=None, caliber=None, labels={}, warnings=[], fingerprint=None,
        result={}, meta={"log_selector": selector, "source": side.source},
        windows=list(windows))


def side_by_side_row(run: StoredRun, side: Side | None = None) -> dict[str, str]:
    """One row of the seed's "Numbers side by side" table. A stored run's decode rate and MAL
    are its reported quantities (analysis.run_quantities.quantities_of: the records its section,
    `runs list`, `runs show` and the CSV export show, statistic named), so one document never
    shows a run's MAL under two statistics; an engine-log window's are its verdict side's
    (report.verdict_md, as `decodescope triage` words them)."""
    side = side or side_from_runs([run])
    res = run.result or {}
    if not res.get("trials"):
        return {"caliber": verdict_md.caliber_cell(side), "decode": verdict_md.decode_cell(side),
                "mal": verdict_md.mal_cell(side), "source": side.source}
    qs = quantities_of(res)
    head = qs["decode_rate"]
    decode = head.cell() + (f" ({head.source})" if head.value is not None and head.source
                            else "")
    mal = ("1 by definition (no drafts)" if speculative_of(qs) is False else qs["mal"].cell())
    return {"caliber": verdict_md.caliber_cell(side), "decode": decode, "mal": mal,
            "source": side.source}


def run_section(run: StoredRun, color: int) -> RunSection:
    res = with_result(run).result or {}
    cal = run.caliber or {}
    name = (run.caliber_ref or "?").split("@")[0]
    src, windows = curves.deciding_windows(run)
    pool = ((res.get("engine") or {}).get(src) if src else None)
    decay = res.get("length_decay") or {}
    rec = res.get("reconciliation") or {}
    log = run.meta.get("log_selector") if run.kind == "log" else None
    return RunSection(
        run_id=run.id,
        name=(f"log window {log}" if log else f"run {run.id} · {run.caliber_ref or 'no caliber'}"),
        short=(str(log) if log else f"#{run.id} {name}") + (" (simulated)" if run.simulated else ""),
        color=color,
        simulated=run.simulated,
        status=run.status,
        created_at=run.created_at,
        caliber_ref=run.caliber_ref,
        caliber_identity=run.caliber_identity,
        caliber=_caliber_brief(cal),
        engine=run.engine,
        model=run.model,
        url=run.url,
        labels=dict(run.labels),
        client=dict(res.get("client") or {}),
        engine_source=src,
        engine_pool=pool,
        engine_windows=_window_spread(windows),
        caliber_status=res.get("caliber_status"),
        reconciliation=rec.get("text") if isinstance(rec, dict) else None,
        length_decay_pct=decay_pct(decay),
        length_decay_withheld=withheld_reason(decay) if decay else None,
        trials=tuple(res.get("trials") or ()),
        findings=tuple(res.get("findings") or ()),
        output_sample=_output_sample(run),
        distributions=run_distributions(run) if any(t.requests for t in run.trials) else None,
        deciding=dict(deciding_of(res)) if res.get("trials") else {},
        quantities=({k: q.to_dict() for k, q in quantities_of(res).items()}
                    if res.get("trials") else {}),
    )


def _output_sample(run: StoredRun) -> str | None:
    for r in curves.ok_requests(run):
        text = "".join(c.reasoning + c.content for c in r.chunks)
        if text:
            return text[:OUTPUT_SAMPLE_CHARS] + ("…" if len(text) > OUTPUT_SAMPLE_CHARS else "")
    return None


def _caliber_brief(cal: dict[str, Any]) -> dict[str, Any]:
    prompt = cal.get("prompt") or {}
    out = cal.get("output") or {}
    sampling = cal.get("sampling") or {}
    return {
        "description": cal.get("description"),
        "content_class": prompt.get("content_class"),
        "task_class": cal.get("task_class"),
        "thinking": cal.get("thinking"),
        "concurrency": cal.get("concurrency"),
        "max_tokens": out.get("max_tokens"),
        "steady_state_start": out.get("steady_state_start"),
        "temperature": sampling.get("temperature"),
        "top_p": sampling.get("top_p"),
    }


def _window_spread(windows: Sequence[Any]) -> dict[str, Any]:
    decode = [v for v in (curves.engine_decode(w) for w in windows) if v is not None]
    mal = [w.mal for w in windows if w.mal is not None]
    step = [w.step_rate for w in windows if w.step_rate is not None]
    durs = [w.duration_s for w in windows if w.duration_s is not None]
    return {
        "n": len(windows),
        "duration_median_s": statistics.median(durs) if durs else None,
        "decode_median": statistics.median(decode) if decode else None,
        "decode_peak": max(decode) if decode else None,
        "mal_min": min(mal) if mal else None,
        "mal_max": max(mal) if mal else None,
        "step_rate_median": statistics.median(step) if step else None,
    }
