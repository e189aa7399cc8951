"""The simulator's tokenizer: deterministic, dependency-free, and exact for its own output.

Rule: a token is a run of word characters, or one other non-space character, each with the
whitespace before it attached — regex `\\s*\\w+|\\s*[^\\w\\s]|\\s+` (the last branch only
catches trailing whitespace). "def f(x):" -> ["def", " f", "(", "x", ")", ":"].
Chat prompts add a fixed template overhead: 4 tokens per message (<|im_start|>, role, newline,
<|im_end|>) plus 3 for the generation prompt (<|im_start|>assistant newline).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

TOKEN_RE = re.compile(r"\s*\w+|\s*[^\w\s]|\s+")
VOCAB_SIZE = 151_643  # ids below this are text tokens; special tokens follow
IM_START_ID, IM_END_ID = 151_644, 151_645
CHAT_MESSAGE_OVERHEAD_TOKENS = 4
CHAT_GENERATION_PROMPT_TOKENS = 3
_NEWLINE_ID = 198


def tokenize(text: str) -> list[str]:
    return TOKEN_RE.findall(text)


def count_tokens(text: str) -> int:
    return sum(1 for _ in TOKEN_RE.finditer(text))


def token_id(token: str) -> int:
    return zlib.crc32(token.encode("utf-8")) % VOCAB_SIZE


def token_ids(tokens: Iterable[str]) -> list[int]:
    return [token_id(t) for t in tokens]


def message_text(content: Any) -> str:
    """OpenAI message content: a string, or a list of parts of which text parts count."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return str(content)


def chat_token_ids(messages: Sequence[dict[str, Any]], add_generation_prompt: bool = True) -> list[int]:
    """Token ids of the rendered chat prompt (ChatML-like template)."""
    ids: list[int] = []
    for msg in messages:
        role = str(msg.get("role", "user"))
        ids += [IM_START_ID, token_id(role), _NEWLINE_ID]
        ids += token_ids(tokenize(message_text(msg.get("content"))))
        ids.append(IM_END_ID)
    if add_generation_prompt:
        ids += [IM_START_ID, token_id("assistant"), _NEWLINE_ID]
    return ids


def chat_prompt_tokens(messages: Sequence[dict[str, Any]]) -> int:
    """usage.prompt_tokens of a chat request = /tokenize {"messages"} count."""
    return len(chat_token_ids(messages))


def prompt_token_count(prompt: Any) -> int:
    """/v1/completions prompt: a string, a list with one string, or a list of token ids."""
    if isinstance(prompt, str):
        return count_tokens(prompt)
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return count_tokens(prompt[0])
    raise ValueError("prompt must be a string, a list of one string, or a list of token ids")
