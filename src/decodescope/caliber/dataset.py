"""Prompt datasets as caliber material: JSONL of prompts or chat messages, and ShareGPT JSON.

A dataset enters a caliber by the hash of its bytes (`DatasetSpec.sha256`): the same file at
another path is the same caliber, an edited file is another one (and a probe refuses a file
whose bytes no longer match the caliber it was given with). Request j of a probe (counting
across trials, warm-up excluded) uses entry `order[j mod n]`, where `order` is a shuffle of
the entries by the project's own PRNG (material.SplitMix64): byte-identical on every machine.

Formats (detected from the content):
- JSONL, one object per line: `{"prompt": "..."}` (also `"text"`, `"input"`, `"question"`),
  or `{"messages": [{"role": "user", "content": "..."}, ...]}` (chat endpoint only).
- ShareGPT JSON: a list of `{"conversations": [{"from": "human", "value": "..."}, ...]}`;
  the first human turn is the prompt (as `vllm bench serve --dataset-name sharegpt` takes it).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from decodescope.caliber.material import SplitMix64
from decodescope.caliber.spec import DatasetSpec
from decodescope.errors import CaliberError

FORMATS = ("jsonl-prompt", "jsonl-messages", "sharegpt")
PROMPT_KEYS = ("prompt", "text", "input", "question")
# A prompt file larger than this is not read (ShareGPT V3 is ~670 MB; cut a sample from it).
MAX_DATASET_BYTES = 256 * 1024 * 1024
REMEDY = ("Give JSONL with one {\"prompt\": ...} or {\"messages\": [...]} per line, or a "
          "ShareGPT JSON list of {\"conversations\": [...]} (docs/peers.md)")


@dataclass(frozen=True)
class Entry:
    """One dataset prompt: a text (chat: one user message) or a list of chat messages."""

    prompt: str | None = None
    messages: tuple[dict[str, str], ...] | None = None


def read_bounded(path: Path, limit: int, what: str, *, too_big_remedy: str,
                 missing_remedy: str) -> bytes:
    """A caliber's file (the caliber itself, a dataset) read whole, refused beyond `limit`
    bytes; every failure is a CaliberError naming the file."""
    where = str(path)
    try:
        size = path.stat().st_size
        if size > limit:
            raise CaliberError(f"{what} is {size} bytes; at most {limit} are read", where=where,
                               remedy=too_big_remedy)
        return path.read_bytes()
    except FileNotFoundError:
        raise CaliberError(f"{what} not found", where=where, remedy=missing_remedy) from None
    except OSError as exc:
        raise CaliberError(f"cannot read the {what}: {exc.strerror}", where=where) from None


def read_dataset(path: str | Path, seed: int = 0) -> tuple[DatasetSpec, list[Entry]]:
    """The file's DatasetSpec and entries (in file order)."""
    p = Path(path)
    where = str(p)
    raw = read_bounded(p, MAX_DATASET_BYTES, "dataset", too_big_remedy="Cut a sample of the "
                       "prompts into a smaller file", missing_remedy="Check the path")
    fmt, entries = parse_dataset(raw, where)
    spec = DatasetSpec(path=str(p.resolve()), sha256=hashlib.sha256(raw).hexdigest(), format=fmt,
                       entries=len(entries), seed=seed)
    return spec, entries


def load_entries(spec: DatasetSpec) -> list[Entry]:
    """The entries of a caliber's dataset, refused when the file's bytes changed."""
    found, entries = read_dataset(spec.path, spec.seed)
    if found.sha256 != spec.sha256:
        raise CaliberError(f"the dataset changed: sha256 {found.sha256[:16]}, the caliber has "
                           f"{spec.sha256[:16]}", where=spec.path,
                           remedy="Restore the file, or pass it again with --dataset (a new caliber)")
    return entries


def parse_dataset(raw: bytes, where: str) -> tuple[str, list[Entry]]:
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise CaliberError("dataset is not UTF-8 text", where=where, remedy=REMEDY) from None
    if text.lstrip().startswith("["):
        return "sharegpt", _sharegpt(text, where)
    entries: list[Entry] = []
    kinds = set()
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            raise CaliberError(f"line {n} is not JSON", where=where, remedy=REMEDY) from None
        entry = _entry(obj, f"{where}:{n}")
        kinds.add("messages" if entry.messages is not None else "prompt")
        entries.append(entry)
    if not entries:
        raise CaliberError("dataset holds no prompts", where=where, remedy=REMEDY)
    if len(kinds) > 1:
        raise CaliberError("dataset mixes prompt lines and messages lines", where=where,
                           remedy="Use one kind per file")
    return ("jsonl-messages" if kinds == {"messages"} else "jsonl-prompt"), entries


def _entry(obj: Any, where: str) -> Entry:
    if isinstance(obj, str) and obj:
        return Entry(prompt=obj)
    if isinstance(obj, dict):
        msgs = obj.get("messages")
        if isinstance(msgs, list) and msgs:
            out = []
            for m in msgs:
                if not (isinstance(m, dict) and isinstance(m.get("role"), str)
                        and isinstance(m.get("content"), str)):
                    raise CaliberError("a message needs string 'role' and 'content'", where=where,
                                       remedy=REMEDY)
                out.append({"role": m["role"], "content": m["content"]})
            return Entry(messages=tuple(out))
        for key in PROMPT_KEYS:
            if isinstance(obj.get(key), str) and obj[key]:
                return Entry(prompt=obj[key])
    raise CaliberError(f"no prompt in this line (keys: {', '.join(PROMPT_KEYS)} or messages)",
                       where=where, remedy=REMEDY)


def _sharegpt(text: str, where: str) -> list[Entry]:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise CaliberError(f"malformed JSON: {exc}", where=where, remedy=REMEDY) from None
    entries = []
    for item in doc if isinstance(doc, list) else []:
        conv = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(conv, list):
            continue
        first = next((t.get("value") for t in conv if isinstance(t, dict)
                      and t.get("from") in ("human", "user")), None)
        if isinstance(first, str) and first:
            entries.append(Entry(prompt=first))
    if not entries:
        raise CaliberError("no ShareGPT conversation with a human turn", where=where,
                           remedy=REMEDY)
    return entries


def order(n: int, seed: int) -> list[int]:
    """A fixed shuffle of range(n) (Fisher-Yates over SplitMix64)."""
    idx = list(range(n))
    rng = SplitMix64(seed)
    for i in range(n - 1, 0, -1):
        j = rng.below(i + 1)
        idx[i], idx[j] = idx[j], idx[i]
    return idx


class Sampler:
    """Entry for request j of a probe: order[j mod n]; warm-up requests take entries from the
    end of the order, so the first counted requests do not repeat them."""

    def __init__(self, spec: DatasetSpec, entries: list[Entry]):
        self.entries = entries
        self.order = order(len(entries), spec.seed)

    def entry(self, index: int) -> Entry:
        return self.entries[self.order[index % len(self.order)]]

    def warmup_entry(self, i: int) -> Entry:
        return self.entries[self.order[-1 - (i % len(self.order))]]
