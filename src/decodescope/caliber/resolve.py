"""Load and validate caliber TOML files; resolve names (`NAME`, `NAME@VERSION`, a path)."""

from __future__ import annotations

import math
import sys
from dataclasses import fields
from importlib import resources
from pathlib import Path
from typing import Any

from decodescope.caliber.dataset import read_bounded
from decodescope.caliber.spec import (
    CONTENT_CLASSES,
    MAX_BLOCKS,
    MAX_CONCURRENCY,
    MAX_OUTPUT_TOKENS,
    MAX_REQUESTS_PER_TRIAL,
    MAX_TARGET_TOKENS,
    NAME_PATTERN,
    Caliber,
    LoadSpec,
    OutputSpec,
    PromptSpec,
    SamplingSpec,
)
from decodescope.errors import CaliberError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SECTIONS = {"prompt": PromptSpec, "output": OutputSpec, "sampling": SamplingSpec,
            "load": LoadSpec}
TOP_TYPES: dict[str, type | tuple[type, ...]] = {
    "name": str, "version": int, "description": str, "task_class": str, "thinking": bool,
    "endpoint": str, "concurrency": int, "include_usage": bool, "continuous_usage_stats": bool,
}
SECTION_TYPES: dict[str, dict[str, type | tuple[type, ...]]] = {
    "prompt": {"content_class": str, "task": str, "material": str, "material_seed": int,
               "blocks": int, "target_tokens": int, "system": str, "text": str},
    "output": {"max_tokens": int, "min_tokens": int, "ignore_eos": bool,
               "steady_state_start": int},
    "sampling": {"temperature": (int, float), "top_p": (int, float), "top_k": int, "seed": int,
                 "presence_penalty": (int, float), "frequency_penalty": (int, float),
                 "repetition_penalty": (int, float), "extra": dict},
    "load": {"request_rate": (int, float), "burstiness": (int, float), "num_requests": int,
             "duration_s": (int, float)},
}
# [dataset] in a caliber file: the path (relative to the file), optional expected sha256 and
# order seed; the file is read and hashed when the caliber is loaded.
DATASET_TYPES: dict[str, type | tuple[type, ...]] = {"path": str, "sha256": str, "seed": int}
REMEDY = "See `decodescope calibers show demo-code-rewrite` for a valid example"
# A caliber file is a page of TOML (a literal 64K-token prompt is ~300 KB); a larger file is
# not read.
MAX_CALIBER_FILE_BYTES = 4 * 1024 * 1024


def parse_caliber(data: dict[str, Any], where: str) -> Caliber:
    """Validate a parsed TOML document and build a Caliber. Errors name the key and file."""
    kw: dict[str, Any] = {}
    for key, value in data.items():
        if key == "dataset":
            if not isinstance(value, dict):
                raise CaliberError("[dataset] must be a table", where=where, remedy=REMEDY)
            kw[key] = _dataset(_check_keys(value, DATASET_TYPES, "dataset.", where), where)
        elif key in SECTIONS:
            if not isinstance(value, dict):
                raise CaliberError(f"[{key}] must be a table", where=where, remedy=REMEDY)
            kw[key] = SECTIONS[key](**_check_keys(value, SECTION_TYPES[key], f"{key}.", where))
        elif key in TOP_TYPES:
            _check_type(key, value, TOP_TYPES[key], where)
            kw[key] = value
        else:
            raise CaliberError(f"unknown caliber key '{key}'", where=where,
                               remedy=f"Known keys: {', '.join(sorted([*TOP_TYPES, *SECTIONS, 'dataset']))}")
    for required in ("name", "version"):
        if required not in kw:
            raise CaliberError(f"caliber has no '{required}'", where=where, remedy=REMEDY)
    cal = Caliber(**kw)
    check_values(cal, where)
    return cal


def _dataset(d: dict[str, Any], where: str) -> Any:
    from decodescope.caliber.dataset import read_dataset

    if "path" not in d:
        raise CaliberError("[dataset] needs a path", where=where, remedy=REMEDY)
    path = Path(d["path"])
    if not path.is_absolute() and not where.startswith("built-in"):
        path = Path(where).parent / path
    spec, _ = read_dataset(path, int(d.get("seed", 0)))
    if d.get("sha256") and d["sha256"] != spec.sha256:
        raise CaliberError(f"dataset sha256 is {spec.sha256[:16]}…, the caliber expects "
                           f"{d['sha256'][:16]}…", where=str(path),
                           remedy="Restore the dataset file, or update dataset.sha256")
    return spec


