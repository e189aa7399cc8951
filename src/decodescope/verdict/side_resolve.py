"""Resolve a selector to a Side: a stored run (`42`, `last`, a label `key=value`), a named
baseline, or an engine-log window `FILE@START..END` (`engine.log@2026-09-15T23:30..23:45`,
`engine.log@23:30..23:45`, `engine.log@09-15 23:30..09-15 23:45`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from decodescope.errors import StoreError, UsageError
from decodescope.records.stored_run import StoredRun
from decodescope.records.window import EngineWindow
from decodescope.store import runs as store_runs
from decodescope.store.db import Store
from decodescope.verdict.side import Side
from decodescope.verdict.side_from_runs import side_from_runs
from decodescope.verdict.side_from_windows import side_from_windows

SELECTOR_HELP = ("a run id (42), `last`, a run label key=value, a baseline name, an engine "
                 "log window FILE@START..END (e.g. engine.log@23:30..23:45), or a Prometheus "
                 "window prom+http://HOST:9090/?job=vllm@23:00..23:30 (prom:?job=vllm@... "
                 "with --prometheus URL)")


def is_log_selector(selector: str) -> bool:
    """A side that needs no run store: a log window or a Prometheus window."""
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
                 year: int | None = None, prometheus: str | None = None) -> Side:
    from decodescope.telemetry.prom_history import is_prom_selector

    if is_prom_selector(selector):
        from decodescope.verdict.prom_side import load_prom_side

        return dataclasses.replace(load_prom_side(selector, engine=engine, server=prometheus),
                                   selector=selector)
    side = _resolve_side(selector, store=store, engine=engine, year=year)
    side = dataclasses.replace(side, selector=selector)
    if side.caliber is not None and side.caliber_path is None and not _builtin(side.caliber_ref):
        found = find_caliber_file(side.caliber_identity)
        if found:
            side = dataclasses.replace(side, caliber_path=found)
    return side


def _builtin(ref: str | None) -> bool:
    if not ref:
        return True
    from decodescope.caliber.resolve import builtin_calibers

    return ref in builtin_calibers()


CALIBER_DIRS = (".", "calibers")  # where a file caliber is looked for when its path is not stored


def find_caliber_file(identity: str | None) -> str | None:
    """A .toml file in the working directory (or ./calibers) whose caliber has this identity:
    for a runnable "Next" command when the run did not store its caliber file's path."""
    if not identity:
        return None
    from decodescope.caliber.resolve import load_file
    from decodescope.errors import DecodescopeError

    for d in CALIBER_DIRS:
        for p in sorted(Path(d).glob("*.toml"))[:200]:
            try:
                if load_file(p).identity == identity:
                    return str(p)
            except (DecodescopeError, OSError, ValueError):
                continue
    return None


def _resolve_side(selector: str, *, store: Store | None, engine: str | None = None,
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
    read = read_log(path, start, end, engine=engine, year=year)
    if not read.windows:
        raise UsageError(f"no engine windows in {selector}", where=path,
                         remedy="Check the time range against the log (`decodescope logs "
                                f"{path}` lists its windows)")
    name = f"{Path(path).name}@{start or ''}..{end or ''}"
    side = side_from_windows(name, read.windows, engine=read.engine, logged_spec=read.spec,
                             before=read.before)
    notes = side.notes
    if read.duplicates:
        notes += (f"{read.duplicates} duplicated log line(s) dropped (same engine, same text, "
                  "stamps within 50 ms: a log shipper writing lines twice)",)
    blocks = (f" in blocks of {side.block_windows}" if side.block_windows > 1 else "")
    return dataclasses.replace(
        side, notes=notes,
        source=f"engine log {Path(path).name}, {side.when()}, "
               f"{sum(1 for _ in read.windows)} windows"
               + (f" × {side.window_s:.0f} s" if side.window_s else "")
               + (f", {side.windows_trimmed} partial trimmed" if side.windows_trimmed else "")
               + blocks + (" [SIMULATED]" if side.simulated else ""))


@dataclasses.dataclass(frozen=True)
class LogRead:
    windows: list[EngineWindow]
    engine: str | None
    spec: dict[str, Any]  # LogSummary.spec: method, k, lines, off
    before: list[EngineWindow]  # the windows just before the range, per engine (context)
    duplicates: int


def read_log(path: str, start: str | None, end: str | None, *, engine: str | None,
             year: int | None) -> LogRead:
    """Engine windows of a log between two times, the window before the range for each engine
    (to tell whether the first one is partial), and what the log says about speculation."""
    from decodescope.telemetry.logs import ParseCounts, Selection, iter_windows, parse_time
    from decodescope.telemetry.logs.accumulate import spec_of

    counts = ParseCounts()
    readers: list[Any] = []
    sel = Selection(since=parse_time(start) if start else None,
                    until=parse_time(end) if end else None)
    last: dict[tuple[Any, ...], EngineWindow] = {}
    before: list[EngineWindow] = []
    keep: list[EngineWindow] = []
    for w in iter_windows(path, engine=engine, year=year, counts=counts, reader_out=readers,
                          selection=sel):
        if any(True for _ in sel.apply(iter((w,)))):
            if not keep:
                before = list(last.values())
            keep.append(w)
        last[(w.printed.get("pid"), w.engine_id)] = w
    reader = readers[0] if readers else None
    found = reader.engine.name if reader is not None and reader.engine else None
    return LogRead(keep, found, spec_of(reader), before, counts.duplicates)


def read_log_windows(path: str, start: str | None, end: str | None, *, engine: str | None,
                     year: int | None) -> tuple[list[EngineWindow], str | None]:
    """Engine windows of a log between two times, through the log parser."""
    read = read_log(path, start, end, engine=engine, year=year)
    return read.windows, read.engine
