"""Server state: a freshly started server, and the warm-up (a trend) of its first runs.

A server that has just started is often slower for a while (first use of CUDA graphs per
batch shape, kernels compiled on first call, the model's pages read in, clocks ramping):
issue 36's H100 ran its first run 12–14 % slower than runs 8–10. That is a real change of
speed — of the server's state, not of its stack — and neither `triage` nor the learned spread
may read it as one (docs/methodology.md §9, "Server state").

* A **server instance** is one process of one stack: the stack (run_spread.stack_key) plus
  its process start time (the fingerprint's `process.create_time`; its pid is not needed).
* A run is a **fresh-server run** when it started less than FRESH_SERVER_S after its
  server's process start.
* A **trend** over runs is a Mann–Kendall test (Kendall's tau of run order against the run's
  mean log decode rate, scipy.stats.kendalltau, exact for these small counts) significant at
  TREND_ALPHA; a **warm-up** is an upward trend over the stored runs of one server instance
  (one-sided). Its **end** is the first run from which the later runs show no trend and the
  run is not below all later ones (the level of the later runs reached); when no such run
  exists with at least one later run, the warm-up is not over at the last stored run.

Pure, but for `states_for_side`, which reads the run store.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from decodescope.records.stored_run import StoredRun
from decodescope.verdict import thresholds as th

Alternative = Literal["two-sided", "greater", "less"]


# -- what a run says about its server ----------------------------------------------------------
def process_start(fp: dict[str, Any] | None) -> float | None:
    """The epoch at which the run's server process started (fingerprint process.create_time),
    None when not collected (a remote server, --no-fingerprint)."""
    if not isinstance(fp, dict):
        return None
    it = ((fp.get("sections") or {}).get("process") or {}).get("create_time")
    if not isinstance(it, dict) or it.get("status") != "collected":
        return None
    v = it.get("value")
    epoch = v.get("epoch") if isinstance(v, dict) else v
    return float(epoch) if isinstance(epoch, (int, float)) and math.isfinite(epoch) else None


def instance_key(run: StoredRun) -> tuple[Any, ...] | None:
    """(stack, process start rounded to the second) — one server process of one stack; None
    when either is unknown."""
    from decodescope.verdict.stack import stack_key

    key, start = stack_key(run.fingerprint), process_start(run.fingerprint)
    if key is None or start is None:
        return None
    return (*key, round(start))


def since_start(run: StoredRun) -> float | None:
    """Seconds from the server's process start to the run's start (None: start unknown)."""
    start = process_start(run.fingerprint)
    return None if start is None else max(0.0, run.created_at - start)


def run_level(run: StoredRun, key: str | None = None) -> float | None:
    """The run's mean log decode rate over its ok trials (the engine's when it has ≥ 2, else
    the client's; `key` forces one); None with fewer than 2 rates."""
    keys = (key,) if key else ("engine_decode_rate", "decode_rate")
    for k in keys:
        xs = [math.log(v) for t in (run.result or {}).get("trials") or []
              if t.get("status") == "ok" and isinstance(v := t.get(k), (int, float))
              and math.isfinite(v) and v > 0]
        if len(xs) >= th.MIN_UNITS:
            return statistics.fmean(xs)
    return None


# -- trend -------------------------------------------------------------------------------------
def mann_kendall(values: Sequence[float], alternative: Alternative = "two-sided") -> tuple[float, float]:
    """(Kendall's tau of order vs value, its p-value): the Mann–Kendall trend test."""
    from scipy.stats import kendalltau

    res = kendalltau(range(len(values)), list(values), alternative=alternative)
    tau, p = float(res.statistic), float(res.pvalue)
    return (tau, p) if math.isfinite(p) else (0.0, 1.0)


@dataclass(frozen=True)
class Trend:
    """A monotone trend over runs in time order."""

    direction: Literal["up", "down"]
    tau: float
    p: float
    runs: int  # runs tested
    end: int | None  # index of the first run after the trend; None: not over at the last run
    rel: float  # the later runs' level against the first run's (relative)
    sided: Alternative = "two-sided"  # the test's alternative

    @property
    def stretch(self) -> int:
        """Runs inside the trend (left out of a spread)."""
        return self.runs if self.end is None else self.end

    def text(self) -> str:
        what = "warm-up (faster run by run)" if self.direction == "up" else \
            "a downward trend (slower run by run)"
        over = ("not over at the last run" if self.end is None else
                f"over after run {self.end} of {self.runs}")
        side = "" if self.sided == "two-sided" else ", one-sided"
        return (f"{what} over {self.runs} runs (Mann–Kendall tau {self.tau:+.2f}, "
                f"p = {self.p:.3f}{side}; later runs {100 * self.rel:+.1f} % against the first), "
                f"{over}")

    def to_dict(self) -> dict[str, Any]:
        return {"direction": self.direction, "tau": self.tau, "p": self.p, "runs": self.runs,
                "end": self.end, "stretch": self.stretch, "rel": self.rel, "text": self.text()}


