"""vLLM line records -> engine windows.

One window per stats interval: the stats line at time t gives [t - interval, t] with
generation_tokens = round(throughput * interval). The interval is measured per engine (pid +
engine id) from the spacing of its lines over the whole read, not guessed from the first
ones: vLLM computes every interval (idle ones too) but hides idle lines, so spacings are
multiples of the interval and the interval is the smallest spacing that recurs (1 s stamps:
a spacing and the next second form one cluster; its most common value wins). Windows wait
until DECIDE_LINES lines of their engine are seen (or the read ends). A later, smaller
recurring spacing changes the interval from there on (flag `interval_changed`, counted in
`interval_changes`); a window is never longer than the time since its engine's line before
(windows never overlap). A lone line gets the version default (flag `interval_default`).
A SpecDecoding line is paired with the preceding stats line of the same pid and timestamp; a
spec line with no such stats line makes a window of its own (flag `spec_line_only`).
Spec counts: drafts = round(Drafted / k), k = number of per-position rates (V1-c/V1-d) or
`num_spec_tokens` from the launch config (V1-a/V1-b); printed throughputs are never used
(idle dilution). V0 counts may be cumulative: detected by monotonic growth and diffed.
Windows come out in line order; at most a few lines are held back per engine.
"""

from __future__ import annotations

from collections import deque

from decodescope.records.window import EngineWindow
from decodescope.telemetry.logs.parse_counts import ParseCounts
from decodescope.telemetry.logs.vllm import VConfig, VLine, VSpec, VStats

# Default stats interval when spacing cannot tell: V1 VLLM_LOG_STATS_INTERVAL=10 s; early V1
# `_LOCAL_LOGGING_INTERVAL_SEC = 5.0`; V0 local_interval 5 s.
DEFAULT_INTERVAL_S = {"v1": 10.0, "v1-early": 5.0, "v0": 5.0, "spec-v1": 10.0, "spec-v0": 5.0}
DECIDE_LINES = 8  # an engine's windows wait for this many of its lines (7 spacings)
MIN_SUPPORT = 2  # a spacing must recur (a cluster of 2+) to be the interval
MIN_INTERVAL_S = 1.0  # stamps have 1 s resolution; a smaller spacing is a duplicate
SPACING_SLACK_S = 1.5  # 1 s stamps: a spacing this much below the interval is a shorter window
PAIR_TOLERANCE_S = 1.0  # stats + spec lines of one interval are logged by one call
MAL_PRINT_TOLERANCE = 0.011  # MAL printed with 2 decimals (±0.005) plus count rounding
MAX_INTERVAL_FACTOR = 6.0  # a spacing > 6x the default is idle time, not an interval
MAX_HELD = 256  # windows held back waiting for an interval, before defaults are forced
MAX_CHANGES_KEPT = 20  # interval changes listed (all are counted)


class _Key:
    """One engine's line spacings and the interval they give."""

    __slots__ = ("spacings", "interval_s", "default_s", "guessed", "last_t", "lines", "low")

    def __init__(self, default_s: float) -> None:
        self.spacings: dict[int, int] = {}  # spacing rounded to 1 s -> lines (bounded keys)
        self.interval_s: float | None = None
        self.default_s = default_s
        self.guessed = False
        self.last_t: float | None = None
        self.lines = 0
        self.low = 1 << 30  # the smallest spacing counted (a change needs one below interval)

    def note(self, t_s: float | None) -> float | None:
        """Count one line; returns its spacing from the engine's line before (None: first)."""
        if t_s is None:
            return None
        self.lines += 1
        prev, self.last_t = self.last_t, t_s
        if prev is None:
            return None
        gap = t_s - prev
        r = round(gap)
        if gap >= MIN_INTERVAL_S and r <= MAX_INTERVAL_FACTOR * self.default_s:
            self.spacings[r] = self.spacings.get(r, 0) + 1
            if r < self.low:
                self.low = r
        return gap

    def estimate(self) -> float | None:
        """The smallest recurring spacing (its cluster's most common value); with none
        recurring (a short log), the smallest spacing; None without a spacing."""
        sp = self.spacings
        order = sorted(sp)
        for v in order:
            if sp[v] + sp.get(v + 1, 0) >= MIN_SUPPORT:
                return float(v if sp[v] >= sp.get(v + 1, 0) else v + 1)
        return float(order[0]) if order else None

    def ready(self) -> bool:
        return self.lines >= DECIDE_LINES

    def decide(self) -> float:
        if self.interval_s is None:
            best = self.estimate()
            self.guessed = best is None
            self.interval_s = self.default_s if best is None else best
        return self.interval_s

    def state(self) -> tuple[object, ...]:
        return (tuple(sorted(self.spacings.items())), self.interval_s, self.default_s,
                self.guessed, self.last_t, self.lines, self.low)


