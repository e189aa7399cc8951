"""Text rendering of a fingerprint: grouped by section, collected vs unavailable with why."""

from __future__ import annotations

import json
import shlex
from typing import Any

from decodescope.fingerprint.stack import SECTIONS, Fingerprint, Item

MAX_VALUE_CHARS = 240  # one-line values beyond this are cut in text (JSON keeps everything)
_MULTILINE = {"lines"}  # items shown one element per line


def _fmt(name: str, value: Any) -> str:
    if name == "cmdline" and isinstance(value, list):
        return shlex.join(str(v) for v in value)
    if isinstance(value, dict) and {"min", "median", "max"} <= set(value):
        return (f"min {value['min']:g} / median {value['median']:g} / max {value['max']:g} MHz "
                f"(n={value.get('n')}, during {value.get('during')})")
    if isinstance(value, dict) and set(value) == {"epoch", "iso"}:
        return str(value["iso"])
    if isinstance(value, (dict, list)):
        text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    else:
        text = str(value)
    if len(text) > MAX_VALUE_CHARS:
        text = text[: MAX_VALUE_CHARS - 1] + "…"
    return text


def _section_lines(name: str, items: dict[str, Item]) -> list[str]:
    whys = {it.why for it in items.values() if not it.collected}
    if items and all(not it.collected for it in items.values()) and len(whys) == 1:
        return [f"{name}: unavailable — {whys.pop()}"]
    n_ok = sum(1 for it in items.values() if it.collected)
    out = [f"{name} ({n_ok}/{len(items)} collected)"]
    width = max((len(k) for k in items), default=0) + 2
    for key, it in items.items():
        if not it.collected:
            out.append(f"  – {key:<{width}}unavailable: {it.why}")
            continue
        if key.rsplit(".", 1)[-1] in _MULTILINE and isinstance(it.value, list):
            out.append(f"  ✓ {key:<{width}}{len(it.value)} lines" + (f" ({it.why})" if it.why else ""))
            out.extend(f"      {line}" for line in it.value)
            continue
        note = f"  [{it.why}]" if it.why else ""
        out.append(f"  ✓ {key:<{width}}{_fmt(key.rsplit('.', 1)[-1], it.value)}{note}")
    return out


def render_fingerprint(fp: Fingerprint) -> str:
    n_ok, n_missing = fp.counts()
    head = (f"fingerprint of {fp.url or '?'} at {fp.taken_at} · {n_ok} collected, "
            f"{n_missing} unavailable · {fp.duration_s:.2f} s" if fp.duration_s is not None
            else f"fingerprint of {fp.url or '?'} at {fp.taken_at}")
    lines = [head]
    names = [s for s in SECTIONS if s in fp.sections] + [s for s in fp.sections if s not in SECTIONS]
    for name in names:
        lines.append("")
        lines.extend(_section_lines(name, fp.sections[name]))
    return "\n".join(lines)
