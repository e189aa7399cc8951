"""Engine windows from a Prometheus server's history (`/api/v1/query_range`), never a scrape of
the engine: the same `EngineWindow`s a log gives, one per query step (docs/prometheus.md).

A selector names the server, the series and the time range:

    prom+http://HOST:9090/?job=vllm&instance=gpu-a:8000@2026-11-29T23:00..23:30
    prom:?job=vllm@23:00..23:30          (the server from --prometheus / $DECODESCOPE_PROMETHEUS)

Query parameters are label matchers (`key=value`, `key=~regex`, `key=!value`); `step=15s` sets
the window (default: 30 s, at least the scrape interval seen). How the numbers are made:

- Counts are differences of the counters' own samples at the step points (the newest sample at
  or before each point, and `timestamp()` of it), over the exact time between those samples.
  `increase()` / `rate()` are not used: they extrapolate to the window edges, so a window's
  count would not be a count.
- A restart (counter reset) inside a window: `resets()` over the window, a counter that went
  down, or a moved `_created` / `process_start_time_seconds` sample: the window is flagged
  "reset" and carries no counts (never a negative or an inflated rate).
- A scrape gap: no new sample in the window, edge samples more than 1.5 steps apart, fewer
  than half the usual samples, or a series gone stale (no point at a step: the target was down, Prometheus marked it stale): the
  window is flagged "gap" and carries no counts (the running count in the gap is unseen).
- Several series (replicas, data-parallel ranks) are summed, with a note naming them; a label
  matcher in the selector picks one.
Every HTTP body is read through one bounded reader, and a query is refused before it is sent
when it would return more points than `MAX_POINTS`.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from decodescope.errors import ProtocolError, ResponseTooLargeError, UnreachableError, UsageError
from decodescope.records.window import EngineWindow

ENV_SERVER = "DECODESCOPE_PROMETHEUS"
SCHEME = "prom+"  # prom+http://host:9090/?job=...@A..B
SHORT = "prom:"  # prom:?job=...@A..B (default server)
DEFAULT_STEP_S = 30.0
MIN_STEP_S = 1.0
MAX_BODY_BYTES = 32 * 1024 * 1024  # one answer; a larger (or endless) body is refused
MAX_POINTS = 200_000  # points of one query (steps × series)
MAX_SERIES = 256  # series one selector may match
TIMEOUT_S = 30.0
GAP_SAMPLE_SHARE = 0.5  # a window with fewer than half the usual samples holds a scrape gap
GAP_STEP_FACTOR = 1.5  # edge samples further apart than 1.5 steps: a scrape gap at an edge

# Canonical key -> exposed names, newest first (renames across versions: engine-formats.md).
COUNTERS: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm": {
        "generation_tokens": ("vllm:generation_tokens_total",),
        "prompt_tokens": ("vllm:prompt_tokens_total",),
        "drafts": ("vllm:spec_decode_num_drafts_total",),
        "draft_tokens": ("vllm:spec_decode_num_draft_tokens_total",),
        "accepted_tokens": ("vllm:spec_decode_num_accepted_tokens_total",),
        "batch_steps": ("vllm:iteration_tokens_total_count",),  # one observation per step
    },
    "sglang": {
        "generation_tokens": ("sglang:generation_tokens_total",),  # moves at request finish
        "prompt_tokens": ("sglang:prompt_tokens_total",),
    },
    "llamacpp": {
        "generation_tokens": ("llamacpp:tokens_predicted_total",),
        "prompt_tokens": ("llamacpp:prompt_tokens_total",),
        "decode_s": ("llamacpp:tokens_predicted_seconds_total",),
        "drafts": ("llamacpp:spec_decode_num_drafts_total",),  # forks only
        "draft_tokens": ("llamacpp:spec_decode_num_draft_tokens_total",),
        "accepted_tokens": ("llamacpp:spec_decode_num_accepted_tokens_total",),
        "batch_steps": ("llamacpp:n_decode_total",),
    },
}
GAUGES: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm": {"running": ("vllm:num_requests_running",),
             "waiting": ("vllm:num_requests_waiting",),
             # old V0 (removed in PR #12383): the engine's own windowed throughput
             "gen_throughput": ("vllm:avg_generation_throughput_toks_per_s",)},
    "sglang": {"running": ("sglang:num_running_reqs", "sglang:num_requests_running"),
               "waiting": ("sglang:num_queue_reqs", "sglang:num_requests_waiting"),
               "gen_throughput": ("sglang:gen_throughput",),
               "accept_length": ("sglang:spec_accept_length",)},
    "llamacpp": {"running": ("llamacpp:requests_processing",),
                 "waiting": ("llamacpp:requests_deferred",)},
}
PER_POS = {"vllm": "vllm:spec_decode_num_accepted_tokens_per_pos_total",
           "llamacpp": "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"}
CREATED = {"vllm": "vllm:generation_tokens_created"}  # V1: moves when the engine restarts
PROCESS_START = "process_start_time_seconds"
FINISH_UPDATED = ("sglang", "llamacpp")  # counters move when a request finishes
# Labels that tell one series of a metric from another and are not an engine's identity.
IGNORED_LABELS = frozenset({"__name__", "position", "finished_reason", "le"})


# -- the selector --------------------------------------------------------------------------
@dataclass(frozen=True)
class PromSelector:
    server: str  # http(s)://host:port[/prefix], no user info
    matchers: tuple[tuple[str, str, str], ...]  # (label, op, value): op in =, =~, !=
    start: str | None
    end: str | None
    step_s: float | None = None

    def promql(self) -> str:
        """The label matchers as PromQL (`{job="vllm",instance=~"gpu-.*"}` without braces)."""
        return ",".join(f'{k}{op}{json.dumps(v)}' for k, op, v in self.matchers)

    def describe(self) -> str:
        m = ",".join(f"{k}{op}{v}" for k, op, v in self.matchers) or "all series"
        host = urllib.parse.urlsplit(self.server).netloc
        return f"prometheus {host} {{{m}}}"


def is_prom_selector(selector: str) -> bool:
    s = selector.strip()
    return s.startswith(SCHEME) or s.startswith(SHORT)


SELECTOR_FORMS = ("prom+http://HOST:9090/?job=vllm&instance=gpu-a:8000@2026-11-29T23:00..23:30, "
                  "or prom:?job=vllm@23:00..23:30 with --prometheus URL")


def parse_selector(selector: str, *, default_server: str | None = None) -> PromSelector:
    """Split a Prometheus selector into server, label matchers and time range."""
    s = selector.strip()
    body, at, rng = s.rpartition("@")
    if not at or ".." not in rng:
        raise UsageError(f"no time range in {selector!r}", where="prometheus selector",
                         remedy=f"Write {SELECTOR_FORMS}")
    start, _, end = rng.partition("..")
    if body.startswith(SCHEME):
        url = body[len(SCHEME):]
    elif body.startswith(SHORT):
        server = default_server or os.environ.get(ENV_SERVER)
        if not server:
            raise UsageError(f"{selector!r} names no Prometheus server", where="prometheus selector",
                             remedy=f"Give --prometheus URL (or set ${ENV_SERVER}), or write "
                                    "prom+http://HOST:9090/?job=...@A..B")
        url = server.rstrip("/") + "/" + body[len(SHORT):].lstrip("/")
    else:
        raise UsageError(f"not a Prometheus selector: {selector!r}", where="prometheus selector",
                         remedy=f"Write {SELECTOR_FORMS}")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"not an http(s) Prometheus URL in {selector!r}",
                         where="prometheus selector", remedy=f"Write {SELECTOR_FORMS}")
    if parts.username or parts.password:
        raise UsageError("user info in a Prometheus URL is not accepted (it would be printed "
                         "and stored with the selector)", where="prometheus selector",
                         remedy="Put the server behind a local proxy, or give it without "
                                "credentials")
    server = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
    matchers: list[tuple[str, str, str]] = []
    step: float | None = None
    for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
        if key == "step":
            step = parse_duration(value)
            continue
        op = "="
        if value.startswith("~"):
            op, value = "=~", value[1:]
        elif value.startswith("!"):
            op, value = "!=", value[1:]
        if not key.replace("_", "a").isalnum() or key[0].isdigit():
            raise UsageError(f"not a label name: {key!r}", where=selector,
                             remedy="Label matchers are name=value, name=~regex, name=!value")
        matchers.append((key, op, value))
    return PromSelector(server, tuple(matchers), start.strip() or None, end.strip() or None, step)


def parse_duration(text: str) -> float:
    """`15s`, `1m`, `90` (seconds) → seconds."""
    t = text.strip().lower()
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    for u in ("ms", "s", "m", "h"):
        if t.endswith(u) and t[: -len(u)].replace(".", "", 1).isdigit():
            return float(t[: -len(u)]) * units[u]
    if t.replace(".", "", 1).isdigit():
        return float(t)
    raise UsageError(f"not a duration: {text!r}", where="step", remedy="Write e.g. 15s, 1m or 30")


def resolve_range(sel: PromSelector, *, now_s: float | None = None) -> tuple[float, float]:
    """Epoch seconds of the selector's range. Times without a date are the latest such time
    at or before now (since) and the first at or after since (until)."""
    from decodescope.telemetry.logs.selectors import parse_time

    now = time.time() if now_s is None else now_s
    if sel.start is None:
        raise UsageError("a Prometheus window needs a start time", where="prometheus selector",
                         remedy=f"Write {SELECTOR_FORMS}")
    a_spec = parse_time(sel.start)
    a = a_spec.resolve(now)
    if a_spec.absolute_s is None and a > now:
        a = a_spec.resolve(now - 86400.0)
    if sel.end is None:
        b = now
    else:
        b_spec = parse_time(sel.end)
        b = b_spec.resolve(a, not_before_s=a) if b_spec.absolute_s is None else b_spec.absolute_s
    if b <= a:
        raise UsageError(f"the range ends before it starts ({sel.start}..{sel.end})",
                         where="prometheus selector", remedy="Give START..END with END later")
    return a, b


# -- the bounded HTTP reader -----------------------------------------------------------------
def read_bounded(resp: Any, limit: int = MAX_BODY_BYTES, where: str = "prometheus") -> bytes:
    """The whole body, or ResponseTooLargeError past `limit` bytes (an endless body too)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = resp.read(min(65536, limit + 1 - size))
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise ResponseTooLargeError(f"the answer is larger than {limit // (1024 * 1024)} MiB",
                                        where=where, remedy="Narrow the range or the series, "
                                                            "or widen step=")
        chunks.append(chunk)


