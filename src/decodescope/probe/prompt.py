"""Realize a caliber's prompt: reach its token target through the server's tokenize endpoint
(vLLM and llama.cpp have one), otherwise by estimate."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from decodescope.caliber.spec import Caliber, max_blocks_for, sha256
from decodescope.edge import bad_field, count_field, side_request, tokenize_endpoint
from decodescope.errors import CaliberError

# Used only when the server has no tokenize endpoint (SGLang): ASCII code/prose is ~3.5-4.5
# characters per token for current BPE vocabularies; 3.6 errs towards longer prompts.
CHARS_PER_TOKEN_ESTIMATE = 3.6

# Special tokens a tokenizer may add to a text (BOS, EOS, chat markers) beyond one per byte.
TOKENIZE_SPECIAL_SLACK = 64

Tokenizer = Callable[[str], "int | None"]


@dataclass(frozen=True)
class RealizedPrompt:
    text: str
    blocks: int
    tokens: int | None  # by the tokenizer (or estimate) before the chat template
    tokens_source: str  # "tokenize" | "estimate"
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("text")
        return d


def server_tokenizer(client: httpx.Client, base_url: str, model: str | None) -> Tokenizer:
    """A tokenizer backed by POST /tokenize (vLLM: {"prompt"} -> count; llama.cpp:
    {"content"} -> tokens). Returns None when the server has none (a refused connection, an
    error status, an answer that is not JSON or has neither field).

    Bounded (edge.side_request): the answer may hold one token id per byte of the text, and
    the request has the side-request deadline. A JSON answer of another shape, or a count
    that is not a whole number between 0 and the text's bytes (plus special tokens), raises
    a ProtocolError (exit 5) naming /tokenize: a wrong count would misplace every token."""
    base = base_url.rstrip("/")

    def count(text: str) -> int | None:
        body: dict[str, Any] = {"prompt": text, "content": text, "add_special_tokens": False}
        if model:
            body["model"] = model
        ep = tokenize_endpoint(text)
        try:
            r = side_request(client, "POST", base, ep, json=body)
        except httpx.HTTPError:
            return None
        if r.status != 200:
            return None
        try:
            doc = r.json()
        except ValueError:
            return None
        where = f"POST {base}/tokenize"
        if not isinstance(doc, dict):
            raise bad_field("the /tokenize answer", doc, "a JSON object with count or tokens",
                            where)
        limit = len(text.encode("utf-8", "replace")) + TOKENIZE_SPECIAL_SLACK
        if "count" in doc and doc["count"] is not None:
            return count_field(doc["count"], "/tokenize count", where, limit=limit)
        tokens = doc.get("tokens")
        if isinstance(tokens, list):
            return count_field(len(tokens), "the /tokenize token list's length", where,
                               limit=limit)
        if tokens is not None:
            raise bad_field("/tokenize tokens", tokens, "a list of token ids", where)
        return None

    return count


def realize(c: Caliber, tokenizer: Tokenizer | None) -> RealizedPrompt:
    target = c.prompt.target_tokens
    if not target:  # fixed text: counted for the header (the server's tokenizer, else estimated)
        text = c.prompt_text()
        n = tokenizer(text) if tokenizer else None
        if n is not None:
            return RealizedPrompt(text, c.prompt.blocks, n, "tokenize", sha256(text))
        return RealizedPrompt(text, c.prompt.blocks, int(len(text) / CHARS_PER_TOKEN_ESTIMATE),
                              "estimate", sha256(text))
    hi = max_blocks_for(target)
    probe_count = tokenizer(c.prompt_text(1)) if tokenizer else None
    if probe_count is None:
        # No tokenize endpoint: smallest block count whose estimate reaches the target.
        for n in range(1, hi + 1):
            text = c.prompt_text(n)
            est = int(len(text) / CHARS_PER_TOKEN_ESTIMATE)
            if est >= target:
                return RealizedPrompt(text, n, est, "estimate", sha256(text))
        raise _exhausted(c, hi)
    assert tokenizer is not None
    counts: dict[int, int] = {}

    def tokens(n: int) -> int:
        if n not in counts:
            v = tokenizer(c.prompt_text(n))
            if v is None:
                raise CaliberError("the server's tokenize endpoint stopped answering",
                                   where="POST /tokenize", remedy="Check the server log; rerun")
            counts[n] = v
        return counts[n]

    if tokens(hi) < target:
        raise _exhausted(c, hi)
    lo = 1  # binary search for the smallest n with tokens(n) >= target
    while lo < hi:
        mid = (lo + hi) // 2
        if tokens(mid) >= target:
            hi = mid
        else:
            lo = mid + 1
    text = c.prompt_text(lo)
    return RealizedPrompt(text, lo, tokens(lo), "tokenize", sha256(text))


def _exhausted(c: Caliber, blocks: int) -> CaliberError:
    return CaliberError(
        f"{blocks} material blocks do not reach {c.prompt.target_tokens} tokens",
        where=c.ref, remedy="This tokenizer packs text unusually tight; use a caliber file with "
        "a lower target_tokens or report it")
