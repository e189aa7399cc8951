"""Engine log reader: vLLM, SGLang and llama.cpp server logs -> engine windows.

    iter_windows(path, engine=None, year=None, follow=False, ...) -> Iterator[EngineWindow]
    analyze_log(path, since=None, until=None, engine=None, year=None) -> LogSummary
    split_selector("engine.log@23:30..23:45") -> ("engine.log", "23:30", "23:45")

Formats, window rules and pitfalls: docs/logs.md.
"""

from decodescope.telemetry.logs.accumulate import (
    LogAccumulator,
    analyze_log,
    is_simulated,
    window_step_rate,
)
from decodescope.telemetry.logs.lines import ENGINE_NAMES
from decodescope.telemetry.logs.log_summary import EngineSeen, IdleGap, LogSummary
from decodescope.telemetry.logs.parse_counts import ParseCounts
from decodescope.telemetry.logs.pipeline import iter_windows
from decodescope.telemetry.logs.reader import check_log_path
from decodescope.telemetry.logs.selectors import Selection, TimeSpec, parse_time, split_selector

__all__ = [
    "ENGINE_NAMES",
    "EngineSeen",
    "IdleGap",
    "LogAccumulator",
    "LogSummary",
    "ParseCounts",
    "Selection",
    "TimeSpec",
    "analyze_log",
    "check_log_path",
    "is_simulated",
    "iter_windows",
    "parse_time",
    "split_selector",
    "window_step_rate",
]