class PromClient:
    """GETs against one Prometheus server's HTTP API; every body through `read_bounded`."""

    def __init__(self, server: str, *, timeout_s: float = TIMEOUT_S,
                 max_body: int = MAX_BODY_BYTES):
        self.server = server.rstrip("/")
        self.timeout_s = timeout_s
        self.max_body = max_body
        self.queries = 0

    def get(self, path: str, params: Iterable[tuple[str, str]]) -> Any:
        url = f"{self.server}{path}?{urllib.parse.urlencode(list(params))}"
        where = f"{self.server}{path}"
        self.queries += 1
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as resp:  # noqa: S310
                body = read_bounded(resp, self.max_body, where)
        except urllib.error.HTTPError as exc:
            try:
                detail = json.loads(read_bounded(exc, 65536, where)).get("error", "")
            except (ValueError, AttributeError, ResponseTooLargeError):
                detail = ""
            if exc.code in (400, 422):
                raise UsageError(f"Prometheus refused the query: {detail or exc.reason}",
                                 where=where, remedy="Check the label matchers and the range") from None
            raise ProtocolError(f"Prometheus answered {exc.code} {exc.reason}"
                                + (f": {detail}" if detail else ""), where=where,
                                remedy="Check that the URL is a Prometheus server") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise UnreachableError(f"cannot reach Prometheus: {reason}", where=where,
                                   remedy="Check the server URL and that it is up") from None
        try:
            doc = json.loads(body)
        except ValueError:
            raise ProtocolError("the answer is not JSON", where=where,
                                remedy="Check that the URL is a Prometheus server (its API "
                                       "answers JSON)") from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            err = doc.get("error") if isinstance(doc, dict) else None
            raise ProtocolError(f"Prometheus query failed: {err or 'no status'}", where=where,
                                remedy="Check the label matchers and the range")
        return doc.get("data")

    def names(self, matchers: str, start: float, end: float) -> list[str]:
        """Metric names of the engines' prefixes among the selected series in the range."""
        sel = "{" + ",".join(x for x in ('__name__=~"(vllm|sglang|llamacpp):.+"', matchers) if x) + "}"
        data = self.get("/api/v1/label/__name__/values",
                        [("match[]", sel), ("start", _fmt(start)), ("end", _fmt(end))])
        return [str(n) for n in data] if isinstance(data, list) else []

    def series(self, expr: str, start: float, end: float) -> list[dict[str, str]]:
        data = self.get("/api/v1/series", [("match[]", expr), ("start", _fmt(start)),
                                            ("end", _fmt(end))])
        out = [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []
        if len(out) > MAX_SERIES:
            raise UsageError(f"{expr} matches {len(out)} series (at most {MAX_SERIES})",
                             where=self.server, remedy="Add a label matcher (instance=, job=)")
        return out

    def query_range(self, expr: str, start: float, end: float, step: float,
                    n_series: int = 1) -> dict[tuple[tuple[str, str], ...], dict[float, float]]:
        """{series labels: {step time: value}}. Refused before sending when it would return
        more than MAX_POINTS points."""
        steps = int((end - start) // step) + 1
        if steps * max(1, n_series) > MAX_POINTS or steps > 11000:
            raise UsageError(f"the query would return {steps * max(1, n_series):,} points "
                             f"({steps:,} steps × {n_series} series; at most {MAX_POINTS:,})",
                             where=self.server, remedy="Narrow the range or widen step=")
        data = self.get("/api/v1/query_range", [("query", expr), ("start", _fmt(start)),
                                                 ("end", _fmt(end)), ("step", _fmt(step))])
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(result, list):
            raise ProtocolError("query_range answered no result list", where=self.server,
                                remedy="Check that the URL is a Prometheus server")
        out: dict[tuple[tuple[str, str], ...], dict[float, float]] = {}
        points = 0
        for r in result:
            labels = r.get("metric") or {}
            key = tuple(sorted((k, str(v)) for k, v in labels.items() if k not in IGNORED_LABELS))
            vals = out.setdefault(key, {})
            for t, v in r.get("values") or []:
                points += 1
                if points > MAX_POINTS:
                    raise UsageError(f"the answer holds more than {MAX_POINTS:,} points",
                                     where=self.server, remedy="Narrow the range or widen step=")
                try:
                    fv = float(v)
                except (TypeError, ValueError):
                    continue
                if math.isfinite(fv):
                    vals[round(float(t), 3)] = fv
        return out


def _fmt(x: float) -> str:
    return f"{x:.3f}"


# -- windows ---------------------------------------------------------------------------------
@dataclass
class PromRead:
    windows: list[EngineWindow]
    engine: str | None  # "vllm" | "sglang" | "llamacpp" | "sim-vllm"
    spec: dict[str, Any]  # like LogSummary.spec: {"off": bool, "k": int | None}
    before: list[EngineWindow]  # the window just before the range (partial-window context)
    step_s: float
    series: list[str]  # the series summed (label sets), for the note
    notes: list[str] = field(default_factory=list)
    queries: int = 0
    start_s: float = 0.0
    end_s: float = 0.0


def _engine_of(names: Iterable[str]) -> str | None:
    ns = set(names)
    best, hits = None, 0
    for eng in COUNTERS:
        cands = {n for table in (COUNTERS, GAUGES) for t in table[eng].values() for n in t}
        h = len(cands & ns)
        if h > hits:
            best, hits = eng, h
    return best


def _pick(names: set[str], cands: tuple[str, ...]) -> str | None:
    return next((n for n in cands if n in names), None)


def _series_label(key: tuple[tuple[str, str], ...]) -> str:
    return ",".join(f"{k}={v}" for k, v in key if k not in ("job",)) or "one series"


def read_windows(sel: PromSelector, *, engine: str | None = None, now_s: float | None = None,
                 client: PromClient | None = None) -> PromRead:
    """Engine windows of the selected series between the selector's times (one per step), and
    the window just before the range."""
    start, end = resolve_range(sel, now_s=now_s)
    cl = client or PromClient(sel.server)
    m = sel.promql()
    names = set(cl.names(m, start, end))
    eng = engine or _engine_of(names)
    if eng is None or eng not in COUNTERS:
        raise UsageError(f"no vLLM, SGLang or llama.cpp series in {sel.describe()} between "
                         f"{_clock(start)} and {_clock(end)}", where=sel.server,
                         remedy="Check the label matchers and the time range (the engine's "
                                "/metrics must have been scraped then)")
    counters = {k: n for k, c in COUNTERS[eng].items() if (n := _pick(names, c))}
    gauges = {k: n for k, c in GAUGES[eng].items() if (n := _pick(names, c))}
    ref = counters.get("generation_tokens")
    if ref is None:
        raise UsageError(f"no generation-token counter for {eng} in {sel.describe()}",
                         where=sel.server, remedy="Check the label matchers and the range")
    step = sel.step_s or DEFAULT_STEP_S
    notes: list[str] = []
    if step < MIN_STEP_S:
        raise UsageError(f"step {step:g} s is below {MIN_STEP_S:g} s", where=sel.describe(),
                         remedy="Give step= of at least 1 s (and at least the scrape interval)")
    ref_series = cl.series(f"{ref}{{{m}}}", start, end)
    n_series = max(1, len(ref_series))
    # One step before the range: the context window (is the first window partial?).
    t0 = start - step
    grid = [t0 + i * step for i in range(int((end - t0) // step + 1e-9) + 1)]
    grid = [round(t, 3) for t in grid]
    q0, q1 = grid[0], grid[-1]
    vals = {k: cl.query_range(f"{n}{{{m}}}", q0, q1, step, n_series) for k, n in counters.items()}
    # The names API answers per storage block (hours): a counter seen there may have no sample
    # in this range (speculative decoding switched off since): only points count.
    vals = {k: v for k, v in vals.items() if any(v.values())}
    counters = {k: n for k, n in counters.items() if k in vals}
    if "generation_tokens" not in vals:
        raise UsageError(f"no {ref} samples in {sel.describe()} between {_clock(start)} and "
                         f"{_clock(end)}", where=sel.server,
                         remedy="Check the time range (the engine's /metrics must have been "
                                "scraped then)")
    stamps = cl.query_range(f"timestamp({ref}{{{m}}})", q0, q1, step, n_series)
    win = f"{max(1, int(round(step)))}s"
    resets = cl.query_range(f"resets({ref}{{{m}}}[{win}])", q0, q1, step, n_series)
    samples = cl.query_range(f"count_over_time({ref}{{{m}}}[{win}])", q0, q1, step, n_series)
    gvals = {k: cl.query_range(f"avg_over_time({n}{{{m}}}[{win}])", q0, q1, step, n_series)
             for k, n in gauges.items()}
    witnesses = []
    if (cn := CREATED.get(eng)) and cn in names:
        witnesses.append(cl.query_range(f"{cn}{{{m}}}", q0, q1, step, n_series))
    if PROCESS_START in _plain_names(cl, m, start, end):
        witnesses.append(cl.query_range(f"{PROCESS_START}{{{m}}}", q0, q1, step, n_series))
    k = None
    pp = PER_POS.get(eng)
    if pp and pp in names and "drafts" in counters:
        pos = {s.get("position") for s in cl.series(f"{pp}{{{m}}}", start, end)}
        k = len([p for p in pos if p is not None]) or None
    keys = sorted(stamps) or sorted(vals["generation_tokens"])
    if len(keys) > 1:
        notes.append(f"{len(keys)} series summed ({'; '.join(_series_label(x) for x in keys)}): "
                     "replicas or data-parallel ranks, each at its own rate over the window's "
                     "mean interval (their scrapes fall at different times); add a label "
                     "matcher to pick one")
    spec_off = eng in ("vllm",) and "drafts" not in counters and "accepted_tokens" not in counters
    if spec_off:
        notes.append("no speculative-decoding series in the range: speculative decoding off "
                     "(vLLM exposes them only with --speculative-config): MAL 1")
    model = _model_label(ref_series)
    label = "sim-vllm" if (eng == "vllm" and model and model.startswith("sim-vllm/")) else eng
    med = _median_samples(samples)
    windows: list[EngineWindow] = []
    n_reset = n_gap = n_stale = 0
    for i in range(1, len(grid)):
        a, b = grid[i - 1], grid[i]
        w, why = _window(label, keys, a, b, vals, stamps, resets, samples, gvals, witnesses, med)
        if why == "reset":
            n_reset += i > 1
        elif why == "stale":
            n_stale += i > 1
        elif why == "gap":
            n_gap += i > 1
        windows.append(w)
    before, windows = windows[:1], windows[1:]
    if windows and n_gap * 2 > len(windows):
        notes.append(f"most windows hold a gap: step {step:g} s may be shorter than the scrape "
                     "interval; widen step=")
    if n_reset:
        notes.append(f"{n_reset} window(s) hold a counter reset (the engine restarted: resets(), "
                     "a counter that went down, or a moved _created / process start time): "
                     "no counts taken from them")
    if n_gap:
        notes.append(f"{n_gap} window(s) hold a scrape gap (no new sample, edge samples more "
                     "than 1.5 steps apart, or fewer than half the usual samples): no counts "
                     "taken from them")
    if n_stale:
        notes.append(f"{n_stale} window(s) without a sample at a step edge: a scrape gap "
                     "(scrapes failed, so Prometheus marked the series stale) or the target was "
                     "not scraped then: no counts taken from them")
    notes.append("counts are differences of the counters' own samples over the exact time "
                 "between them (increase()/rate() are not used: they extrapolate to the window "
                 "edges)")
    if eng in FINISH_UPDATED:
        notes.append(f"{eng} counts tokens when a request finishes: windows shorter than a "
                     "request read idle or burst; the engine's windowed gauges are kept as "
                     "printed values")
    spec: dict[str, Any] = {"off": spec_off, "k": k}
    return PromRead(windows, label, spec, before, step,
                    [_series_label(x) for x in keys], notes, cl.queries, start, end)


def _plain_names(cl: PromClient, m: str, start: float, end: float) -> set[str]:
    sel = "{" + ",".join(x for x in (f'__name__="{PROCESS_START}"', m) if x) + "}"
    data = cl.get("/api/v1/label/__name__/values",
                  [("match[]", sel), ("start", _fmt(start)), ("end", _fmt(end))])
    return {str(n) for n in data} if isinstance(data, list) else set()


def _model_label(series: list[dict[str, str]]) -> str | None:
    return next((s["model_name"] for s in series if s.get("model_name")), None)


def _median_samples(samples: Mapping[Any, dict[float, float]]) -> float | None:
    vs = [v for per in samples.values() for v in per.values() if v > 0]
    return statistics.median(vs) if vs else None


Series = Mapping[tuple[tuple[str, str], ...], dict[float, float]]


def _window(engine: str, keys: list[tuple[tuple[str, str], ...]], a: float, b: float,
            vals: Mapping[str, Series], stamps: Series, resets: Series, samples: Series,
            gvals: Mapping[str, Series], witnesses: Sequence[Series],
            med_samples: float | None) -> tuple[EngineWindow, str | None]:
    """The window between step points a and b, summed over the series; (window, why-not)."""
    gauges: dict[str, float] = {}
    for gk, per in gvals.items():
        got = [v for key in keys if (v := per.get(key, {}).get(b)) is not None]
        if not got:  # gauges labelled apart from the counters (SGLang's scheduler): all of them
            got = [v for p in per.values() if (v := p.get(b)) is not None]
        if got:
            gauges[gk] = sum(got)
    printed: dict[str, float] = {}
    if gauges.get("gen_throughput"):
        printed["generation_throughput"] = gauges["gen_throughput"]
    if gauges.get("accept_length"):
        printed["mal_reported"] = gauges["accept_length"]
    t_a = [stamps.get(key, {}).get(a) for key in keys]
    t_b = [stamps.get(key, {}).get(b) for key in keys]
    known_a = [t for t in t_a if t is not None]
    known_b = [t for t in t_b if t is not None]
    # Several series are scraped at different offsets: the window is their mean interval.
    ta = statistics.fmean(known_a) if known_a else a
    tb = statistics.fmean(known_b) if known_b else b
    running, waiting = gauges.get("running"), gauges.get("waiting")

    def empty(flag: str) -> tuple[EngineWindow, str]:
        return EngineWindow("prometheus", engine, ta, tb, running=running, waiting=waiting,
                            printed=printed, flags=(flag,)), flag

    if any(t is None for t in t_a) or any(t is None for t in t_b):
        return empty("stale")
    durs = [y - x for x, y in zip(t_a, t_b, strict=True) if x is not None and y is not None]
    # No new sample in the window, or the samples at its edges lie further apart than a step
    # and a half (a scrape gap across an edge): the running count in between is unseen.
    if any(d <= 0 or d > GAP_STEP_FACTOR * (b - a) for d in durs):
        return empty("gap")
    span = tb - ta
    for key in keys:
        if (resets.get(key, {}).get(b) or 0) > 0:
            return empty("reset")
        for wit in witnesses:
            for wk, wper in wit.items():
                x, y = wper.get(a), wper.get(b)
                if x is not None and y is not None and abs(y - x) > 1e-3 and _same(wk, key):
                    return empty("reset")
        n = samples.get(key, {}).get(b)
        if med_samples and n is not None and n < GAP_SAMPLE_SHARE * med_samples:
            return empty("gap")
    counts: dict[str, float] = {}
    for ck, per in vals.items():
        total = 0.0
        for key, d in zip(keys, durs, strict=True):
            x, y = per.get(key, {}).get(a), per.get(key, {}).get(b)
            if x is None or y is None:
                break
            if y < x:
                return empty("reset")
            # one series: its own exact count; several: each at its rate over the mean window
            total += (y - x) if len(keys) == 1 else (y - x) * span / d
        else:
            counts[ck] = total
    for pk in ("batch_steps", "decode_s"):
        if pk in counts:
            printed[pk] = counts[pk]
    return EngineWindow(
        "prometheus", engine, ta, tb,
        generation_tokens=_int(counts.get("generation_tokens")),
        prompt_tokens=_int(counts.get("prompt_tokens")),
        drafts=_int(counts.get("drafts")), draft_tokens=_int(counts.get("draft_tokens")),
        accepted_tokens=_int(counts.get("accepted_tokens")), running=running, waiting=waiting,
        printed=printed), None


def _same(witness_key: tuple[tuple[str, str], ...], key: tuple[tuple[str, str], ...]) -> bool:
    """Does a witness series (process start: instance labels only) belong to this series?"""
    k = dict(key)
    return all(k.get(lk) == lv for lk, lv in witness_key if lk in ("instance", "job"))


def _int(x: float | None) -> int | None:
    return None if x is None else int(round(x))


def _clock(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
