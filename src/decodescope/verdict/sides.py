"""Resolve a selector to a Side: a stored run (`42`, `last`, a label `key=value`), a named
baseline, or an engine-log window `FILE@START..END` (`engine.log@2026-09-15T23:30..23:45`,
`engine.log@23:30..23:45`, `engine.log@09-15 23:30..09-15 23:45`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from decodescope.errors import StoreError, UsageError
from decodescope.store import runs as store_runs
from decodescope.store.db import Store
from decodescope.store.runs import StoredRun
from decodescope.telemetry.window import EngineWindow
from decodescope.verdict.side import Side, side_from_runs, side_from_windows

SELECTOR_HELP = ("a run id (42), `last`, a run label key=value, a baseline name, or an engine "
                 "log window FILE@START..END (e.g. engine.log@23:30..23:45)")


def is_log_selector(selector: str) -> bool:
    path, at, rng = selector.rpartition("@")
    return bool(at and path and ".." in rng)


def is_run_selector(selector: str) -> bool:
    s = selector.strip().lstrip("#")
    return s.isdigit() or s == "last" or "=" in s


def load_run(store: Store, run_id: int) -> StoredRun:
    """A stored run with its derived result; traces are read only when the result is missing."""
    run = store_runs.get_run(store, run_id, with_traces=False)
    if not run.result or "trials" not in run.result:
        from decodescope.analysis.run_result import analyze_run

        run = store_runs.get_run(store, run_id, with_traces=True)
        run.result = analyze_run(run)
    return run


def resolve_side(selector: str, *, store: Store | None, engine: str | None = None,
                 year: int | None = None) -> Side:
    if is_log_selector(selector):
        return load_log_side(selector, engine=engine, year=year)
    if store is None:
        raise UsageError(f"{selector!r} needs the run store", where="triage",
                         remedy=f"Give {SELECTOR_HELP}")
    if is_run_selector(selector):
        run = load_run(store, store_runs.resolve_run_id(store, selector))
        return dataclasses.replace(side_from_runs([run]), name=f"run {run.id}")
    from decodescope.verdict.baseline import get_baseline

    base = get_baseline(store, selector, missing_ok=True)
    if base is not None:
        if not base.run_ids:
            raise UsageError(f"baseline {base.name!r} has no runs to compare with", where="triage",
                             remedy="Compare against runs, or use `decodescope check` for a band")
        runs = [load_run(store, i) for i in base.run_ids]
        return side_from_runs(runs, name=f"baseline {base.name}")
    if Path(selector).exists():
        raise UsageError(f"{selector!r} is a file but has no time range", where="triage",
                         remedy="Write FILE@START..END, e.g. engine.log@23:30..23:45")
    raise StoreError(f"not a run, baseline or log window: {selector!r}", where=store.path,
                     remedy=f"Give {SELECTOR_HELP}")


def load_log_side(selector: str, *, engine: str | None = None, year: int | None = None) -> Side:
    from decodescope.telemetry.logs.selectors import split_selector

    path, start, end = split_selector(selector)
    if not Path(path).is_file():
        raise UsageError(f"no such log file: {path}", where=selector,
                         remedy="Give the engine's log file: FILE@START..END")
    windows, eng = read_log_windows(path, start, end, engine=engine, year=year)
    if not windows:
        raise UsageError(f"no engine windows in {selector}", where=path,
                         remedy="Check the time range against the log (`decodescope logs "
                                f"{path}` lists its windows)")
    name = f"{Path(path).name}@{start or ''}..{end or ''}"
    side = side_from_windows(name, windows, engine=eng)
    return dataclasses.replace(side, source=f"engine log {Path(path).name}, {side.when()}, "
                                            f"{len(side.units)} windows"
                                            + (f" × {side.window_s:.0f} s" if side.window_s else "")
                                            + (" [SIMULATED]" if side.simulated else ""))


def read_log_windows(path: str, start: str | None, end: str | None, *, engine: str | None,
                     year: int | None) -> tuple[list[EngineWindow], str | None]:
    """Engine windows of a log between two times, through the log parser."""
    from decodescope.telemetry import logs

    summary = logs.analyze_log(path, since=start, until=end, engine=engine, year=year,
                               max_windows=0)  # 0: keep every window of the range
    return list(summary.windows), summary.engine
