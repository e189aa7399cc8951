"""Advice that fits the engine: the flags a next step names are those of the engine the runs
were taken on (engine detection, else the fingerprint's endpoint); an engine that is not known
gets engine-neutral words, never another engine's flags.

Flag names (docs/faults.md, shared/reference/engine-formats.md): vLLM takes one JSON option;
SGLang a family of `--speculative-*` options; llama.cpp `--spec-type` (n-gram and draft-model
kinds), `--spec-draft-n-max`, `--spec-draft-model` (`-md`), `--spec-ngram-*`, and the lookup
caches, where builds before the `--spec-*` names took `--draft-max` / `--model-draft`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# The launch options that set speculative decoding, per engine.
SPEC_FLAGS = {
    "vllm": "--speculative-config / -sc (method, num_speculative_tokens, draft model)",
    "sglang": ("--speculative-algorithm, --speculative-draft-model-path, "
               "--speculative-num-steps, --speculative-eagle-topk, "
               "--speculative-num-draft-tokens"),
    "llamacpp": ("--spec-type, --spec-draft-n-max, --spec-draft-model (-md), --spec-ngram-*, "
                 "--lookup-cache-static / --lookup-cache-dynamic (older builds: --draft-max, "
                 "--model-draft)"),
}
NEUTRAL_SPEC = "the speculative-decoding options (method, draft model, draft tokens per step)"
# How each engine serves its Prometheus /metrics (engine numbers for the split).
METRICS_HOW = {"vllm": "vLLM serves /metrics by default", "sglang": "SGLang needs --enable-metrics",
               "llamacpp": "llama-server needs --metrics"}
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "llamacpp": "llama.cpp"}


def engine_kind(name: Any) -> str | None:
    """'vllm' | 'sglang' | 'llamacpp' from an engine name as runs, logs and fingerprints write
    it ("vllm", "sim-vllm", "llama.cpp", "llamacpp", "SGLang"), else None (generic, unknown)."""
    if not isinstance(name, str):
        return None
    n = name.lower().replace(".", "").replace("_", "").replace("-", "")
    for kind in ("vllm", "sglang", "llamacpp"):
        if kind in n:
            return kind
    return None


def side_engine(side: Any) -> str | None:
    """The engine of a comparison side: its runs' detected engine, else its fingerprint's."""
    kind = engine_kind(getattr(side, "engine", None))
    if kind is not None:
        return kind
    fp = getattr(side, "fingerprint", None)
    if isinstance(fp, dict):
        item = ((fp.get("sections") or {}).get("endpoint") or {}).get("engine") or {}
        if isinstance(item, dict):
            return engine_kind(item.get("value"))
    return None


def spec_flags(engines: Iterable[str | None]) -> str:
    """The speculative-decoding options to compare: the detected engine's flags; both
    engines' when the sides ran different engines; neutral words when any is unknown."""
    found = list(dict.fromkeys(engines))
    kinds = [k for k in found if k is not None and k in SPEC_FLAGS]
    if not kinds or len(kinds) < len(found):
        return NEUTRAL_SPEC
    if len(kinds) == 1:
        return f"{ENGINE_NAMES[kinds[0]]}'s {SPEC_FLAGS[kinds[0]]}"
    return "; ".join(f"{ENGINE_NAMES[k]}: {SPEC_FLAGS[k]}" for k in kinds)


def all_spec_flags() -> dict[str, tuple[str, ...]]:
    """Every engine's option names (for checking that advice names only its own engine's)."""
    out = {}
    for kind, text in SPEC_FLAGS.items():
        out[kind] = tuple(w.strip("(),;") for w in text.split() if w.startswith(("--", "(-")))
    return out


def metrics_how(engines: Iterable[str | None]) -> str | None:
    """How the detected engine(s) serve /metrics, or None for an unknown engine."""
    kinds = [k for k in dict.fromkeys(engines) if k in METRICS_HOW]
    return "; ".join(METRICS_HOW[k] for k in kinds if k is not None) or None
