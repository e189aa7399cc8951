"""Findings about a log read: what was not understood, and what the numbers rest on."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from decodescope.records.findings import Finding
from decodescope.telemetry.logs.parse_counts import ParseCounts

if TYPE_CHECKING:
    from decodescope.telemetry.logs.log_summary import LogSummary
    from decodescope.telemetry.logs.selectors import Selection

DAY_S = 86400.0


def notes_for(s: LogSummary, counts: ParseCounts, flags: dict[str, int],
              sel: Selection | None) -> tuple[Finding, ...]:
    out: list[Finding] = []
    _input_notes(out, s, counts)
    bad = sum(counts.unparsed.values())
    if s.windows_total == 0:
        out.append(Finding(
            "logs.no_windows",
            f"no engine windows found ({human_bytes(counts.bytes_read)} read, {bad} stats lines "
            "not understood)",
            remedy="Check that the file is a vLLM / SGLang / llama.cpp server log with stats "
                   "logging on (vLLM: no --disable-log-stats); give --engine to skip detection",
            severity="warning"))
    if bad:
        kinds = ", ".join(f"{k} {n}" for k, n in counts.unparsed.most_common())
        out.append(Finding(
            "logs.unparsed", f"{bad} lines carried engine stats keywords but could not be read",
            context=kinds, remedy="The format may be new: please report one such line; the "
            "numbers on these lines are missing from the summary", severity="warning"))
    if counts.unknown_fields:
        names = ", ".join(sorted(counts.unknown_fields)[:8])
        out.append(Finding("logs.unknown_fields", "fields not known to decodescope were ignored",
                           context=names, severity="info"))
    if counts.duplicates:
        out.append(Finding(
            "logs.duplicate_lines",
            f"{_n(counts.duplicates, 'duplicated line')} dropped: the same engine printed the "
            "same text twice within 50 ms (a log shipper writing every line twice)",
            remedy="Counted once; fix the log pipeline so each line is written once",
            severity="warning"))
    _flag_notes(out, flags)
    _integrity_notes(out, s, counts)
    if sel is not None and sel.without_time:
        out.append(Finding(
            "logs.selection_without_time",
            f"left out by --since/--until: {_n(sel.without_time, 'window')} without clock time",
            remedy="llama.cpp stamps elapsed time only; leave out --since/--until for its logs",
            severity="warning"))
    if sel is not None and sel.active and _partial(sel) and s.t_first_s is not None \
            and s.t_last_s is not None and s.t_last_s - s.t_first_s > DAY_S:
        out.append(Finding(
            "logs.selection_day", "the log spans more than one day; a time without a date was "
            "placed on " + _fmt(sel.since_s if sel.since_s is not None else sel.until_s),
            remedy="Give MM-DD HH:MM to pick another day", severity="info"))
    if s.windows_partial_coverage:
        cov = f" ({s.draft_coverage:.0%} of steps drafted)" if s.draft_coverage is not None else ""
        out.append(Finding(
            "logs.partial_draft_coverage",
            f"not every decode step drafted{cov}: drafts per second are not a step rate",
            context=("step rate from generated − accepted where the counts allow"
                     + (f"; unknown for {_n(s.windows_step_unknown, 'window')} (drafts only)"
                        if s.windows_step_unknown else "")),
            # llama.cpp prints exact counts per request; only vLLM's lines lack a step counter
            remedy=("vLLM log lines have no step counter: probe with /metrics reachable "
                    "(vllm:iteration_tokens_total counts steps) for an exact step rate"
                    if "vllm" in s.engine_kinds() else None),
            severity="info"))
    if s.windows_steps_withheld:
        out.append(Finding(
            "logs.steps_withheld",
            f"step rate withheld for {_n(s.windows_steps_withheld, 'window')}: generated − "
            "accepted is below the drafts (generated tokens rebuilt from the printed throughput "
            "× interval do not match the spec counts)", severity="info"))
    if s.spec.get("off") and s.engine == "vllm" and s.windows_total:
        out.append(Finding(
            "logs.spec_off",
            "no speculative-decoding line and no speculative launch config in the log: "
            "speculative decoding off (MAL 1, one token per step)", severity="info"))
    missing = flags.get("draft_stats_missing", 0)
    if missing:
        out.append(Finding(
            "logs.draft_stats_missing",
            f"{_n(missing, 'window')} without draft statistics while other lines of the log "
            "say speculative decoding is on (a block cut before its draft line, a paste that "
            "lost it, a line cut mid-way): MAL and step rate unknown there, never one token "
            "per step", severity="warning"))
    if s.mal_overall_estimated:
        out.append(Finding(
            "logs.mal_printed", "this engine prints MAL but no draft counts: overall MAL weights "
            "each window's printed value by its estimated request-steps", severity="info"))
    return tuple(out)


_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "llamacpp": "llama.cpp"}


def _integrity_notes(out: list[Finding], s: LogSummary, counts: ParseCounts) -> None:
    """Lines cut short or too long, windows with 0 running, the stats interval assumed."""
    if counts.cut_lines:
        out.append(Finding(
            "logs.cut_line",
            f"{_n(counts.cut_lines, 'stats line')} cut short (the last line, without its "
            "newline: a log still being written, a truncated copy or paste): no number read "
            "from it", remedy="Read the log again once the line is complete", severity="warning"))
    if counts.long_lines:
        out.append(Finding(
            "logs.long_lines",
            f"{_n(counts.long_lines, 'line')} longer than 4 MiB skipped unread (no newline: a "
            "binary or corrupt file, or one line of dumped data)", severity="warning"))
    if s.windows_zero_running:
        out.append(Finding(
            "logs.zero_running",
            f"step rate unknown for {_n(s.windows_zero_running, 'window')} with 0 running at "
            "the line's time (requests that started and ended inside the window): there is "
            "no rate per running request", severity="info"))
    by_engine: dict[tuple[str, str | None], list[tuple[float, int]]] = {}
    for eng, eid, sec, n in s.intervals:
        by_engine.setdefault((eng, eid), []).append((sec, n))
    if by_engine:
        parts = [f"{_NAMES.get(e, e)} {eid or '(no engine id)'}: " + ", ".join(
            f"{sec:g} s ({_n(n, 'window')})" for sec, n in sorted(v, key=lambda x: -x[1]))
            for (e, eid), v in by_engine.items()]
        out.append(Finding(
            "logs.interval",
            "stats interval measured from the spacing of each engine's lines (the smallest "
            "spacing that recurs; a window is never longer than the time since the line "
            "before): " + "; ".join(parts), severity="info"))
    if s.engine == "sglang" and s.spec.get("decode_log_interval_assumed") and s.windows_total:
        out.append(Finding(
            "logs.sglang_interval_assumed",
            f"SGLang: {s.spec.get('decode_log_interval')} decode steps per Decode line assumed "
            "(the --decode-log-interval default; the launch line is not in the log): window "
            "durations rest on it", remedy="Include the server's launch line (server_args ... "
            "decode_log_interval=N) in the log, or keep the default", severity="info"))
    changes = s.spec.get("interval_changes") if isinstance(s.spec, dict) else None
    if changes:
        first = changes[0]
        out.append(Finding(
            "logs.interval_changed",
            f"the stats interval changed {_n(len(changes), 'time')}: the first at "
            f"{_stamp(first[0]) if first[0] is not None else '?'}, {first[1]:g} s -> "
            f"{first[2]:g} s (lines spaced by hidden idle intervals, or a restart with another "
            "VLLM_LOG_STATS_INTERVAL)", severity="info"))


def _input_notes(out: list[Finding], s: LogSummary, counts: ParseCounts) -> None:
    """What the file itself is: compressed (or cut short), two engines or servers mixed,
    stamps going backwards."""
    if counts.compressed:
        out.append(Finding(
            "logs.compressed", f"{counts.compressed}-compressed log, read through the "
            f"decompressor ({human_bytes(counts.bytes_read)} of text; no seek)",
            severity="info"))
    if counts.damaged:
        out.append(Finding(
            "logs.compressed_damaged",
            f"the {counts.compressed or 'compressed'} file ends early or is damaged: read up "
            f"to {human_bytes(counts.bytes_read)} of text, the rest is missing",
            context=counts.damaged, remedy="Check the file (gzip -t FILE); a log compressed "
            "while it was still written is cut where the compressor stopped",
            severity="warning"))
    kinds = s.engine_kinds()
    if len(kinds) > 1:
        per = "; ".join(f"{_NAMES.get(k, k)}: " + ", ".join(
            f"{_who(e)} {_n(e.windows, 'window')}" for e in s.engines if e.engine == k)
            for k in kinds)
        out.append(Finding(
            "logs.mixed_engines",
            f"{len(kinds)} engines in one log ({' and '.join(_NAMES.get(k, k) for k in kinds)}): "
            "each is read into its own windows; the decode, MAL and step-rate figures sum up "
            "all of them", context=per,
            remedy=f"Give --engine {kinds[0]} (or {kinds[1]}) to read one of them",
            severity="warning"))
    for kind in kinds:
        _servers_note(out, [e for e in s.engines if e.engine in (kind, None)], kind)
    if counts.other_engines:
        names = ", ".join(f"{_NAMES.get(k, k)} {_n(n, 'line')}"
                          for k, n in counts.other_engines.most_common())
        first = next(iter(counts.other_engines))
        out.append(Finding(
            "logs.other_engine_not_read",
            f"this log also holds another engine's stats lines, not read under --engine "
            f"{s.engine}: {names}", remedy=f"Leave out --engine (auto mode reads every engine "
            f"of a mixed log), or give --engine {first}", severity="warning"))
    if counts.backwards:
        jump = counts.backwards_first
        where = (f"; the first at byte {jump[0]:,}: {_stamp(jump[2])} after {_stamp(jump[1])}"
                 f" ({jump[2] - jump[1]:+.0f} s)") if jump else ""
        out.append(Finding(
            "logs.time_backwards",
            f"timestamps go backwards {_n(counts.backwards, 'time')} (largest jump "
            f"{counts.backwards_max_s:.0f} s){where}",
            context="windows are kept in line order, not re-sorted; idle gaps and "
                    "--since/--until around a jump may be off",
            remedy="A clock set back (DST, NTP), a restarted engine or two time zones in one "
                   "merged log; give --since/--until on one side of the jump",
            severity="warning"))


def _servers_note(out: list[Finding], seen: list[Any], kind: str) -> None:
    """Two pids of one engine: two servers writing at once (their spans overlap), or one
    restarted (they follow each other)."""
    pids = sorted({e.pid for e in seen if e.pid is not None})
    if len(pids) < 2:
        return
    spans: dict[int, tuple[float, float]] = {}
    for e in seen:
        if e.pid is None or e.t_first_s is None or e.t_last_s is None:
            continue
        a, b = spans.get(e.pid, (e.t_first_s, e.t_last_s))
        spans[e.pid] = (min(a, e.t_first_s), max(b, e.t_last_s))
    ordered = sorted(spans.values())
    overlap = any(b[0] < a[1] for a, b in zip(ordered, ordered[1:], strict=False))
    counts = ", ".join(f"pid {p}: {_n(sum(e.windows for e in seen if e.pid == p), 'window')}"
                       for p in pids)
    name = _NAMES.get(kind, kind)
    if overlap:
        out.append(Finding(
            "logs.servers_mixed",
            f"{len(pids)} {name} servers write to this log at the same time ({counts}): each "
            "is read into its own windows; the figures sum up all of them",
            remedy="Split the log by pid (grep 'pid=N') to read one server",
            severity="warning"))
    else:
        out.append(Finding(
            "logs.server_restarted", f"{name} restarted in this log ({counts}): windows per "
            "pid, the figures sum up all of them", severity="info"))


def _who(e: Any) -> str:
    parts = [f"pid {e.pid}" if e.pid is not None else "", e.engine_id or ""]
    return " ".join(p for p in parts if p) or "(no pid)"


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%m-%d %H:%M:%S")


def _flag_notes(out: list[Finding], flags: dict[str, Any]) -> None:
    if flags.get("interval_default"):
        out.append(Finding(
            "logs.interval_default",
            f"default stats interval for {_n(flags['interval_default'], 'window')} (too few "
            "lines to measure the spacing)", severity="info"))
    if flags.get("may_include_idle"):
        out.append(Finding(
            "logs.window_spans_idle",
            f"left out of decode and step-rate figures: {_n(flags['may_include_idle'], 'window')} "
            "spanning an idle period (SGLang measures from the previous Decode line)",
            severity="info"))
    if flags.get("drafts_from_printed_mal"):
        out.append(Finding(
            "logs.drafts_from_mal",
            f"drafts taken from the printed mean acceptance length for "
            f"{_n(flags['drafts_from_printed_mal'], 'window')}: fewer than k tokens drafted per "
            "step (n-gram?)", severity="info"))
    if flags.get("v0_cumulative_diff") or flags.get("v0_first_spec_line"):
        out.append(Finding(
            "logs.v0_cumulative",
            "vLLM V0 speculative counts grow monotonically (cumulative): successive lines are "
            "diffed; the first line holds counts since engine start", severity="info"))
    if flags.get("no_clock_time"):
        out.append(Finding(
            "logs.no_clock_time", "llama.cpp stamps elapsed time only: windows are requests "
            "without clock time (no idle gaps, no --since/--until)", severity="info"))


def _n(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def human_bytes(n: int) -> str:
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n} bytes"


def _partial(sel: Selection) -> bool:
    return any(t is not None and t.absolute_s is None and t.month is None
               for t in (sel.since, sel.until))


def _fmt(t: float | None) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d") if t is not None else "?"
