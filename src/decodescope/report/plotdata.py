"""The plots of a report as data: title, axes with units, one series per run and role (pure).

A plot whose series hold no value carries `no_data` (the reason, in words) and draws nothing:
a missing measurement is never drawn as zero.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from decodescope.records.stored_run import StoredRun
from decodescope.records.window import EngineWindow
from decodescope.report import curves


@dataclass(frozen=True)
class Series:
    name: str  # legend text
    run_id: int | None
    color: int  # index into the renderer's palette: one colour per run
    role: str  # "client" | "engine"
    points: tuple[tuple[float, float | None], ...]  # y None breaks the line

    @property
    def has_data(self) -> bool:
        return any(y is not None for _, y in self.points)


@dataclass(frozen=True)
class Mark:
    """A vertical mark across a line plot: a line at x0 (kind "line") or a shaded band from
    x0 to x1 (kind "band"); `label` is its tooltip, `cls` its class (the legend says it)."""

    kind: str  # "line" | "band"
    x0: float
    x1: float
    label: str
    cls: str = ""


@dataclass(frozen=True)
class Plot:
    id: str
    title: str
    kind: str  # "line" | "bars"
    x_label: str  # with its unit
    y_label: str
    series: tuple[Series, ...]
    categories: tuple[str, ...] = ()  # bars: one label per x slot
    no_data: str | None = None  # why nothing is drawn (set when no series has a value)
    note: str | None = None
    y_max: float | None = None  # fixed top of the y axis (percentages)
    marks: tuple[Mark, ...] = ()  # vertical lines and bands (line plots)

    @property
    def has_data(self) -> bool:
        return self.no_data is None


def all_plots(runs: Sequence[StoredRun], names: Sequence[str]) -> tuple[Plot, ...]:
    t0s = [curves.run_t0(r) for r in runs]
    engines = [curves.deciding_windows(r) for r in runs]
    return (
        decode_over_time(runs, names, t0s, engines),
        _engine_over_time("mal-over-time", "MAL over time", "MAL (tokens / verification step)",
                          runs, names, t0s, engines, lambda w: w.mal, "MAL"),
        _engine_over_time("step-rate-over-time", "Step rate over time",
                          "step rate (verification steps / s / request)",
                          runs, names, t0s, engines, lambda w: w.step_rate, "step rate"),
        decode_by_position(runs, names),
        acceptance_by_position(runs, names),
    )


def _finish(plot: Plot, why: str) -> Plot:
    if any(s.has_data for s in plot.series):
        return plot
    return Plot(**{**plot.__dict__, "series": (), "no_data": why})


def _engine_note(series: Sequence[Series]) -> str | None:
    srcs = sorted({s.name.rsplit("(", 1)[-1].rstrip(")") for s in series if s.role == "engine"})
    if not srcs:
        return None
    note = "engine: windows from " + ", ".join(srcs) + " (each window a flat segment)"
    if "prometheus" in srcs:
        note += ("; llama.cpp and SGLang update their counters when a request ends, so their "
                 "windows span whole trials, prefill included")
    return note


def why_no_engine_values(engines: Sequence[tuple[str | None, list[EngineWindow]]],
                         what: str) -> str:
    """In words: why engine windows gave no `what` ("MAL", "step rate", "decode rate")."""
    ws = [w for _, src_ws in engines for w in src_ws]
    if not ws:
        return ("these runs have no engine windows (no /metrics scrape, engine log or "
                "per-request engine timings)")
    if all(w.duration_s is None for w in ws):
        return "the engine windows have no start and end times"
    if what == "MAL" or all(w.drafts is None for w in ws):
        return ("the engine windows carry no speculative-decoding counts (drafts, accepted "
                "tokens): speculation off, or an engine that does not report them")
    return (f"the engine windows give no per-request {what}: their running-request count is "
            "0 or missing (a gauge read after the request ended)")


def decode_over_time(runs: Sequence[StoredRun], names: Sequence[str], t0s: Sequence[float | None],
                     engines: Sequence[tuple[str | None, list[EngineWindow]]]) -> Plot:
    series: list[Series] = []
    bucket = curves.bucket_seconds([p for r in runs for p in curves.wall_points(r)])
    for i, (run, name, t0) in enumerate(zip(runs, names, t0s, strict=True)):
        if t0 is None:
            continue
        pts = curves.client_rate(run, t0, bucket)
        series.append(Series(f"{name} · client", run.id, i, "client", tuple(pts)))
        src, ws = engines[i]
        steps = curves.window_steps(ws, t0, curves.engine_decode)
        if steps:
            series.append(Series(f"{name} · engine ({src})", run.id, i, "engine", tuple(steps)))
    drawn = tuple(s for s in series if s.has_data)
    note = f"client: tokens received per {bucket:g} s bucket ÷ covered time, per request (TTFT excluded)"
    eng = _engine_note(drawn)
    if eng is None:
        eng = "engine: none drawn — " + why_no_engine_values(engines, "decode rate")
    plot = Plot("decode-over-time", "Decode rate over time", "line",
                "time since the run's first request (s)", "decode rate (tokens / s / request)",
                drawn, note=note + "; " + eng)
    return _finish(plot, "no request of these runs streamed two or more token-carrying chunks")


def _engine_over_time(pid: str, title: str, y_label: str, runs: Sequence[StoredRun],
                      names: Sequence[str], t0s: Sequence[float | None],
                      engines: Sequence[tuple[str | None, list[EngineWindow]]],
                      value: Callable[[EngineWindow], float | None], what: str) -> Plot:
    series = []
    for i, (run, name, t0) in enumerate(zip(runs, names, t0s, strict=True)):
        src, ws = engines[i]
        if t0 is None or not ws:
            continue
        steps = curves.window_steps(ws, t0, value)
        series.append(Series(f"{name} · engine ({src})", run.id, i, "engine", tuple(steps)))
    drawn = tuple(s for s in series if s.has_data)
    plot = Plot(pid, title, "line", "time since the run's first request (s)", y_label, drawn,
                note=_engine_note(drawn))
    return _finish(plot, why_no_engine_values(engines, what))


def decode_by_position(runs: Sequence[StoredRun], names: Sequence[str]) -> Plot:
    bucket = curves.position_bucket(runs)
    series = [Series(f"{name} · client", run.id, i, "client",
                     tuple(curves.rate_by_position(run, bucket)))
              for i, (run, name) in enumerate(zip(runs, names, strict=True))]
    plot = Plot("decode-by-position", "Decode rate vs output position (length decay)", "line",
                "output position (tokens)", "decode rate (tokens / s / request)",
                tuple(s for s in series if s.has_data),
                note=f"mean over requests of the rate inside each {bucket}-token bucket")
    return _finish(plot, f"no request streamed a full {bucket}-token stretch of timed chunks")


def acceptance_by_position(runs: Sequence[StoredRun], names: Sequence[str]) -> Plot:
    rates: list[tuple[int, str, list[float]]] = []
    for i, (run, name) in enumerate(zip(runs, names, strict=True)):
        src, ws = curves.deciding_windows(run)
        r = curves.acceptance_by_position(ws)
        if r is None:  # another source may carry per-position counts
            for other in curves.DECIDING_SOURCES:
                r = curves.acceptance_by_position(
                    [w for w in run.windows if w.source == other and "reset" not in w.flags])
                if r is not None:
                    break
        if r is not None:
            rates.append((i, name, r))
    k = max((len(r) for _, _, r in rates), default=0)
    series = tuple(
        Series(name, runs[i].id, i, "engine",
               tuple((float(p), 100.0 * v) for p, v in enumerate(r)))
        for i, name, r in rates)
    plot = Plot("acceptance-by-position", "Per-position acceptance", "bars",
                "draft position (index of the token in the draft)", "accepted (% of drafts)", series,
                categories=tuple(str(p + 1) for p in range(k)), y_max=100.0,
                note="share of verification steps whose draft token at this position was "
                     "accepted (accepted_per_pos ÷ drafts); MAL = 1 + the sum of the bars ÷ 100")
    return _finish(plot, "no engine window carries per-position acceptance counts "
                         "(vLLM and llama.cpp /metrics do; logs and SGLang do not)")
