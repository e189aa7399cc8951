"""Did a realized request meet its caliber? A run that misses is marked, never silently accepted."""

from __future__ import annotations

from decodescope.caliber.spec import Caliber
from decodescope.records.findings import Finding
from decodescope.records.request_metrics import RequestMetrics

# Tokenizers and chat templates differ; a prompt within 2% under its target still counts.
PROMPT_TARGET_TOLERANCE = 0.02


def check_request(c: Caliber, m: RequestMetrics, where: str) -> list[Finding]:
    out: list[Finding] = []
    target = c.prompt.target_tokens
    if target and m.prompt_tokens is not None and m.prompt_tokens < target * (1 - PROMPT_TARGET_TOLERANCE):
        out.append(Finding("caliber.prompt_short",
                           f"prompt has {m.prompt_tokens} tokens, caliber wants >= {target}",
                           "The server's tokenizer packs the material tighter than expected; "
                           "report it, or use a caliber file with a higher target", where))
    if m.output_tokens is None:
        out.append(Finding("caliber.no_usage", "the server sent no usage: token counts unknown",
                           "Use a server that honours stream_options.include_usage", where))
        return out
    need = c.output.min_tokens
    if need is not None and m.output_tokens < need:
        out.append(Finding("caliber.output_short",
                           f"{m.output_tokens} output tokens, caliber wants >= {need} "
                           f"(finish_reason={m.finish_reason})",
                           "The model stopped early; use ignore_eos or a prompt that writes longer", where))
    if m.output_tokens <= c.output.steady_state_start + 1:
        out.append(Finding("caliber.no_steady_state",
                           f"output stopped at {m.output_tokens} tokens, before the steady-state "
                           f"window (starts after {c.output.steady_state_start})",
                           "No steady-state decode rate for this request", where))
    if c.thinking and not m.reasoning_tokens:
        out.append(Finding("caliber.no_reasoning",
                           "thinking was requested but no reasoning tokens came back",
                           "Start the server with a reasoning parser (vLLM --reasoning-parser) "
                           "and a model/template that honours enable_thinking", where))
    return out


def missed(findings: list[Finding]) -> bool:
    return any(f.code.startswith("caliber.") for f in findings)
