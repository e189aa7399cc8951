"""Quantization / kernel-backend selection lines from an engine log, since its last start.

The seed compared two launches "line by line" on lines like
`Using 'MARLIN' NvFp4 MoE backend out of potential backends: [...]`. We find the last start
of the engine in the log, keep the selection lines after it, strip the per-line prefix
(pid, level, timestamp, `[file.py:NNN]`, llama.cpp's elapsed time) so two launches compare
equal when they chose the same, and drop repeats (every TP worker prints the same line).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from decodescope.fingerprint.stack import Item
from decodescope.redact import redact_text

LOG_TAIL_BYTES = 32 * 1024 * 1024  # read at most the last 32 MiB: starts are rarely older
MAX_LINES = 200  # selection lines kept; a launch prints a few dozen at most

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Markers of an engine start. A launch prints its *begin* markers before loading the model
# and choosing kernels; vLLM prints "Starting vLLM API server" only after the model is loaded,
# i.e. after the `Using '…' backend` selection lines, so that marker closes a launch instead
# of opening one. The latest launch runs from its newest begin marker (or, with only late
# markers in the file, from just after the late marker of the launch before it).
BEGIN_MARKERS = [
    re.compile(r"vLLM API server version"),
    re.compile(r"non-default args:"),
    re.compile(r"server_args=ServerArgs\("),
    re.compile(r"^build: \d+ \("),  # llama.cpp: first line of every start
    re.compile(r"\bmain: build = \d+"),
]
BEGIN_GROUP_LINES = 2  # begin markers this close together open one launch (version, args)
LATE_MARKERS = [
    re.compile(r"Starting vLLM API server"),
]
START_MARKERS = BEGIN_MARKERS + LATE_MARKERS
# Selection lines (kept verbatim after prefix stripping). Case-insensitive.
SELECTION = [re.compile(p, re.IGNORECASE) for p in (
    r"\bUsing '?[\w\-]+'? .*\bbackend\b",  # NvFp4 / Fp8 / Unquantized MoE backend, attention
    r"\bUsing .* for NVFP4 GEMM",
    r"\bUsing FlashInfer\b",
    r"\bUsing [\w\-]+ kernels? for\b",
    r"\bUsing \w+LinearKernel\b",
    r"does not have native support for FP4",
    r"\bSelected backend\b|\battention backend\b",
    r"\bquantization\b.*\b(nvfp4|fp8|awq|gptq|marlin|modelopt|mxfp4|compressed-tensors)\b",
    r"\bLoading drafter model\b|\bspeculative\b.*\b(method|config|algorithm)\b",
    r"\bsystem_info:",  # llama.cpp
    r"^\s*CPU\s*:",
    r"\bload_tensors:.*(offload|buffer size|using)",
    r"\bggml_cuda_init\b|\bDevice \d+: ",
    r"\bllama_model_load_from_file_impl: using device\b",
)]
# Line prefixes to remove before comparing launches.
_PREFIXES = [
    re.compile(r"^\((?:[A-Za-z_]+\w*)? ?pid=\d+\)\s*"),  # (APIServer pid=5020), (EngineCore_DP0 pid=1)
    re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s*"),
    re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?(?: [A-Z]+\d*)*\]\s*"),  # SGLang
    re.compile(r"^\[[\w./\-]+:\d+\]\s*"),  # [nvfp4.py:203]
    re.compile(r"^\d+\.\d\d\.\d\d\d\.\d\d\d [DIWE] "),  # llama.cpp elapsed time + level
    re.compile(r"^[\w./\-]+\.py:\d+\]\s*"),  # V0: metrics.py:NNN]
]


def normalize_line(line: str) -> str:
    s = _ANSI.sub("", line).rstrip()
    for _ in range(3):  # prefixes nest: (pid) INFO date [file:line] message
        before = s
        for pat in _PREFIXES:
            s = pat.sub("", s)
        if s == before:
            break
    return s.strip()


def _read_tail(path: Path, max_bytes: int) -> tuple[str, bool]:
    size = path.stat().st_size
    with path.open("rb") as f:
        if size > max_bytes:
            f.seek(size - max_bytes)
            data = f.read()
            data = data[data.find(b"\n") + 1:]
            return data.decode("utf-8", "replace"), True
        return f.read().decode("utf-8", "replace"), False


def latest_start(lines: list[str]) -> int | None:
    """Index of the line where the latest engine launch begins (None: no marker)."""
    begins: list[int] = []
    lates: list[int] = []
    for i, raw in enumerate(lines):
        if "erver" not in raw and "build" not in raw and "args" not in raw:
            continue  # every marker holds one of these: skip the normalisation of most lines
        clean = normalize_line(raw)
        if any(m.search(clean) for m in BEGIN_MARKERS):
            begins.append(i)
        elif any(m.search(clean) for m in LATE_MARKERS):
            lates.append(i)
    if not begins and not lates:
        return None
    # A launch without a begin marker in the file starts after the late marker before it.
    after_prev_late = lates[-2] + 1 if len(lates) >= 2 else 0
    if not begins:
        return after_prev_late
    j = len(begins) - 1  # one launch prints several begin markers in a row (version, args)
    while j > 0 and begins[j] - begins[j - 1] <= BEGIN_GROUP_LINES:
        j -= 1
    begin = begins[j]
    if lates and lates[-1] > begin:  # the newest launch got as far as its late marker
        return max(begin, after_prev_late)
    return begin


def backend_lines(text: str) -> tuple[list[str], str | None, int | None]:
    """(selection lines of the latest launch, its start line, its 1-based line number)."""
    lines = text.splitlines()
    start_idx = latest_start(lines)
    begin = start_idx or 0
    seen: set[str] = set()
    picked: list[str] = []
    for raw in lines[begin:]:
        clean = normalize_line(raw)
        if clean and clean not in seen and any(p.search(clean) for p in SELECTION):
            seen.add(clean)
            picked.append(redact_text(clean))
            if len(picked) >= MAX_LINES:
                break
    start_line = None
    if start_idx is not None:
        marker = next((i for i in range(start_idx, len(lines))
                       if any(m.search(normalize_line(lines[i])) for m in START_MARKERS)), start_idx)
        start_line = redact_text(normalize_line(lines[marker]))
    return picked, start_line, (start_idx + 1 if start_idx is not None else None)


def collect_backend(log_path: str | os.PathLike[str] | None) -> dict[str, Item]:
    if log_path is None:
        why = "no engine log given (--log FILE)"
        return {"lines": Item.missing(why), "last_start": Item.missing(why)}
    path = Path(log_path)
    try:
        text, cut = _read_tail(path, LOG_TAIL_BYTES)
    except OSError as exc:
        why = f"cannot read {path}: {exc.strerror or exc}"
        return {"lines": Item.missing(why), "last_start": Item.missing(why)}
    picked, start, lineno = backend_lines(text)
    note = f"last {LOG_TAIL_BYTES // (1024 * 1024)} MiB of the log read" if cut else None
    items = {"lines": Item.ok(picked, note)}
    if start is None:
        items["last_start"] = Item.missing(
            "no engine start marker in the log: lines from the whole file were used")
    else:
        items["last_start"] = Item.ok({"line": start, "line_number": lineno})
    return items
