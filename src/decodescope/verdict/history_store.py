"""`decodescope history` over stored runs: select a series (and a control), detect, attribute.

A selector names a series of stored runs: a label `key=value` (`check=gpu-a`; `host=NAME`
also matches the fingerprint's host name when no run carries a `host` label), or an endpoint
URL (the runs probed at it). `--caliber` restricts it to one caliber; without it the series
must hold one caliber only (a history across calibers would read a caliber change as a change
of the endpoint). The runs become points (verdict.history.points_from_runs) and
verdict.history.detect finds and attributes the change points.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from decodescope.errors import UsageError
from decodescope.exitcodes import ExitCode
from decodescope.records.stored_run import StoredRun
from decodescope.records.window import EngineWindow
from decodescope.verdict import history as hi

SELECTOR_HELP = ("a label key=value (check=gpu-a, host=NAME), an endpoint URL "
                 "(http://host:port), or a Prometheus range (prom+http://HOST:9090/?job=vllm@A..B)")


@dataclass(frozen=True)
class HistoryResult:
    selector: str
    control_selector: str | None
    caliber: str | None  # the caliber's reference (name@version)
    basis: str  # "engine decode rate" | "client decode rate"
    history: hi.History

    @property
    def exit_code(self) -> int:
        return exit_code(self.history)

    def to_dict(self) -> dict[str, Any]:
        return {"selector": self.selector, "control": self.control_selector,
                "caliber": self.caliber, "basis": self.basis,
                "exit_code": self.exit_code, **self.history.to_dict()}


@dataclass(frozen=True)
class FleetResult:
    """`LABEL=*`: one history per value of a label, and what the fleet did at once."""

    selector: str
    series: dict[str, HistoryResult]
    notes: list[str]

    @property
    def exit_code(self) -> int:
        codes = [r.exit_code for r in self.series.values()]
        if int(ExitCode.REGRESSION) in codes:
            return int(ExitCode.REGRESSION)
        if codes and all(c == int(ExitCode.INCONCLUSIVE) for c in codes):
            return int(ExitCode.INCONCLUSIVE)
        return int(ExitCode.OK)

    def to_dict(self) -> dict[str, Any]:
        return {"selector": self.selector, "exit_code": self.exit_code, "fleet": self.notes,
                "series": {k: v.to_dict() for k, v in self.series.items()}}


def fleet(store: Any, selector: str, *, control: str | None = None, caliber: str | None = None,
          since: str | None = None, until: str | None = None,
          method: hi.Method = hi.DEFAULT_METHOD) -> FleetResult:
    """`LABEL=*`: the history of every value of label LABEL (the control's own value left out),
    and, without a control, whether at least half of at least FLEET_MIN series moved at once
    (verdict.history.fleet_note)."""
    from decodescope.store import runs as sr

    key = selector.strip()[:-2]
    t0, t1 = parse_when(since, "--since"), parse_when(until, "--until")
    values = sorted({r.labels[key] for r in sr.list_runs(store, caliber=caliber, limit=10**9)
                     if key in r.labels and (t0 is None or r.created_at >= t0)
                     and (t1 is None or r.created_at <= t1)})
    if control is not None:
        values = [v for v in values if f"{key}={v}" != control.strip()]
    if not values:
        raise UsageError(f"no stored runs carry the label {key}", where=selector,
                         remedy="List runs and their labels with `decodescope runs list`")
    series = {f"{key}={v}": history(store, f"{key}={v}", control=control, caliber=caliber,
                                    since=since, until=until, method=method) for v in values}
    notes = [] if control else hi.fleet_note({k: r.history for k, r in series.items()})
    return FleetResult(selector, series, notes)


def exit_code(h: hi.History) -> int:
    """1 when a REGRESSION of the stack is in the range, 3 when the history is too short to
    tell, else 0 (no change, improvements, content shifts, environment)."""
    if h.regression:
        return int(ExitCode.REGRESSION)
    if h.status == "inconclusive":
        return int(ExitCode.INCONCLUSIVE)
    return int(ExitCode.OK)


def parse_when(text: str | None, where: str) -> float | None:
    """An ISO date/time (UTC unless it says otherwise) or epoch seconds."""
    if text is None:
        return None
    s = text.strip()
    try:
        v = float(s)
        if math.isfinite(v):
            return v
    except ValueError:
        pass
    try:
        d = datetime.fromisoformat(s)
    except ValueError:
        raise UsageError(f"not a date or time: {text!r}", where=where,
                         remedy="Give an ISO date/time (2026-12-01 or 2026-12-01T18:00) or "
                                "epoch seconds") from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=timezone.utc)
    return d.timestamp()


def _matches(run: StoredRun, selector: str) -> bool:
    s = selector.strip()
    if s.startswith(("http://", "https://")):
        return (run.url or "").rstrip("/") == s.rstrip("/")
    k, v = s.split("=", 1)
    if k in run.labels:
        return run.labels[k] == v
    if k == "host":
        fp = run.fingerprint or {}
        item = ((fp.get("sections") or {}).get("host") or {}).get("hostname") or {}
        return isinstance(item, dict) and item.get("value") == v
    return False


def check_selector(selector: str, where: str) -> str:
    s = selector.strip()
    if not (s.startswith(("http://", "https://")) or ("=" in s and s.index("=") > 0)):
        raise UsageError(f"not a history selector: {selector!r}", where=where,
                         remedy=f"Use {SELECTOR_HELP}")
    return s


def select_runs(store: Any, selector: str, *, caliber: str | None = None,
                since: float | None = None, until: float | None = None,
                where: str = "SELECTOR") -> list[StoredRun]:
    """The stored runs a selector names, in the time range (newest last)."""
    from decodescope.store import runs as sr

    s = check_selector(selector, where)
    runs = [r for r in sr.list_runs(store, caliber=caliber, limit=10**9)
            if _matches(r, s) and (since is None or r.created_at >= since)
            and (until is None or r.created_at <= until)]
    runs.sort(key=lambda r: (r.created_at, r.id))
    return runs


def _one_caliber(runs: Sequence[StoredRun], selector: str) -> str | None:
    ids = {r.caliber_identity for r in runs if r.caliber_identity}
    if len(ids) > 1:
        refs = sorted({r.caliber_ref or str(r.caliber_identity) for r in runs})
        raise UsageError(f"the runs of {selector} were taken at {len(ids)} calibers "
                         f"({', '.join(refs)}): a caliber change would read as a change of the "
                         "endpoint", where=selector, remedy="Choose one with --caliber NAME")
    return next((r.caliber_ref for r in runs if r.caliber_ref), None)


def _over_engine_seconds(w: EngineWindow) -> EngineWindow:
    """A window whose engine counts a request's tokens when it finishes, together with the
    seconds it spent decoding them (llama.cpp's tokens_predicted_seconds_total, kept as
    printed["decode_s"]): its tokens over its wall time count the requests that happened to
    finish in it (24, 48, 72 tok/s for one, two, three 96-token requests in a 4 s step,
    whatever their speed), so its rates are taken over those engine seconds, per request
    (running 1: the seconds are summed over requests)."""
    d = w.printed.get("decode_s")
    if w.flags or not d or d <= 0 or w.t_start_s is None or not w.generation_tokens:
        return w
    return replace(w, t_end_s=w.t_start_s + d, running=1.0)


def points_from_windows(windows: Sequence[EngineWindow], *, engine: str | None,
                        spec: dict[str, Any] | None) -> list[hi.Point]:
    """Engine windows (a Prometheus range, one per query step) as history points: each active
    window's decode rate per running request, step rate and tokens per step, made exactly as
    a log side's units are (verdict.side.side_from_windows, one window per unit). A
    window flagged reset or gap has no counts; the window after a reset is marked a restart
    (a known place: tested like a stack change, though what the engine restarted with is
    unseen)."""
    from decodescope.verdict.side_from_windows import side_from_windows

    out: list[hi.Point] = []
    restart = False
    for w in windows:
        if "reset" in w.flags:
            restart = True
        w = _over_engine_seconds(w)
        if w.flags or not w.generation_tokens or not w.running or w.t_start_s is None:
            continue
        side = side_from_windows("w", [w], engine=engine, logged_spec=spec, trim=False, block=1)
        if not side.units:
            continue
        u = side.units[0]
        if not u.engine_decode_rate:
            continue
        tps, metric = ((u.tokens_per_step, "tokens per step") if u.tokens_per_step
                       else (u.mal, "MAL"))
        t = datetime.fromtimestamp(w.t_start_s, tz=timezone.utc).strftime("%m-%d %H:%M:%S")
        out.append(hi.Point(key=f"window {t}", t=w.t_start_s, decode=u.engine_decode_rate,
                            step_rate=u.step_rate, tokens_per_step=tps,
                            acceptance_metric=metric, restart=restart))
        restart = False
    return out


def prom_history(selector: str, *, control: str | None = None, server: str | None = None,
                 engine: str | None = None, client: Any = None,
                 method: hi.Method = hi.DEFAULT_METHOD,
                 fingerprints: Sequence[StoredRun] = ()) -> HistoryResult:
    """The change points of a Prometheus range (`prom+http://HOST:9090/?job=vllm@A..B`), one
    point per query step; `control` another Prometheus selector; `fingerprints`: stored runs
    of the same endpoint whose fingerprints say what changed across each change
    (verdict.history.with_fingerprints)."""
    from decodescope.verdict.prom_side import read_prom

    def load(sel: str) -> list[hi.Point]:
        read = read_prom(sel, engine=engine, server=server, client=client)
        return points_from_windows(read.windows, engine=read.engine, spec=read.spec)

    pts = load(selector)
    if not pts:
        raise UsageError(f"no engine activity in {selector}", where=selector,
                         remedy="Check the time range (`decodescope prom SELECTOR` lists its "
                                "windows)")
    ctl = load(control) if control else None
    h = hi.detect(pts, control=ctl, method=method)
    if fingerprints:
        h = hi.with_fingerprints(h, fingerprints)
    return HistoryResult(selector, control, None, "engine decode rate (Prometheus windows)", h)


def history(store: Any, selector: str, *, control: str | None = None,
            caliber: str | None = None, since: str | None = None, until: str | None = None,
            method: hi.Method = hi.DEFAULT_METHOD,
            fingerprints: str | None = None) -> HistoryResult:
    """The change points of a selector's stored runs (one caliber), attributed; `control`:
    a reference series of the same caliber (a change it shows too is the environment).
    For a Prometheus range, `fingerprints` names stored runs (a label or endpoint URL) of the
    same endpoint whose fingerprints say what changed across each change."""
    if selector.strip().startswith(("prom+", "prom:")):
        if since or until or caliber:
            raise UsageError("--since/--until/--caliber do not apply to a Prometheus range",
                             where=selector, remedy="Put the range in the selector: "
                                                    "prom+http://HOST:9090/?job=vllm@A..B")
        fps = (select_runs(store, fingerprints, where="--fingerprints")
               if fingerprints and store is not None else [])
        if fingerprints and not fps:
            raise UsageError(f"no stored runs match {fingerprints}", where="--fingerprints",
                             remedy="Name a label or endpoint URL of stored runs "
                                    "(`decodescope runs list`)")
        return prom_history(selector, control=control, method=method, fingerprints=fps)
    if fingerprints:
        raise UsageError("--fingerprints applies to a Prometheus range only", where=selector,
                         remedy="Stored runs carry their own fingerprints: leave it out")
    t0, t1 = parse_when(since, "--since"), parse_when(until, "--until")
    runs = select_runs(store, selector, caliber=caliber, since=t0, until=t1)
    if not runs:
        raise UsageError(f"no stored runs match {selector}"
                         + (f" at caliber {caliber}" if caliber else "")
                         + (" in the time range" if (t0 or t1) else ""), where=selector,
                         remedy="List runs and their labels with `decodescope runs list`")
    ref = _one_caliber(runs, selector)
    ctl_runs: list[StoredRun] = []
    if control is not None:
        ident = next((r.caliber_identity for r in runs if r.caliber_identity), None)
        ctl_runs = [r for r in select_runs(store, control, caliber=caliber, since=t0, until=t1,
                                           where="--control")
                    if ident is None or r.caliber_identity == ident]
        if not ctl_runs:
            raise UsageError(f"no stored runs of the control {control} at this caliber",
                             where="--control",
                             remedy="Name a label or endpoint probed at the same caliber")
    pts = hi.points_from_runs(runs)
    basis = "engine decode rate" if hi.engine_basis(runs) else "client decode rate"
    h = hi.detect(pts, control=hi.points_from_runs(ctl_runs) if ctl_runs else None,
                  method=method)
    return HistoryResult(selector, control, ref, basis, h)