def check_name(name: str, where: str) -> None:
    """A caliber name: letters, digits, `.`, `_`, `-` (no path separators, quotes or `@`)."""
    if not NAME_PATTERN.fullmatch(name) or name.lower().endswith(".toml"):
        raise CaliberError(f"caliber name {name!r} is not allowed", where=where,
                           remedy="Use letters, digits, '.', '_' and '-' (at most 80), starting "
                                  "with a letter or digit; no path separators, quotes, '@' "
                                  "or .toml ending")


def _check_keys(section: dict[str, Any], types: dict[str, Any], prefix: str,
                where: str) -> dict[str, Any]:
    for key, value in section.items():
        if key not in types:
            raise CaliberError(f"unknown caliber key '{prefix}{key}'", where=where,
                               remedy=f"Known keys in [{prefix[:-1]}]: {', '.join(sorted(types))}")
        _check_type(prefix + key, value, types[key], where)
    return dict(section)


def _check_type(key: str, value: Any, typ: Any, where: str) -> None:
    ok = isinstance(value, typ) and not (isinstance(value, bool) and typ in (int, (int, float)))
    if not ok:
        names = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
        raise CaliberError(f"'{key}' must be {names}, got {value!r}", where=where, remedy=REMEDY)


def check_values(c: Caliber, where: str) -> None:
    """Every value within its limits, checked before any material is generated."""
    check_name(c.name, where)
    problems = []
    if c.version < 1:
        problems.append("version must be >= 1")
    if c.endpoint not in ("chat", "completions"):
        problems.append("endpoint must be 'chat' or 'completions'")
    if not 1 <= c.concurrency <= MAX_CONCURRENCY:
        problems.append(f"concurrency must be within 1..{MAX_CONCURRENCY}")
    if not 0 <= c.prompt.blocks <= MAX_BLOCKS:
        problems.append(f"prompt.blocks must be within 0..{MAX_BLOCKS}")
    if c.prompt.target_tokens is not None and not 1 <= c.prompt.target_tokens <= MAX_TARGET_TOKENS:
        problems.append(f"prompt.target_tokens must be within 1..{MAX_TARGET_TOKENS}")
    if c.prompt.content_class not in CONTENT_CLASSES:
        problems.append(f"prompt.content_class must be one of {', '.join(CONTENT_CLASSES)}")
    if c.prompt.material not in (None, "code", "prose"):
        problems.append("prompt.material must be 'code' or 'prose'")
    if c.prompt.target_tokens is not None and c.prompt.material is None:
        problems.append("prompt.target_tokens needs prompt.material")
    if not (c.prompt.task or c.prompt.text or c.prompt.material or c.dataset):
        problems.append("the prompt is empty: give prompt.task, prompt.text or prompt.material")
    if not 1 <= c.output.max_tokens <= MAX_OUTPUT_TOKENS:
        problems.append(f"output.max_tokens must be within 1..{MAX_OUTPUT_TOKENS}")
    if c.output.min_tokens is not None and c.output.min_tokens < 0:
        problems.append("output.min_tokens must be >= 0")
    if c.output.steady_state_start < 0:
        problems.append("output.steady_state_start must be >= 0")
    if c.output.steady_state_start >= c.output.max_tokens:
        problems.append("output.steady_state_start must be below output.max_tokens")
    if c.output.min_tokens is not None and c.output.min_tokens > c.output.max_tokens:
        problems.append("output.min_tokens must not exceed output.max_tokens")
    if not 0 <= c.sampling.temperature <= 5:
        problems.append("sampling.temperature must be within 0..5")
    if not 0 < c.sampling.top_p <= 1:
        problems.append("sampling.top_p must be within (0, 1]")
    for key in ("presence_penalty", "frequency_penalty", "repetition_penalty"):
        value = getattr(c.sampling, key)
        if value is not None and not math.isfinite(value):
            problems.append(f"sampling.{key} must be a finite number")
    if c.sampling.top_k is not None and c.sampling.top_k < -1:
        problems.append("sampling.top_k must be >= -1 (-1 or 0: off)")
    if c.thinking and c.endpoint != "chat":
        problems.append("thinking needs endpoint = 'chat'")
    problems += load_problems(c)
    if problems:
        raise CaliberError("invalid caliber: " + "; ".join(problems), where=where, remedy=REMEDY)