def trend(levels: Sequence[float], *, alternative: Alternative = "two-sided",
          alpha: float = th.TREND_ALPHA) -> Trend | None:
    """The trend over run levels (mean log rates, in time order), or None when Mann–Kendall
    does not find one at `alpha` (fewer than TREND_MIN_RUNS runs: never)."""
    n = len(levels)
    if n < th.TREND_MIN_RUNS:
        return None
    tau, p = mann_kendall(levels, alternative)
    if p >= alpha or tau == 0.0:
        return None
    up = tau > 0
    end: int | None = None
    for k in range(1, n - 1):
        rest = levels[k:]
        reached = (levels[k] >= min(rest[1:])) if up else (levels[k] <= max(rest[1:]))
        if not reached:
            continue
        if len(rest) >= th.TREND_MIN_RUNS:
            _, pk = mann_kendall(rest, "greater" if up else "less")
            if pk < alpha:
                continue
        end = k
        break
    later = levels[end:] if end is not None else levels[-1:]
    rel = math.expm1(statistics.fmean(later) - levels[0])
    return Trend("up" if up else "down", tau, p, n, end, rel, alternative)


# -- a run's server state ----------------------------------------------------------------------
@dataclass(frozen=True)
class ServerState:
    """What the store knows of the server a run measured, at the time of the run."""

    run_id: int
    since_start_s: float | None  # seconds from the server's process start to the run's start
    position: int | None  # 1-based, among the stored runs of this server instance (caliber)
    of_runs: int  # stored runs of this server instance at this caliber
    warmup: Trend | None  # an upward trend over those runs
    in_warmup: bool  # the run sits inside that trend (before its end)

    @property
    def fresh(self) -> bool:
        return self.since_start_s is not None and self.since_start_s < th.FRESH_SERVER_S

    @property
    def warming(self) -> bool:
        """Fresh, or inside a detected warm-up: its speed may be the server's state."""
        return self.fresh or self.in_warmup

    @property
    def fresh_known(self) -> bool | None:
        """`fresh`, None when the server's start is unknown (never False for unknown)."""
        return None if self.since_start_s is None else self.fresh

    @property
    def in_warmup_known(self) -> bool | None:
        """`in_warmup`, None when the server process is unknown (no start or no stack)."""
        return None if self.position is None else self.in_warmup

    @property
    def warming_known(self) -> bool | None:
        """`warming`: True when fresh or inside a warm-up, False when both are known false,
        None otherwise."""
        f, w = self.fresh_known, self.in_warmup_known
        if f or w:
            return True
        return None if f is None or w is None else False

    @property
    def left_out(self) -> bool:
        """A fresh-server run inside a warm-up whose end the stored runs show: its server had
        not reached its level yet — a history leaves it out of the levels. A warm-up not over
        at the last run leaves nothing out (it may be the level), nor does a run past
        FRESH_SERVER_S: an upward step late in a long-lived server tests as a "warm-up" too,
        and must stay a change point. Nor where fewer than WARMUP_LEVEL_RUNS runs of its server
        follow the warm-up: its level would go unmeasured (and a stack change at its restart
        unseen), so those runs are counted, marked."""
        return (self.fresh and self.in_warmup and self.warmup is not None
                and self.warmup.end is not None
                and self.warmup.runs - self.warmup.end >= th.WARMUP_LEVEL_RUNS)

    def text(self) -> str:
        parts = []
        if self.since_start_s is not None and self.fresh:
            parts.append(f"started {_dur(self.since_start_s)} after its server's process start "
                         f"(a fresh server: < {_dur(th.FRESH_SERVER_S)})")
        if self.position is not None and self.of_runs > 1:
            parts.append(f"stored run {self.position} of {self.of_runs} of that server process")
        if self.warmup is not None:
            parts.append(("inside " if self.in_warmup else "after ") + "its " +
                         self.warmup.text())
        return f"run {self.run_id}: " + "; ".join(parts) if parts else f"run {self.run_id}"

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run_id, "since_start_s": self.since_start_s, "fresh": self.fresh,
                "position": self.position, "of_runs": self.of_runs,
                "warmup": self.warmup.to_dict() if self.warmup else None,
                "in_warmup": self.in_warmup, "warming": self.warming, "text": self.text()}