class _Proto:
    __slots__ = ("key", "pid", "t_s", "stats", "spec", "v0", "flags", "spacing")

    def __init__(self, key: tuple[int | None, str | None], pid: int | None, t_s: float | None,
                 stats: VStats | None = None, spec: VSpec | None = None) -> None:
        self.key, self.pid, self.t_s, self.stats, self.spec = key, pid, t_s, stats, spec
        self.v0: tuple[int, int, int] | None = None
        self.flags: list[str] = []
        self.spacing: float | None = None  # time since the engine's line before


class VllmAssembler:
    engine = "vllm"

    def __init__(self, counts: ParseCounts) -> None:
        self._counts = counts
        self._queue: deque[_Proto] = deque()
        self._keys: dict[tuple[int | None, str | None], _Key] = {}
        self._open: dict[int | None, _Proto] = {}  # pid -> stats line that may get a spec line
        self._k_config: int | None = None
        self.spec_method: str | None = None  # from the launch config, when logged
        self.spec_configured: bool | None = None  # False: a launch line without spec config
        self._k_lines: int | None = None  # k from the spec lines themselves
        self.spec_lines = 0  # SpecDecoding / Speculative metrics lines read
        self.config_known = False  # k known from spec lines: stop searching launch config
        self._v0: dict[int | None, tuple[str, tuple[int, int, int]]] = {}  # pid -> (mode, last)
        # (engine key, line time, interval before, interval after), the first few; all counted
        self.interval_changes: list[tuple[tuple[int | None, str | None], float | None, float,
                                          float]] = []
        self.interval_change_count = 0

    def feed(self, rec: VStats | VSpec | VConfig | VLine) -> list[EngineWindow]:
        if isinstance(rec, VConfig):
            self.spec_configured = rec.spec
            if rec.spec:
                self._k_config, self.spec_method = rec.k, rec.method
            return []
        if isinstance(rec, VSpec):
            self.spec_lines += 1
            k_line = len(rec.per_pos) if rec.per_pos else rec.k
            if k_line:
                self._k_lines = k_line
        if not self.config_known and isinstance(rec, VSpec) and (rec.per_pos or rec.k):
            self.config_known = True
        if isinstance(rec, VStats):
            self._open.pop(rec.pid, None)
            p = self._add((rec.pid, rec.engine_id), rec.pid, rec.t_s, DEFAULT_INTERVAL_S[rec.variant])
            p.stats = rec
            self._open[rec.pid] = p
        elif isinstance(rec, VLine):
            return self._line(rec)
        else:
            opened = self._open.pop(rec.pid, None)
            if opened is not None and opened.spec is None and _close(opened.t_s, rec.t_s):
                p = opened
            else:
                kind = "spec-v0" if rec.variant.startswith("v0") else "spec-v1"
                p = self._add((rec.pid, "spec"), rec.pid, rec.t_s, DEFAULT_INTERVAL_S[kind])
                p.flags.append("spec_line_only")
            p.spec = rec
            if rec.variant.startswith("v0"):
                p.v0 = self._v0_delta(rec, p.flags)
        return self._release(force=False)

    def _line(self, rec: VLine) -> list[EngineWindow]:
        """The case of each VLine kind (a row of formats.py without a record type of its own):
        what its numbers add to the windows. A kind without a case adds nothing."""
        return []

    def flush(self) -> list[EngineWindow]:
        self._open.clear()
        return self._release(force=True)

    def spec_info(self) -> dict[str, object]:
        """What the log says about speculative decoding: method and k (None: not logged),
        and `off` when the log has no speculative line and no speculative launch config."""
        out: dict[str, object] = {
            "method": self.spec_method, "k": self._k_lines or self._k_config,
            "lines": self.spec_lines,
            "off": self.spec_lines == 0 and not (self.spec_configured and self._k_config)}
        if self.interval_change_count:
            out["interval_changes"] = [(t, a, b) for _, t, a, b in self.interval_changes]
        return out

    def _add(self, key: tuple[int | None, str | None], pid: int | None, t_s: float | None,
             default_s: float) -> _Proto:
        k = self._keys.get(key)
        if k is None:
            k = self._keys[key] = _Key(default_s)
        p = _Proto(key, pid, t_s)
        p.spacing = k.note(t_s)
        self._queue.append(p)
        return p

    def _release(self, force: bool) -> list[EngineWindow]:
        out = []
        q = self._queue
        while q:
            p = q[0]
            waiting = self._open.get(p.pid) is p or not self._keys[p.key].ready()
            if waiting and not force and len(q) <= MAX_HELD:
                break
            q.popleft()
            out.append(self._build(p))
        return out

    def _v0_delta(self, sp: VSpec, flags: list[str]) -> tuple[int, int, int]:
        cur = (sp.accepted, sp.drafted, sp.emitted or 0)
        mode, last = self._v0.get(sp.pid, ("first", cur))
        if mode == "first":
            delta, mode = cur, "unknown"
            flags.append("v0_first_spec_line")  # counts may be cumulative since engine start
        elif mode != "interval" and all(c >= q for c, q in zip(cur, last, strict=True)):
            delta, mode = (cur[0] - last[0], cur[1] - last[1], cur[2] - last[2]), "cumulative"
            flags.append("v0_cumulative_diff")
        elif mode == "cumulative":
            delta = cur
            flags.append("v0_counter_reset")
        else:
            delta, mode = cur, "interval"
        self._v0[sp.pid] = (mode, cur)
        return delta

    def _interval(self, p: _Proto) -> float:
        """The engine's interval at this window: decided once, changed when a smaller spacing
        recurs later (a restart with another VLLM_LOG_STATS_INTERVAL, or first lines spaced
        by idle intervals); never longer than the spacing to the engine's line before."""
        key = self._keys[p.key]
        was = key.interval_s
        interval = key.decide()
        # the estimate can only fall below the interval once a spacing below it was counted
        now = key.estimate() if key.low < interval - SPACING_SLACK_S else None
        if was is not None and now is not None and now < interval - SPACING_SLACK_S:
            key.interval_s, key.guessed = now, False
            self.interval_change_count += 1
            if len(self.interval_changes) < MAX_CHANGES_KEPT:
                self.interval_changes.append((p.key, p.t_s, interval, now))
            p.flags.append("interval_changed")
            interval = now
        if p.spacing is not None and MIN_INTERVAL_S <= p.spacing < interval - SPACING_SLACK_S:
            return float(round(p.spacing))  # a line sooner than one interval: no overlap
        return interval

    def _build(self, p: _Proto) -> EngineWindow:
        key = self._keys[p.key]
        interval = self._interval(p)
        flags = p.flags
        if key.guessed:
            flags.append("interval_default")
        printed: dict[str, float] = {"log_interval_s": interval}
        if p.pid is not None:
            printed["pid"] = float(p.pid)
        gen = prompt = None
        running = waiting = None
        engine_id = None
        s = p.stats
        if s is not None:
            printed.update(s.printed)
            gen = round(s.gen_tput * interval)
            prompt = round(s.prompt_tput * interval) if s.prompt_tput is not None else None
            running, waiting, engine_id = s.running, s.waiting, s.engine_id
            if gen == 0:
                flags.append("idle")
        drafts = draft_tokens = accepted = None
        per_pos = None
        if p.spec is not None:
            drafts, draft_tokens, accepted, per_pos = self._spec_counts(p, p.spec, printed, flags)
        t_end = p.t_s
        return EngineWindow(
            source="log", engine="vllm",
            t_start_s=t_end - interval if t_end is not None else None, t_end_s=t_end,
            generation_tokens=gen, prompt_tokens=prompt, drafts=drafts,
            draft_tokens=draft_tokens, accepted_tokens=accepted, accepted_per_pos=per_pos,
            running=running, waiting=waiting, engine_id=engine_id, printed=printed,
            flags=tuple(flags),
        )

    def _spec_counts(self, p: _Proto, sp: VSpec, printed: dict[str, float], flags: list[str]
                     ) -> tuple[int | None, int, int, tuple[int, ...] | None]:
        printed.update(sp.printed)
        if p.v0 is not None:  # V0: MAL = emitted * k / draft tokens (bonus included)
            acc, draft, emitted = p.v0
            k0 = sp.k or 1
            n = round(draft / k0)
            printed.update(spec_k=float(k0), v0_accepted_tokens=float(acc),
                           emitted_tokens=float(emitted))
            return n, draft, max(emitted - n, 0) if n else 0, None
        k = len(sp.per_pos) if sp.per_pos else self._k_config
        if not k:
            return None, sp.drafted, sp.accepted, None
        if not sp.per_pos:
            flags.append("k_from_config")
        printed["spec_k"] = float(k)
        drafts = round(sp.drafted / k)
        mal = sp.mal_printed
        if drafts and mal is not None and mal > 1.0 + MAL_PRINT_TOLERANCE and \
                abs(1.0 + sp.accepted / drafts - mal) > MAL_PRINT_TOLERANCE:
            drafts = round(sp.accepted / (mal - 1.0))  # drafts shorter than k (n-gram ...)
            flags.append("drafts_from_printed_mal")
        per_pos = tuple(round(r * drafts) for r in sp.per_pos) if sp.per_pos and drafts else None
        return drafts, sp.drafted, sp.accepted, per_pos


def _close(a: float | None, b: float | None) -> bool:
    return a is None or b is None or abs(a - b) <= PAIR_TOLERANCE_S
