"""vLLM line records -> engine windows.

One window per stats interval: the stats line at time t gives [t - interval, t] with
generation_tokens = round(throughput * interval). The interval is the smallest spacing among
the first lines of the same engine (pid + engine id); a lone line gets the version default.
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
from decodescope.telemetry.logs.vllm import VConfig, VSpec, VStats

# Default stats interval when spacing cannot tell: V1 VLLM_LOG_STATS_INTERVAL=10 s; early V1
# `_LOCAL_LOGGING_INTERVAL_SEC = 5.0`; V0 local_interval 5 s.
DEFAULT_INTERVAL_S = {"v1": 10.0, "v1-early": 5.0, "v0": 5.0, "spec-v1": 10.0, "spec-v0": 5.0}
INTERVAL_LINES = 4  # decide an engine's interval from its first 4 lines (3 spacings)
MIN_INTERVAL_S = 1.0  # stamps have 1 s resolution; a smaller spacing is a duplicate
PAIR_TOLERANCE_S = 1.0  # stats + spec lines of one interval are logged by one call
MAL_PRINT_TOLERANCE = 0.011  # MAL printed with 2 decimals (±0.005) plus count rounding
MAX_INTERVAL_FACTOR = 6.0  # a first spacing > 6x the default is idle time, not an interval
MAX_HELD = 256  # windows held back waiting for an interval, before defaults are forced


class _Key:
    __slots__ = ("times", "interval_s", "default_s", "guessed")

    def __init__(self, default_s: float) -> None:
        self.times: list[float] = []
        self.interval_s: float | None = None
        self.default_s = default_s
        self.guessed = False

    def note(self, t_s: float | None) -> None:
        if self.interval_s is None and t_s is not None:
            self.times.append(t_s)
            if len(self.times) >= INTERVAL_LINES:
                self.decide()

    def decide(self) -> float:
        if self.interval_s is None:
            gaps = [b - a for a, b in zip(self.times, self.times[1:], strict=False) if b - a >= MIN_INTERVAL_S]
            best = min(gaps) if gaps else None
            self.guessed = best is None or best > MAX_INTERVAL_FACTOR * self.default_s
            self.interval_s = self.default_s if self.guessed or best is None else best
            self.times = []
        return self.interval_s


class _Proto:
    __slots__ = ("key", "pid", "t_s", "stats", "spec", "v0", "flags")

    def __init__(self, key: tuple[int | None, str | None], pid: int | None, t_s: float | None,
                 stats: VStats | None = None, spec: VSpec | None = None) -> None:
        self.key, self.pid, self.t_s, self.stats, self.spec = key, pid, t_s, stats, spec
        self.v0: tuple[int, int, int] | None = None
        self.flags: list[str] = []


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

    def feed(self, rec: VStats | VSpec | VConfig) -> list[EngineWindow]:
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

    def flush(self) -> list[EngineWindow]:
        self._open.clear()
        return self._release(force=True)

    def spec_info(self) -> dict[str, object]:
        """What the log says about speculative decoding: method and k (None: not logged),
        and `off` when the log has no speculative line and no speculative launch config."""
        return {"method": self.spec_method, "k": self._k_lines or self._k_config,
                "lines": self.spec_lines,
                "off": self.spec_lines == 0 and not (self.spec_configured and self._k_config)}

    def _add(self, key: tuple[int | None, str | None], pid: int | None, t_s: float | None,
             default_s: float) -> _Proto:
        k = self._keys.get(key)
        if k is None:
            k = self._keys[key] = _Key(default_s)
        k.note(t_s)
        p = _Proto(key, pid, t_s)
        self._queue.append(p)
        return p

    def _release(self, force: bool) -> list[EngineWindow]:
        out = []
        q = self._queue
        while q:
            p = q[0]
            waiting = self._open.get(p.pid) is p or self._keys[p.key].interval_s is None
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

    def _build(self, p: _Proto) -> EngineWindow:
        key = self._keys[p.key]
        interval = key.decide()
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
