"""Field-by-name parsing of `key: value, key: value` log messages.

Engines print stats as `key: value` pairs joined by ", ". The order and the set of optional
fields drift between versions and forks, so a message is split into a name -> raw value map
and each parser picks the names it knows. A part without ": " continues the previous value
(list values such as vLLM's per-position acceptance rates: `0.832, 0.702`).
"""

from __future__ import annotations

import math
import re

_NUM = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf", re.IGNORECASE)


class Fields(dict[str, str]):
    """name -> raw value text (unit and trailing separators left on)."""

    def num(self, name: str) -> float | None:
        raw = self.get(name)
        return None if raw is None else fast_number(raw)

    def int_(self, name: str) -> int | None:
        raw = self.get(name)
        if raw is None:
            return None
        v = fast_number(raw)
        return None if v is None or math.isnan(v) or math.isinf(v) else int(round(v))

    def nums(self, name: str) -> tuple[float, ...] | None:
        raw = self.get(name)
        if raw is None:
            return None
        vals: list[float] = []
        for item in raw.split(","):  # plain numbers only: fork suffixes end the list
            try:
                vals.append(float(item.strip(" []()")))
            except ValueError:
                break
        return tuple(vals) if vals else None


def split_fields(message: str) -> Fields:
    out = Fields()
    key: str | None = None
    for part in message.split(", "):
        name, sep, value = part.partition(": ")
        if sep:
            key = name.strip()
            out[key] = value
        elif key is not None and part.strip(" ,."):
            out[key] = f"{out[key]}, {part}"
    return out


def fast_number(raw: str) -> float | None:
    """number(raw), sooner for a plain number (most stats fields): float() of the whole value
    succeeds only when number() would read that same number."""
    if "0" <= raw[:1] <= "9":  # a word (`True`) goes to number() without a failed float
        try:
            return float(raw)
        except ValueError:
            pass
    return number(raw)


def number(raw: str) -> float | None:
    """First number in a raw value: '3279.0 tokens/s' -> 3279.0, '82.5%' -> 82.5, 'True' -> 1."""
    text = raw.strip()
    low = text.lower()
    if low.startswith("true"):  # (before the float: a word is no float, and fails sooner)
        return 1.0
    if low.startswith("false"):
        return 0.0
    head = text.split(" ", 1)[0].rstrip("%.,;")
    try:
        return float(head)
    except ValueError:
        pass
    m = _NUM.search(text)
    return float(m.group()) if m else None