def load_problems(c: Caliber) -> list[str]:
    """What is wrong with a caliber's load shape and dataset (empty when nothing is)."""
    ld, out = c.load, []
    if ld.request_rate is not None and not (0 < ld.request_rate <= 1e6 and math.isfinite(ld.request_rate)):
        out.append("load.request_rate must be > 0 requests/s")
    if not (0 < ld.burstiness <= 1e3 and math.isfinite(ld.burstiness)):
        out.append("load.burstiness must be > 0 (1 = Poisson)")
    if ld.burstiness != 1 and ld.request_rate is None:
        out.append("load.burstiness needs load.request_rate")
    if ld.num_requests is not None and not 1 <= ld.num_requests <= MAX_REQUESTS_PER_TRIAL:
        out.append(f"load.num_requests must be within 1..{MAX_REQUESTS_PER_TRIAL}")
    if ld.duration_s is not None and not (0 < ld.duration_s <= 86400):
        out.append("load.duration_s must be within (0, 86400] seconds")
    if ld.request_rate is not None and ld.num_requests is None and ld.duration_s is None:
        out.append("load.request_rate needs load.num_requests or load.duration_s")
    if c.dataset is not None and c.dataset.format == "jsonl-messages" and c.endpoint != "chat":
        out.append("a dataset of chat messages needs endpoint = 'chat'")
    return out


def load_file(path: Path) -> Caliber:
    where = str(path)
    raw = read_bounded(path, MAX_CALIBER_FILE_BYTES, "caliber file",
                       too_big_remedy="A caliber is a page of TOML; generate long prompts with "
                       "prompt.material",
                       missing_remedy="Check the path, or list built-ins: decodescope calibers list")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CaliberError(f"malformed caliber file: {exc}", where=where,
                           remedy="Fix the TOML syntax; `decodescope calibers new` writes a template") from None
    return parse_caliber(data, where)


def builtin_calibers() -> dict[str, Caliber]:
    """All built-in calibers by `name@version` (every version shipped is kept)."""
    out: dict[str, Caliber] = {}
    for entry in sorted(resources.files("decodescope.caliber").joinpath("builtin").iterdir(),
                        key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            data = tomllib.loads(entry.read_text(encoding="utf-8"))
            cal = parse_caliber(data, f"built-in {entry.name}")
            out[cal.ref] = cal
    return out


def resolve(name: str) -> Caliber:
    """`NAME` (newest built-in version), `NAME@VERSION`, or a path to a .toml file."""
    if name.endswith(".toml") or "/" in name:
        return load_file(Path(name))
    cals = builtin_calibers()
    if "@" in name:
        if name in cals:
            return cals[name]
    else:
        versions = [c for c in cals.values() if c.name == name]
        if versions:
            return max(versions, key=lambda c: c.version)
    names = ", ".join(sorted({c.name for c in cals.values()}))
    raise CaliberError(f"unknown caliber '{name}'", where="built-in calibers",
                       remedy=f"Use one of: {names}; or pass a .toml file path")


TEMPLATE = '''# A decodescope caliber: everything that decides what a throughput number means.
name = "{name}"
version = 1
description = "What this caliber measures and why."
task_class = "chat"          # code | chat | long-text | rewrite | prose
thinking = false             # chat_template_kwargs.enable_thinking; reasoning tokens are checked
endpoint = "chat"            # chat | completions
concurrency = 1

[prompt]
content_class = "text"       # code | text | chat  (decides the MAL band the verdict expects)
# The user message is: text, then the material blocks, then task (each part optional).
# text = """Your own literal prompt text (exactly this text, hashed into the identity)."""
material = "prose"           # generated, deterministic material: code | prose (or omit)
blocks = 4                   # number of material blocks; or target_tokens = 32768
task = "Summarize the text above in your own words."
# system = "An optional system message (chat endpoint)."

# Prompts from a file instead (JSONL of prompts or chat messages, or ShareGPT JSON), hashed
# by content and sampled in a fixed order; or pass --dataset FILE to probe.
# [dataset]
# path = "prompts.jsonl"     # relative to this file

[output]
max_tokens = 512
min_tokens = 512             # a run with fewer output tokens misses the caliber
ignore_eos = true
steady_state_start = 64      # decode rate is measured after this many output tokens

[sampling]
temperature = 1.0
top_p = 0.95

# Load shape (default: each trial sends `concurrency` requests at once, one per stream).
# With num_requests or duration_s a trial is one load period; probe --request-rate,
# --burstiness, --num-requests, --duration and --concurrency set the same elements.
# [load]
# request_rate = 4.0         # requests/s, Poisson arrivals (omit: closed loop)
# burstiness = 1.0           # gamma shape of the gaps (vLLM's --burstiness); 1 = Poisson
# num_requests = 64          # requests per trial
# duration_s = 60            # or: seconds of sending per trial
'''


def template(name: str) -> str:
    return TEMPLATE.format(name=name)


def field_names() -> list[str]:
    return [f.name for f in fields(Caliber)]
