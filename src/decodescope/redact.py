"""Redaction: secrets never reach storage, JSON or the terminal.

One set of rules for the whole package (a plain module at the
bottom layer: the store, the fingerprint, the run orchestration, the doctor, the console
and the CLI import it). The
fingerprint applies it at the source (every collector redacts what it reads) and once more over
the whole fingerprint before it is built. What counts as a secret:

- values of options, env vars, headers, JSON keys and URL query params whose *name* says
  key / token / secret / password / credential / auth / cookie / signature;
- URL userinfo (`user:pass@`);
- strings in a known key format (`sk-…`, `hf_…`, `ghp_…`, `github_pat_…`, `xox?-…`, `AKIA…`,
  JWTs, `Bearer …` / `Basic …` values) and long mixed-case base64-like runs;
- any literal registered with `register_secret` (the probe registers the API key it read; the
  CLI registers the password of every URL on its command line).

The same rules guard the rest of decodescope: `redact_record` runs over every JSON value the
store writes (store/db.py), and the CLI passes everything it prints through `redact_output`
(console.py), after `strip_controls` has removed terminal control sequences a server may
have put in a model id or an error text. Over-redaction is accepted; a leak is not.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

REDACTED = "<redacted>"

# Shortest literal register_secret accepts: replacing 1–3 character strings everywhere would
# shred ordinary text and protects nothing (no real key is that short).
MIN_REGISTERED_SECRET_LEN = 4
# Generic high-entropy run: at least this long, with upper, lower and digit characters and no
# word separators (so model names like Qwen3-Coder-480B-A35B-Instruct are not caught).
GENERIC_TOKEN_MIN_LEN = 32

_registered: set[str] = set()
_lock = threading.Lock()

# Name parts (split on - _ . and camel-case boundaries are not split) that mark a secret.
_SECRET_PARTS = {
    "key", "apikey", "token", "secret", "password", "passwd", "pass", "pwd", "passphrase",
    "credential", "credentials", "auth", "authorization", "cookie", "sig", "signature",
    "pat", "bearer", "session", "sessionid", "jwt",
}
_SECRET_SUFFIXES = ("key", "token", "secret", "password", "passwd", "cookie", "credential",
                    "credentials", "signature")
_SECRET_PREFIXES = ("passw", "secret", "credential", "auth", "apikey", "accesstoken")
# Names that match the rules above but never hold secrets.
_NOT_SECRET_NAMES = {"tokenizers_parallelism", "pythonhashseed"}
# Short options that take a key (`-k KEY`).
_SECRET_SHORT_OPTIONS = {"-k"}

_KNOWN_FORMATS = [
    re.compile(r"\bsk-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_\-]{16,}"),
    re.compile(r"\bhf_[A-Za-z0-9]{16,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"\bglpat-[A-Za-z0-9_\-]{16,}"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
]
# Substrings each format needs: a format whose hint is absent costs an `in`, not a regex pass
# (the output pass runs over whole exports, megabytes at a time).
_FORMAT_HINTS = [("sk-",), ("hf_",), ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), ("github_pat_",),
                 ("glpat-",), ("xox",), ("AKIA", "ASIA"), ("eyJ",)]
_HEADER_HINTS = ("authorization", "api-key", "auth-token", "cookie")
_AUTH_SCHEME = re.compile(r"\b(Bearer|Basic|Token|Digest)\s+([^\s\"',;\\]+)", re.IGNORECASE)
_HEADER_IN_TEXT = re.compile(
    r"\b((?:proxy-)?authorization|x-api-key|api-key|x-auth-token|cookie|set-cookie)"
    r"(\s*:\s*)([^\r\n\"'\\]+)", re.IGNORECASE)  # stops at a backslash: JSON stays valid
# Userinfo runs to the last "@" before the path: a password may itself contain "@".
_USERINFO_IN_TEXT = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.\-]*://)([^/\s'\"<>\\]+)@")
_KV_IN_TEXT = re.compile(
    r"(?P<name>[A-Za-z0-9_.\-]*(?:key|token|secret|passw(?:or)?d|credential|auth|sig|signature)"
    r"[A-Za-z0-9_.\-]*)(?P<q1>[\"']?)(?P<sep>\s*[=:]\s*)(?P<q2>[\"'\[]*)"
    r"(?P<value>[^\s&\"',;{}\[\]\\]+)", re.IGNORECASE)
_GENERIC_RUN = re.compile(rf"[A-Za-z0-9+=]{{{GENERIC_TOKEN_MIN_LEN},}}")
# A superset of what every rule above needs (a ":" or "=", an auth scheme word, a key prefix,
# a long run): text without any of it skips the rules (most stored strings are short).
_MAYBE = re.compile(r"[:=@]|bearer|basic|token|digest|sk-|hf_|gh[pousr]_|github_pat_|glpat-|xox"
                    r"|AKIA|ASIA|eyJ|[A-Za-z0-9+=]{16}", re.IGNORECASE)
# A documentation placeholder where a secret would go: KEY, API_KEY, <token>, ...
_PLACEHOLDER = re.compile(r"(?:[A-Z][A-Z_]{1,15}|\.\.\.|<[^<>\s]{1,20}>)(?![A-Za-z0-9])")
_URL_WITH_USERINFO = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^/\s'\"<>]+@[^\s'\"<>]*")


def register_secret(value: str | None) -> None:
    """Redact this literal everywhere from now on (e.g. the API key the probe sends)."""
    if value and len(value) >= MIN_REGISTERED_SECRET_LEN:
        with _lock:
            _registered.add(value)


def register_url_secrets(text: str) -> None:
    """Register the password (and the whole userinfo) of every URL in `text`, raw and
    percent-decoded, so it is redacted wherever it turns up later (an error body echoing it)."""
    for m in _URL_WITH_USERINFO.finditer(text or ""):
        try:
            parts = urlsplit(m.group(0))
        except ValueError:
            continue
        userinfo = parts.netloc.rsplit("@", 1)[0]
        user, _, password = userinfo.partition(":")
        for value in (password, unquote(password), userinfo if password else ""):
            register_secret(value)


def registered_secrets() -> list[str]:
    """The registered literals, longest first (so a literal inside another goes second)."""
    with _lock:
        return sorted(_registered, key=len, reverse=True)


def clear_registered_secrets() -> None:
    """Forget registered literals (tests)."""
    with _lock:
        _registered.clear()


def is_secret_name(name: str) -> bool:
    """True when an option / env var / header / key name says its value is a secret."""
    low = name.strip().lstrip("-").lower()
    if not low or low in _NOT_SECRET_NAMES:
        return False
    parts = [p for p in re.split(r"[-_.\s]+", low) if p]
    for part in parts:
        if part in _SECRET_PARTS:
            return True
        if part.endswith(_SECRET_SUFFIXES) or part.startswith(_SECRET_PREFIXES):
            return True
    return False


def _generic_hit(m: re.Match[str]) -> str:
    s = m.group(0)
    if (any(c.isupper() for c in s) and any(c.islower() for c in s)
            and any(c.isdigit() for c in s)):
        return REDACTED
    return s


def redact_text(text: str) -> str:
    """Redact secrets inside free text (log lines, argv elements, error messages)."""
    if not text:
        return text
    text = redact_literals(_redact_userinfo(text))
    if not _MAYBE.search(text):
        return text
    text = _HEADER_IN_TEXT.sub(_header_in_text, text)
    text = _AUTH_SCHEME.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _KV_IN_TEXT.sub(_kv_in_text, text)
    text = _redact_formats(text)
    return _GENERIC_RUN.sub(_generic_hit, text)


def redact_output(text: str) -> str:
    """The pass over everything the CLI prints: registered secrets, URL userinfo, header values
    (`Authorization: ...`) and known key formats. Not the `name=value`, `token WORD` and
    long-run rules: what is printed is built from values redacted where they were read or
    stored, and those rules would mangle help text, labels (`--label key=value`) and prose
    ("first token arrives")."""
    if not text:
        return text
    text = redact_literals(_redact_userinfo(text))
    low = text.lower()
    if any(h in low for h in _HEADER_HINTS):
        text = _HEADER_IN_TEXT.sub(_header_in_text, text)
    return _redact_formats(text)


# Terminal control in text a server (or a file) supplied: a model id, an error body, a finding
# quoting either. ESC sequences go whole: CSI (`ESC [ ... final`), OSC / DCS / SOS / PM / APC
# strings up to their terminator (BEL or ST; an unterminated one up to the end of the line), and
# the two- and three-byte ESC forms; then every other C0 / C1 control except newline and tab
# (a lone CR would let a string overwrite the line it is printed on). 8-bit CSI (U+009B) too.
# And the bidirectional embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069): they
# reorder what follows on the terminal line ("Trojan Source"), so a model id could make the
# printed text read differently from what it is.
_ESC_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"  # CSI, 7- and 8-bit (cut short: up to where it stops)
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"  # strings
    r"|\x1b[ -/]*[0-~]?")  # nF / Fp / Fe / Fs escapes, or a lone ESC
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def strip_controls(text: str) -> str:
    """Text safe to print on a terminal: ESC sequences, C0 / C1 control characters and bidi
    overrides removed (newline and tab kept; CRLF becomes LF). Linear in the text; text without any control
    character is returned as is after one scan."""
    if not text or _CONTROL.search(text) is None:
        return text
    text = text.replace("\r\n", "\n")
    text = _ESC_SEQUENCE.sub("", text)
    return _CONTROL.sub("", text)


def _redact_formats(text: str) -> str:
    for pat, hints in zip(_KNOWN_FORMATS, _FORMAT_HINTS, strict=True):
        if any(h in text for h in hints):
            text = pat.sub(REDACTED, text)
    return text


def _redact_userinfo(text: str) -> str:
    """URL userinfo first, so `user:PASSWORD@` goes whole even when PASSWORD is registered."""
    if "@" not in text or "://" not in text:
        return text
    return _USERINFO_IN_TEXT.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)


def redact_literals(text: str) -> str:
    """Only the registered literals: for bulk text that is not free-form error text (the
    model's output stored in traces), where the pattern rules would only add noise."""
    if not text:
        return text
    for lit in registered_secrets():
        if lit in text:
            text = text.replace(lit, REDACTED)
    return text


def _header_in_text(m: re.Match[str]) -> str:
    value = m.group(3)
    scheme = re.match(r"\s*(Bearer|Basic|Token|Digest)\s+", value, re.IGNORECASE)
    kept = f"{scheme.group(1)} " if scheme else ""
    if _PLACEHOLDER.match(value[scheme.end() if scheme else 0:]):  # `Bearer KEY` in help text
        return m.group(0)
    return f"{m.group(1)}{m.group(2)}{kept}{REDACTED}"


def _kv_in_text(m: re.Match[str]) -> str:
    value = m.group("value")
    if (not is_secret_name(m.group("name")) or value == REDACTED
            or value.lower() in ("bearer", "basic", "token", "digest", "none", "null", "true",
                                 "false", "value")):
        return m.group(0)
    q1, q2 = m.group("q1"), m.group("q2")
    # `"api_key": 1234` in JSON: the replacement must stay a JSON value, so it gets quotes.
    new = f'"{REDACTED}"' if q1 == '"' and not q2.endswith(('"', "'")) else REDACTED
    return f"{m.group('name')}{q1}{m.group('sep')}{q2}{new}"


def redact_url(url: str) -> str:
    """Drop userinfo, redact secret query params, then known key formats."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rsplit('@', 1)[1]}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = "&".join(
            f"{quote(k, safe='')}={REDACTED if is_secret_name(k) else quote(v, safe='/:')}"
            for k, v in pairs)
    rebuilt = urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    return redact_text(rebuilt)


def redact_cmdline(argv: Sequence[str]) -> list[str]:
    """Redact values of secret options (`--api-key X`, `--api-key=X`, `-k X`), `NAME=VALUE`
    assignments with secret names, header values, URLs, and known key formats."""
    out: list[str] = []
    redact_next = False
    for arg in argv:
        if redact_next:
            redact_next = False
            if not _looks_like_option(arg):
                out.append(REDACTED)
                continue
        if arg.startswith("-") and not _is_number(arg):
            name, eq, value = arg.partition("=")
            secret = is_secret_name(name) or name in _SECRET_SHORT_OPTIONS
            if secret and eq:
                out.append(f"{name}={REDACTED}")
                continue
            if secret:
                out.append(arg)
                redact_next = True
                continue
        name, eq, value = arg.partition("=")
        if eq and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) and is_secret_name(name):
            out.append(f"{name}={REDACTED}")
            continue
        out.append(_redact_value(arg))
    return out


def _looks_like_option(arg: str) -> bool:
    return arg.startswith("-") and len(arg) > 1 and not _is_number(arg)


def _is_number(arg: str) -> bool:
    try:
        float(arg)
    except ValueError:
        return False
    return True


def _redact_value(value: str) -> str:
    """A lone URL gets URL rules; free text (with spaces) gets text rules, which also catch
    userinfo and secret query params inside it without re-encoding the rest."""
    if "://" in value and not any(c.isspace() for c in value):
        return redact_url(value)
    return redact_text(value)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Secret-named variables become `<redacted>`; URLs lose userinfo; the rest is scanned."""
    return {k: REDACTED if is_secret_name(k) else _redact_value(v) for k, v in env.items()}


def redact_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    """Secret headers keep only their auth scheme (`Bearer <redacted>`)."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: dict[str, str] = {}
    for k, v in items:
        if is_secret_name(k):
            scheme = re.match(r"\s*(Bearer|Basic|Token|Digest)\s+", v, re.IGNORECASE)
            out[k] = f"{scheme.group(1)} {REDACTED}" if scheme else REDACTED
        else:
            out[k] = _redact_value(v)
    return out


def redact_record(obj: Any) -> Any:
    """Deep redaction of a JSON-able value before it is stored or exported: every string gets
    the text rules; a string under a secret-named key becomes `<redacted>`. Unlike
    `redact_obj`, numbers and booleans are kept (measurements are never secrets), so stored
    results keep their types."""
    if hasattr(obj, "to_dict") and not isinstance(obj, type):
        obj = obj.to_dict()
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, Mapping):
        out: dict[Any, Any] = {}
        for k, v in obj.items():
            if isinstance(v, str) and isinstance(k, str) and v and is_secret_name(k):
                out[k] = REDACTED
            else:
                out[k] = redact_record(v)
        return out
    if isinstance(obj, (list, tuple)):
        return [redact_record(v) for v in obj]
    return obj


def redact_obj(obj: Any) -> Any:
    """Deep redaction of a JSON-able value (dict keys with secret names lose their values)."""
    if isinstance(obj, Mapping):
        out: dict[Any, Any] = {}
        for k, v in obj.items():
            if isinstance(k, str) and is_secret_name(k) and v not in (None, True, False, ""):
                out[k] = REDACTED
            else:
                out[k] = redact_obj(v)
        return out
    if isinstance(obj, list):
        return [redact_obj(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(redact_obj(v) for v in obj)
    if isinstance(obj, str):
        return _redact_value(obj)
    return obj