def _dur(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min"


def order(runs: Sequence[StoredRun]) -> list[StoredRun]:
    return sorted(runs, key=lambda r: (r.created_at, r.id))


def instance_trend(runs: Sequence[StoredRun],
                   alternative: Alternative = "greater") -> tuple[list[StoredRun], Trend | None]:
    """(the runs with a level, in time order; their trend) for runs of one server instance."""
    with_level = [r for r in order(runs) if run_level(r) is not None]
    key = ("engine_decode_rate" if all(run_level(r, "engine_decode_rate") is not None
                                       for r in with_level) else "decode_rate")
    kept = [r for r in with_level if run_level(r, key) is not None]
    levels = [run_level(r, key) or 0.0 for r in kept]
    return kept, trend(levels, alternative=alternative)


def server_state(run: StoredRun, candidates: Sequence[StoredRun]) -> ServerState:
    """The state of `run`'s server: time since its start, its place among the stored runs of
    the same server instance at the same caliber (`candidates`: runs of that caliber, usable
    ones: run_spread.usable) and any warm-up they show."""
    since = since_start(run)
    key = instance_key(run)
    if key is None:
        return ServerState(run.id, since, None, 0, None, False)
    from decodescope.verdict.stack import usable

    same = [r for r in candidates if r.caliber_identity == run.caliber_identity
            and instance_key(r) == key and (usable(r) or r.id == run.id)]
    if all(r.id != run.id for r in same):
        same.append(run)
    ordered = order(same)
    return _state_among(run, ordered, instance_trend(ordered))


def _state_among(run: StoredRun, ordered: Sequence[StoredRun],
                 kept_trend: tuple[list[StoredRun], Trend | None]) -> ServerState:
    """`run`'s state among the runs of its server instance (time order) and their trend."""
    pos = next(i for i, r in enumerate(ordered) if r.id == run.id) + 1
    kept, tr = kept_trend
    inside = False
    if tr is not None:
        idx = next((i for i, r in enumerate(kept) if r.id == run.id), None)
        inside = idx is not None and idx < tr.stretch
    return ServerState(run.id, since_start(run), pos, len(ordered), tr, inside)


def states_for_runs(runs: Sequence[StoredRun]) -> dict[int, ServerState]:
    """`server_state` of every run of `runs` with `runs` as its candidates — each server
    instance's trend tested once (a history of many runs), the same states one by one."""
    from decodescope.verdict.stack import usable

    groups: dict[tuple[Any, ...], list[StoredRun]] = {}
    out: dict[int, ServerState] = {}
    for r in runs:
        key = instance_key(r)
        if key is None:
            out[r.id] = ServerState(r.id, since_start(r), None, 0, None, False)
        else:
            groups.setdefault((r.caliber_identity, *key), []).append(r)
    for group in groups.values():
        ordered = order([r for r in group if usable(r)])
        trend_of = instance_trend(ordered)
        for r in group:
            if any(x.id == r.id for x in ordered):
                out[r.id] = _state_among(r, ordered, trend_of)
            else:  # an unusable run: among the usable ones, as server_state places it
                mine = order([*ordered, r])
                out[r.id] = _state_among(r, mine, instance_trend(mine))
    return out


def warmup_explains(slower: ServerState | None, faster: ServerState | None) -> bool:
    """A change between two runs of one stack is explained by warm-up when the slower run's
    server was warming up and the faster one's was not, or was the same server later on."""
    if slower is None or not slower.warming:
        return False
    if faster is None or not faster.warming:
        return True
    return faster.since_start_s is not None and slower.since_start_s is not None and \
        faster.since_start_s > slower.since_start_s


def sides_explained(slower: Sequence[ServerState], faster: Sequence[ServerState]) -> bool:
    """`warmup_explains` for sides of one or more runs: some run of the slower side warming,
    against the faster side's run latest after its start."""
    warm = [s for s in slower if s.warming]
    if not warm:
        return False
    late = max(faster, key=lambda s: s.since_start_s or 0.0, default=None)
    return any(warmup_explains(s, late) for s in warm)


def warming_notes(name: str, states: Sequence[ServerState]) -> list[str]:
    """A note per run of a side whose server was warming up (fresh or inside a warm-up)."""
    return [f"Server state of {name}: {s.text().split(': ', 1)[-1]} — its speed may be the "
            "server's warm-up, not the stack's" for s in states if s.warming]


def states_for_side(store: Any, side: Any) -> tuple[ServerState, ...]:
    """The server state of each stored run of a side (none for log or Prometheus windows)."""
    if getattr(side, "kind", None) != "run" or not side.run_ids:
        return ()
    from decodescope.store import runs as sr

    out = []
    for rid in side.run_ids:
        run = sr.get_run(store, rid, with_traces=False)
        if process_start(run.fingerprint) is None:
            continue
        cands = (sr.list_runs(store, caliber=run.caliber_identity, limit=100_000)
                 if run.caliber_identity else [])
        out.append(server_state(run, cands))
    return tuple(out)
