"""Drafting state of a log: on / off / unknown, from all the evidence in the log.

A window (SGLang) or request (llama.cpp) without draft statistics is "no drafting" (flag
`spec_off`: one token per step) only when nothing in the log says speculative decoding is on.
Evidence that it is on: a launch config naming a speculative algorithm (SGLang's
`speculative_algorithm='EAGLE'`), draft statistics of any other window or request (before or
after it), a line that kept `accept rate` but lost `accept len` (cut mid-way). Then a window
whose draft statistics are missing (a block cut before its draft line, a paste that lost it)
is unknown (flag `draft_stats_missing`): its MAL and step rate are None, never one token per
step. A launch config that names no speculative algorithm, with no draft statistics anywhere,
is off.

Windows are released in line order. While nothing has said either way, a window without draft
statistics waits (with every window after it, at most MAX_UNDECIDED) for evidence that comes
later in the log (not in follow mode: there windows go out as they come); at the end of the
read (or past the bound) the windows still waiting are read as off, as before: a log with no sign of drafting
anywhere is a server that does not draft.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from decodescope.records.window import EngineWindow

SPEC_OFF = "spec_off"  # drafting off: one token per step
MISSING = "draft_stats_missing"  # drafting on (or may be), this window's draft stats missing
UNDECIDED = "drafting_undecided"  # internal: no draft stats, state still to be decided
SPAN_NEEDS_MAL = "span_needs_mal"  # internal: t_start_s assumed 1 token per step (SGLang)
MAX_UNDECIDED = 4096  # windows held waiting for evidence (~2 MB); then the oldest are "off"


class Drafting:
    """The evidence of one engine's log; holds windows until their drafting state is known."""

    def __init__(self) -> None:
        self.config: bool | None = None  # the launch config says on (True) / off (False)
        self.seen_on = False  # draft statistics (or a cut draft field) seen somewhere
        self.max_held = MAX_UNDECIDED  # 0 in follow mode: nothing waits for later lines
        # The windows waiting for evidence, in line order (`release` gives them when it comes):
        # an attribute, not a property, as the assembler asks after every line.
        self.held: deque[EngineWindow] = deque()

    def note_config(self, on: bool | None) -> None:
        if on is not None:
            self.config = on

    def note_on(self) -> None:
        self.seen_on = True

    def state(self) -> bool | None:
        """True: drafting on (or may be); False: off; None: nothing says either way yet."""
        if self.seen_on or self.config:
            return True
        return False if self.config is False else None

    def release(self, windows: list[EngineWindow]) -> list[EngineWindow]:
        """The windows that can go out now, in line order (each without draft statistics
        carries UNDECIDED; it leaves with spec_off or draft_stats_missing)."""
        held = self.held
        if not held and (not windows or not any(UNDECIDED in w.flags for w in windows)):
            return windows
        held.extend(windows)
        state = self.state()
        out: list[EngineWindow] = []
        while held:
            w = held[0]
            if UNDECIDED in w.flags:
                if state is None and len(held) <= self.max_held:
                    break
                w = self._decide(w, bool(state))
            out.append(w)
            held.popleft()
        return out

    def flush(self, windows: list[EngineWindow]) -> list[EngineWindow]:
        """Everything held and `windows`, decided with what is known now (nothing: off)."""
        self.held.extend(windows)
        state = bool(self.state())
        out = [self._decide(w, state) if UNDECIDED in w.flags else w for w in self.held]
        self.held.clear()
        return out

    def _decide(self, w: EngineWindow, on: bool) -> EngineWindow:
        """The window with its state in the marker's place (SGLang's span, which rests on
        tokens per step, is unknown with its MAL: SPAN_NEEDS_MAL)."""
        if not on:
            return replace(w, flags=tuple(SPEC_OFF if f == UNDECIDED else f for f in w.flags
                                          if f != SPAN_NEEDS_MAL))
        t0 = None if SPAN_NEEDS_MAL in w.flags else w.t_start_s
        return replace(w, t_start_s=t0, flags=tuple(MISSING if f == UNDECIDED else f
                                                    for f in w.flags if f != SPAN_NEEDS_MAL))
