"""Redaction: secrets never reach storage, JSON or the terminal; the tool's own words always do.

One set of rules for the whole package (a plain module at the bottom layer: the store, the
fingerprint, the run orchestration, the doctor, the console and the CLI import it). The
fingerprint applies it at the source (every collector redacts what it reads) and once more over
the whole fingerprint before it is built. What counts as a secret is a *value* that is
secret-shaped; ordinary prose never is:

- any literal registered with `register_secret` (the probe registers the API key it read; the
  CLI registers the password of every URL on its command line, in every form the library that
  uses the URL would send it: raw, percent-decoded, as httpx re-encodes it, as libpq parses it,
  base64 `user:password` as in a Basic header, and the pieces a library may quote in an error);
- URL userinfo with a password (`user:pass@`; the password may hold unescaped `/ ? # @ %` or a
  space, see `_userinfo_span`), and secret query parameters (`?password=`);
- values of options, env vars, headers, JSON keys and `name=value` / `name: value` pairs whose
  *name* says key / token / secret / password / credential / auth / cookie / signature
  (`is_secret_name`: `bos_token`, `max_token`, `#new-token: 28` and other token counts and
  vocabulary tokens are not secrets);
- strings in a known key format (`sk-…`, `hf_…`, `ghp_…`, `github_pat_…`, `xox?-…`, `AKIA…`,
  JWTs), credential-shaped `Bearer …` / `Basic …` / `Token …` values, and long mixed-case
  base64-like runs;
- on an engine's command line (`redact_cmdline`): every value of a secret flag (`--api-key K1
  K2`, `--api-key=K1 K2`, a value beginning with `-`), failing closed: what follows a secret
  flag is a secret until an argument is shown to be an option; argument strings embedded in one
  argument or in an environment variable (`VLLM_EXTRA_ARGS="--api-key K"`) get the same rules.

The same rules guard the rest of decodescope: `redact_record` runs over every JSON value the
store writes (store/db.py), and the CLI passes everything it prints through `redact_output`
(console.py), after `strip_controls` has removed terminal control sequences a server may
have put in a model id or an error text. tests/test_redact_corpus.py holds the line: every
message the tool writes and every line of the real engine logs passes unchanged, every canary
is caught.
"""

from __future__ import annotations

import base64
import functools
import html
import json
import re
import shlex
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import unquote

REDACTED = "<redacted>"

# Shortest literal register_secret accepts: replacing 1–3 character strings everywhere would
# shred ordinary text and protects nothing (no real key is that short).
MIN_REGISTERED_SECRET_LEN = 4
# A registered literal shorter than this is replaced only where it stands as a word of its own
# (not inside a longer run of letters and digits): a short password must not eat the tool's prose.
WORD_LITERAL_LEN = 8
# Generic high-entropy run: at least this long, with upper, lower and digit characters and no
# word separators (so model names like Qwen3-Coder-480B-A35B-Instruct are not caught).
GENERIC_TOKEN_MIN_LEN = 32
# `Token X` / `Digest X` in free text is a credential only when X is at least this long and
# credential-shaped ("token the client" is prose).
CREDENTIAL_MIN_LEN = 8
# Shortest piece of a URL password that is redacted where a library quotes it ('pa' of
# "Invalid port: 'pa'"); a one-character piece would hit every quoted letter of the tool's text.
MIN_FRAGMENT_LEN = 2
# How deep argument strings inside arguments (`bash -c "vllm serve --api-key K"`) are unpacked.
MAX_ARG_DEPTH = 3

_lock = threading.Lock()
_registered: set[str] = set()
# Pieces of registered URL passwords (split at the characters that make a library cut the URL
# there): redacted where an error quotes them ("Invalid port: 'pa'", `host "ss@db"`).
_fragments: set[str] = set()

# ---- names -------------------------------------------------------------------------------------

# Name parts (split on - _ . space and camel-case boundaries) that mark a secret.
_SECRET_PARTS = {
    "key", "apikey", "apikeys", "secret", "secrets", "password", "passwords", "passwd",
    "pass", "pwd", "passphrase", "credential", "credentials", "auth", "authorization", "cookie",
    "sig", "signature", "pat", "bearer", "session", "sessionid", "jwt",
}
_SECRET_SUFFIXES = ("key", "secret", "password", "passwd", "cookie", "credential",
                    "credentials", "signature")
_SECRET_PREFIXES = ("passw", "secret", "credential", "auth", "apikey", "accesstoken")
# Parts that match the prefixes or suffixes above but never hold secrets.
_NOT_SECRET_PARTS = {"author", "authors", "authored", "authority", "authorities", "keyfile",
                     "keyfiles", "keyword", "keywords", "keyboard"}
# A last part that says the value names where the secret is, not the secret itself:
# `--api-key-env VAR`, `api_key_env = "VLLM_KEY"`.
_INDIRECT_PARTS = {"env", "var", "envvar"}
# Names that match the rules above but never hold secrets.
_NOT_SECRET_NAMES = {"tokenizers_parallelism", "pythonhashseed"}
# A "token" qualified by one of these is a vocabulary token or a count, not a credential:
# bos_token, eos_token, pad_token, max_token, #new-token, draft_token, stop_token_ids...
_TOKEN_KINDS = {
    "bos", "eos", "pad", "unk", "sep", "cls", "mask", "eot", "eom", "eog", "start", "end", "stop",
    "special", "added", "image", "audio", "video", "vision", "think", "thinking", "tool", "first",
    "last", "next", "prev", "max", "min", "num", "n", "total", "count", "per", "prompt",
    "completion", "output", "input", "generated", "generation", "gen", "decode", "decoded",
    "draft", "drafted", "accepted", "rejected", "bonus", "cached", "new", "reasoning", "inter",
    "time", "to", "mean", "avg", "fim", "prefix", "suffix", "middle", "chat", "role", "system",
    "user", "assistant", "begin", "boundary", "vocab", "spec", "speculative", "content", "text",
    "each", "every", "one", "single", "a", "the", "this", "that", "which", "any", "sampled",
    "prefill", "long", "short", "encoder", "decoder", "cudagraph", "batch", "batched", "as",
}
_TOKEN_TAILS = {
    "id", "ids", "count", "counts", "len", "length", "type", "types", "index", "idx", "str",
    "string", "text", "budget", "limit", "rate", "usage", "map", "embd", "embedding",
    "embeddings", "healing", "level", "probs", "logprobs", "latency", "throughput", "position",
    "positions", "threshold", "thresholds", "budgets", "size", "sizes", "limits",
}
# "tokens" is a count ("max_tokens") unless a credential word qualifies it ("api_tokens").
_CREDENTIAL_QUALIFIERS = {"api", "access", "auth", "hf", "bearer", "refresh", "session", "bot",
                          "secret", "private", "personal"}


def _name_parts(name: str) -> list[str]:
    s = name.strip().lstrip("-#$")
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", s)  # accessToken -> access_Token
    return [p for p in re.split(r"[-_.\s]+", s.lower()) if p]


def _part_marks_secret(parts: list[str], i: int) -> bool:
    p = parts[i]
    if p in _NOT_SECRET_PARTS:
        return False
    if p.endswith("token"):
        stem = p[:-len("token")]
        if stem:  # bostoken, authtoken, hubtoken
            return stem not in _TOKEN_KINDS
        prev = parts[i - 1] if i > 0 else ""
        nxt = parts[i + 1] if i + 1 < len(parts) else ""
        return prev not in _TOKEN_KINDS and nxt not in _TOKEN_TAILS
    if p == "tokens":
        return i > 0 and parts[i - 1] in _CREDENTIAL_QUALIFIERS
    if p == "keys":  # "--api-keys", "ssh_keys"; "Keys: name, min" alone is prose
        return i > 0
    if p == "pass":  # db_pass, --pass; vLLM's pass_config is a compiler pass
        return i == len(parts) - 1
    if p in _SECRET_PARTS:
        return True
    return p.endswith(_SECRET_SUFFIXES) or p.startswith(_SECRET_PREFIXES)


def is_secret_name(name: str) -> bool:
    """True when an option / env var / header / key name says its value is a secret
    (`--api-key`, `HF_TOKEN`, `x-api-key`, `accessToken`, `db_pass`); False for names that only
    look like one (`bos_token`, `max_token`, `--max-num-batched-tokens`, `--ssl-keyfile`)."""
    parts = _name_parts(name)
    if not parts or "_".join(parts) in _NOT_SECRET_NAMES or parts[-1] in _INDIRECT_PARTS:
        return False
    return any(_part_marks_secret(parts, i) for i in range(len(parts)))


def _token_only_name(name: str) -> bool:
    """The name marks a secret only through "token" (`#token`, `token`): a number under it is a
    token count (SGLang's `#token: 108`), not a credential."""
    parts = _name_parts(name)
    hits = [p for i, p in enumerate(parts) if _part_marks_secret(parts, i)]
    return bool(hits) and all(p.endswith("token") for p in hits)


# ---- registered literals --------------------------------------------------------------------

def register_secret(value: str | None) -> None:
    """Redact this literal everywhere from now on (e.g. the API key the probe sends)."""
    if value and len(value) >= MIN_REGISTERED_SECRET_LEN and value != REDACTED:
        with _lock:
            _registered.add(value)


def _register_fragment(value: str) -> None:
    if len(value) >= MIN_FRAGMENT_LEN and value != REDACTED:
        with _lock:
            _fragments.add(value)


def registered_secrets() -> list[str]:
    """The registered literals, longest first (so a literal inside another goes second)."""
    with _lock:
        return sorted(_registered, key=len, reverse=True)


def clear_registered_secrets() -> None:
    """Forget registered literals and URL-password fragments (tests)."""
    with _lock:
        _registered.clear()
        _fragments.clear()


@functools.lru_cache(maxsize=64)
def _literals_pattern(literals: tuple[str, ...]) -> re.Pattern[str]:
    """One pass for these literals, longest first; a short one only as a word of its own."""
    alts = [re.escape(lit) if len(lit) >= WORD_LITERAL_LEN
            else rf"(?<![A-Za-z0-9]){re.escape(lit)}(?![A-Za-z0-9])" for lit in literals]
    return re.compile("|".join(alts))


_QUOTED = re.compile(r"(['\"])([^'\"\n]{1,300})\1")


def redact_literals(text: str) -> str:
    """Only the registered literals (and quoted pieces of registered URL passwords): for bulk
    text that is not free-form error text (the model's output stored in traces), where the
    pattern rules would only add noise. Linear in the text: only the literals present in it
    are matched."""
    if not text:
        return text
    with _lock:
        present = tuple(sorted((lit for lit in _registered if lit in text), key=len, reverse=True))
        frags = [f for f in _fragments if f in text]
    if present:
        text = _literals_pattern(present).sub(REDACTED, text)
    if frags and ("'" in text or '"' in text):
        def quoted(m: re.Match[str]) -> str:
            inner = m.group(2)
            if inner != REDACTED and any(f == inner or (len(f) >= 3 and f in inner)
                                         for f in frags):
                return f"{m.group(1)}{REDACTED}{m.group(1)}"
            return m.group(0)

        text = _QUOTED.sub(quoted, text)
    return text


# ---- URLs ----------------------------------------------------------------------------------------

_SCHEME = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.\-]*)://")
# What follows the `@` that ends a userinfo: a host (name, IPv4, [IPv6]) and an optional port,
# then the end of the URL. "vllm@23:00..23:30" (a time window in a query) is no host.
_HOST_TAIL = re.compile(
    r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-_~%]+)(?::[A-Za-z0-9]*)?"
    r"(?=[/?#\s'\"<>)\]},;|\\`]|[.:,](?:\s|$)|$)")
_PLACEHOLDER_USERINFO = re.compile(
    r"[A-Za-z_][A-Za-z0-9_.\-]*(?::(?:PASSWORD|PASS|PWD|SECRET|TOKEN|KEY|API_KEY|\*+|\.\.\.)"
    r"|\[:(?:PASSWORD|PASS|PWD|SECRET|TOKEN)\])?")
_PLAIN_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,31}")
# A URL in free text runs to a space, a double quote (JSON) or a bracket; a single quote or a
# backslash may be part of its password (a single-quoted URL still ends where a host does).
_URL_TOKEN = re.compile(r"[^\s\"<>`]*")


def _malformed_authority(authority: str) -> bool:
    """An authority a URL library cannot read as host[:port]: a password's unescaped `/ ? #`
    cut the URL there ("u:pa" of "u:pa/ss@host"), leaving a non-numeric "port"."""
    if not authority or "@" in authority:
        return False
    if authority.startswith("["):
        close = authority.find("]")
        return close < 0 or re.fullmatch(r"(?::\d*)?", authority[close + 1:]) is None
    return re.fullmatch(r"[^:\s]*(?::(?:\d*|[A-Z]+))?", authority) is None


def _userinfo_end(rest: str) -> int | None:
    """Index in `rest` (what follows `scheme://`) of the `@` that ends the userinfo, or None.
    Fails closed: when a userinfo is there (RFC 3986: an `@` before the first `/ ? #`) or the
    authority is malformed, the userinfo runs to the last `@` that a host follows, so a
    password with an unescaped `@ / ? #` goes whole."""
    auth_end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority = rest[:auth_end]
    rfc = authority.rfind("@")
    if rfc < 0 and not _malformed_authority(authority):
        return None
    for i in range(len(rest) - 1, max(rfc, 0) - 1, -1):
        if rest[i] == "@" and _HOST_TAIL.match(rest, i + 1):
            return i
    return rfc if rfc >= 0 else None


def _keep_userinfo(userinfo: str) -> bool:
    """A user name alone (`postgresql://alice@db`) or a documentation placeholder
    (`USER[:PASSWORD]`) is no secret; a password or a token-like user name is."""
    if _PLACEHOLDER_USERINFO.fullmatch(userinfo) is None:
        return False
    user = userinfo.split(":", 1)[0].split("[", 1)[0]
    mixed = (any(c.isupper() for c in user) and any(c.islower() for c in user)
             and any(c.isdigit() for c in user))
    return _PLAIN_USER.fullmatch(user) is not None and not mixed and _redact_formats(user) == user


def _redact_userinfo(text: str) -> str:
    """URL userinfo with a password (or a token as the user name) becomes `<redacted>`, first,
    so `user:PASSWORD@` goes whole even when PASSWORD is registered."""
    if "@" not in text or "://" not in text:
        return text
    out: list[str] = []
    pos = 0
    for m in _SCHEME.finditer(text):
        if m.start() < pos:
            continue
        start = m.end()
        token = _URL_TOKEN.match(text, start)
        rest = token.group(0) if token else ""
        end = _userinfo_end(rest)
        if end is None or _keep_userinfo(rest[:end]):
            continue
        out.append(text[pos:start])
        out.append(REDACTED)
        pos = start + end
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def _password_pieces(password: str) -> list[str]:
    return [p for p in re.split(r"%[0-9A-Fa-f]{2}|[/?#@:%\s]+", password) if p]


def _register_credentials(user: str, password: str) -> None:
    """Every form in which a library sends or quotes this user:password."""
    for value in (password, unquote(password)):
        register_secret(value)
        # as JSON and HTML write it (an export, a report), should one ever carry it
        register_secret(json.dumps(value)[1:-1])
        register_secret(html.escape(value, quote=True))
        for piece in _password_pieces(value):
            _register_fragment(piece)
            if len(piece) >= WORD_LITERAL_LEN:
                register_secret(piece)
    try:  # httpx's re-encoding of the userinfo ("pa ss" -> "pa%20ss")
        import httpx

        encoded = httpx.URL(f"http://{user}:{password}@h/").userinfo.decode("ascii", "replace")
        register_secret(encoded.partition(":")[2])
    except Exception:  # noqa: BLE001 - a URL httpx refuses is sent nowhere
        pass
    if password:  # the Basic header httpx builds from the URL
        basic = f"{unquote(user)}:{unquote(password)}".encode()
        register_secret(base64.b64encode(basic).decode("ascii"))


def _register_one_url(url: str) -> None:
    m = _SCHEME.match(url)
    if m is None:
        return
    rest = url[m.end():]
    interpretations: list[str] = []
    end = _userinfo_end(rest)  # fail closed: the user's intent
    if end is not None:
        interpretations.append(rest[:end])
    auth_end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    if "@" in rest[:auth_end]:  # httpx / RFC 3986: the last "@" of the authority
        interpretations.append(rest[:auth_end].rpartition("@")[0])
    libpq_end = min((i for i in (rest.find(c) for c in "@/") if i >= 0), default=len(rest))
    if libpq_end < len(rest) and rest[libpq_end] == "@":  # libpq: the first "@" or "/"
        interpretations.append(rest[:libpq_end])
    for userinfo in interpretations:
        user, colon, password = userinfo.partition(":")
        if colon:
            register_secret(userinfo)
            _register_credentials(user, password)
        elif not _keep_userinfo(userinfo):
            register_secret(userinfo)
            register_secret(unquote(userinfo))
    for name, value in re.findall(r"[?&;]([^=&#\s]+)=([^&#]*)", rest):
        if is_secret_name(unquote(name)):
            _register_credentials("", value)
    if m.group(1).lower() in ("postgresql", "postgres"):
        try:  # what libpq itself reads from the URL
            from psycopg.conninfo import conninfo_to_dict

            params = conninfo_to_dict(url)
        except Exception:  # noqa: BLE001 - not parseable: nothing is sent
            return
        for key in ("password", "sslpassword"):
            value = params.get(key)
            if value:
                _register_credentials(str(params.get("user") or ""), str(value))


def register_url_secrets(text: str, *, whole: bool = False) -> None:
    """Register the credentials of every URL in `text` in every form a library would send or
    quote them (see `_register_credentials`), so they are redacted wherever they turn up later
    (an error echoing them, a server's reply). `whole=True`: `text` is one argument, so a URL in
    it runs to its end, spaces included (a password with a space)."""
    if not text or "://" not in text:
        return
    for m in _SCHEME.finditer(text):
        if whole:
            _register_one_url(text[m.start():])
        else:
            token = re.match(r"\S*", text[m.start():])
            _register_one_url(token.group(0) if token else "")


def redact_url(url: str) -> str:
    """A URL with its userinfo password and its secret query parameters redacted (the rest of
    it unchanged), then the text rules. The whole string is one URL: a password with a space or
    an unescaped `/ ? # @` goes whole."""
    if not url:
        return url
    m = _SCHEME.match(url)
    if m is not None:
        rest = url[m.end():]
        end = _userinfo_end(rest)
        if end is not None and not _keep_userinfo(rest[:end]):
            url = f"{url[:m.end()]}{REDACTED}{rest[end:]}"

        def query(q: re.Match[str]) -> str:
            if is_secret_name(unquote(q.group(2))):
                return f"{q.group(1)}{q.group(2)}={REDACTED}"
            return q.group(0)

        url = re.sub(r"([?&;])([^=&#\s]+)=([^&#]*)", query, url)
    return redact_text(url)


# ---- free text -----------------------------------------------------------------------------------

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
_AUTH_SCHEME = re.compile(r"(?<![-#\w])(Bearer|Basic|Token|Digest)(\s+)([^\s\"',;\\]+)",
                          re.IGNORECASE)
_HEADER_IN_TEXT = re.compile(
    r"\b((?:proxy-)?authorization|x-api-key|api-key|x-auth-token|cookie|set-cookie)"
    r"(\s*:\s*)([^\r\n\"'\\]+)", re.IGNORECASE)  # stops at a backslash: JSON stays valid
# name = value / name: value, where the name may say secret. The value is a bracketed list
# (vLLM logs `'api_key': ['K1', 'K2']`), a quoted string (libpq's `password='pa ss'`, JSON,
# escaped JSON), the redaction marker, or a bare run.
# The name starts where a run of name characters starts, and holds at most 128 of them on
# each side of its keyword: without both, a long run without spaces (a server's 64 KiB
# answer) cost O(n²) — seconds per 4 KiB, hours per MiB (issue 22).
_KV_IN_TEXT = re.compile(
    r"(?<![A-Za-z0-9_.\-])"
    r"(?P<name>[A-Za-z0-9_.\-]{0,128}?(?:key|token|secret|pass|pwd|credential|auth|sig|cookie)"
    r"[A-Za-z0-9_.\-]{0,128})(?P<q1>\\?[\"']?)(?P<sep>\s*[=:][~!]?\s*)"
    r"(?P<value>\[[^\[\]\n]*\]|\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'"
    r"|\\\"(?:[^\"\\\n]|\\[^\"])*\\\"|<redacted>|[^\s&\"',;{}\[\]\\]+)", re.IGNORECASE)
_GENERIC_RUN = re.compile(rf"[A-Za-z0-9+=]{{{GENERIC_TOKEN_MIN_LEN},}}")
# A superset of what every rule above needs (a ":" or "=", an auth scheme word, a key prefix,
# a long run): text without any of it skips the rules (most stored strings are short).
_MAYBE = re.compile(r"[:=@]|bearer|basic|token|digest|sk-|hf_|gh[pousr]_|github_pat_|glpat-|xox"
                    r"|AKIA|ASIA|eyJ|[A-Za-z0-9+=]{16}"
                    r"|-[\w-]*(?:key|secret|pass|pwd|auth|cred|cookie|sig)|-hft\b|-k\b",
                    re.IGNORECASE)
# A documentation placeholder where a secret would go: KEY, API_KEY, K1, <token>, $VAR, ...
_PLACEHOLDER = re.compile(r"(?:[A-Z][A-Z_]{1,15}|[A-Z]\d{0,2}|\.\.\.|\*{3,}|<[^<>\s]{1,20}>|\$\{?[A-Za-z_]\w*\}?)"
                          r"(?![A-Za-z0-9])")
_WORD = re.compile(r"[A-Za-z][a-z]*")
_NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?%?")
# Generic one-word names ("key", "token", "secret"): followed by a plain lowercase word they are
# prose ("Secrets: the URL's password", "key=~regex"), not a credential.
_GENERIC_NAMES = {"key", "keys", "token", "auth", "sig", "secret", "secrets", "cookie", "pass",
                  "session"}
_PROSE_WORD = re.compile(r"[a-z]{1,12}")
_NOT_VALUES = {"bearer", "basic", "token", "digest", "none", "null", "true", "false", "value",
               "yes", "no", "on", "off", "unset", "set", "missing", "empty", "required",
               "optional"}


_TRAILING = re.compile(r"[)`.,:;!?]+$")


def _split_trailing(value: str) -> tuple[str, str]:
    """("value", ").") for "value).": the closing punctuation of prose around a value is not
    part of it ("`key=value`).", "token included).")."""
    m = _TRAILING.search(value)
    return (value[:m.start()], m.group(0)) if m else (value, "")


def _credential_shaped(value: str) -> bool:
    """A `Token X` / `Digest X` value that is a credential: long enough, not a plain word, with
    a digit, an inner capital or a separator a key carries."""
    if len(value) < CREDENTIAL_MIN_LEN or _WORD.fullmatch(value) or "://" in value:
        return False
    if "/" in value and not re.search(r"[+=]", value):  # a path or a model id (org/name)
        return False
    return (any(c.isdigit() for c in value) or any(c.isupper() for c in value[1:])
            or any(c in "-_.=+/~" for c in value))


def _auth_scheme(m: re.Match[str]) -> str:
    value, trailing = _split_trailing(m.group(3))
    if (not value or value == REDACTED or _PLACEHOLDER.fullmatch(value)
            or _WORD.fullmatch(value)):
        return m.group(0)  # "Bearer KEY" in help text, "basic statistics", "token the client"
    if m.group(1).lower() in ("token", "digest") and not _credential_shaped(value):
        return m.group(0)
    return f"{m.group(1)}{m.group(2)}{REDACTED}{trailing}"


def _header_in_text(m: re.Match[str]) -> str:
    value = m.group(3)
    scheme = re.match(r"\s*(Bearer|Basic|Token|Digest)\s+", value, re.IGNORECASE)
    rest = value[scheme.end() if scheme else 0:]
    if not rest.strip() or rest.startswith(REDACTED) or _PLACEHOLDER.match(rest):
        return m.group(0)  # `Bearer KEY` in help text
    first = rest.split(None, 1)[0]
    if not scheme and _WORD.fullmatch(first) and len(first) < CREDENTIAL_MIN_LEN and " " in rest:
        return m.group(0)  # prose: "authorization: check the key"
    kept = f"{scheme.group(1)} " if scheme else ""
    return f"{m.group(1)}{m.group(2)}{kept}{REDACTED}"


def _kv_in_text(m: re.Match[str]) -> str:
    name, value = m.group("name"), m.group("value")
    if not is_secret_name(name) or value == REDACTED:
        return m.group(0)
    if value.startswith("["):
        inner = value[1:-1].strip()
        if not inner or inner.strip("'\" ") == REDACTED:
            return m.group(0)
        quote = "'" if "'" in inner else '"' if '"' in inner else ""
        new = f"[{quote}{REDACTED}{quote}]"
    elif value[:1] in ("'", '"') or value.startswith('\\"'):
        quote = '\\"' if value.startswith('\\"') else value[0]
        inner = value[len(quote):-len(quote)]
        if inner in ("", REDACTED) or _PLACEHOLDER.fullmatch(inner):
            return m.group(0)
        new = f"{quote}{REDACTED}{quote}"
    else:
        value, trailing = _split_trailing(value)
        if (not value or value.lower() in _NOT_VALUES or _PLACEHOLDER.fullmatch(value)
                or (_NUMBER.fullmatch(value) and _token_only_name(name))
                or (name.lower() in _GENERIC_NAMES and _PROSE_WORD.fullmatch(value))):
            return m.group(0)
        # `"api_key": 1234` in JSON: the replacement must stay a JSON value, so it gets quotes.
        new = (f'"{REDACTED}"' if m.group("q1").endswith('"') else REDACTED) + trailing
    return f"{name}{m.group('q1')}{m.group('sep')}{new}"


def _generic_hit(m: re.Match[str]) -> str:
    s = m.group(0)
    if (any(c.isupper() for c in s) and any(c.islower() for c in s)
            and any(c.isdigit() for c in s)):
        return REDACTED
    return s


def _redact_formats(text: str) -> str:
    for pat, hints in zip(_KNOWN_FORMATS, _FORMAT_HINTS, strict=True):
        if any(h in text for h in hints):
            text = pat.sub(REDACTED, text)
    return text


# A secret flag quoted in free text ("ExecStart=vllm serve m --api-key K1 K2", a log line
# echoing a launch): the values after it, as on a command line.
_FLAG_IN_TEXT = re.compile(r"(?<![\w\-])(--?[A-Za-z][A-Za-z0-9_\-]*)(=|[ \t]+)(?=\S)")
_TEXT_WORD = re.compile(r"\S+")
_QUOTES = "'\"`([{"
_PROSE_TOKEN = re.compile(r"[a-z]{1,12}|[A-Z][a-z]{1,12}")
_CLOSERS = re.compile(r"['\")\]}`]+$")


def _redact_flags_in_text(text: str) -> str:
    """Every value after a secret flag in free text, up to an option, a placeholder (`KEY`,
    `$VAR`), a prose word ("--api-key is required") or a sentence's end."""
    out: list[str] = []
    pos = 0
    for m in _FLAG_IN_TEXT.finditer(text):
        name = m.group(1)
        if m.start() < pos or not _secret_flag(name) or _switch(name):
            continue
        i = m.end()
        while i < len(text):
            w = _TEXT_WORD.match(text, i)
            if w is None:
                break
            word = w.group(0)
            lead = len(word) - len(word.lstrip(_QUOTES))
            core, trailing = _split_trailing(_CLOSERS.sub("", word[lead:]))
            if (not re.search(r"[A-Za-z0-9]", core) or core == REDACTED or _shown_option(core)
                    or _PLACEHOLDER.fullmatch(core) or _PROSE_TOKEN.fullmatch(core)):
                break
            out.append(text[pos:w.start() + lead])
            out.append(REDACTED)
            pos = w.start() + lead + len(core)
            if trailing or w.end() >= len(text) or text[w.end()] not in " \t":
                break
            nxt = re.match(r"[ \t]+", text[w.end():w.end() + 64])
            i = w.end() + (len(nxt.group(0)) if nxt else 0)
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def redact_text(text: str) -> str:
    """Redact secrets inside free text (log lines, argv elements, error messages, stored notes):
    URL userinfo, registered literals, secret headers, credential-shaped auth values,
    secret-named `name=value` pairs, key formats, long mixed-case runs. Prose passes unchanged."""
    if not text:
        return text
    text = redact_literals(_redact_userinfo(text))
    if not _MAYBE.search(text):
        return text
    low = text.lower()
    if any(h in low for h in _HEADER_HINTS):
        text = _HEADER_IN_TEXT.sub(_header_in_text, text)
    text = _AUTH_SCHEME.sub(_auth_scheme, text)
    text = _KV_IN_TEXT.sub(_kv_in_text, text)
    if "-" in text:
        text = _redact_flags_in_text(text)
    text = _redact_formats(text)
    return _GENERIC_RUN.sub(_generic_hit, text)


def redact_output(text: str) -> str:
    """The pass over everything the CLI prints: registered secrets, URL userinfo, header values
    (`Authorization: ...`) and known key formats. Not the `name=value`, `token WORD` and
    long-run rules: what is printed is built from values redacted where they were read or
    stored, and those rules would risk help text, labels (`--label key=value`) and prose."""
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


# ---- command lines and environments ---------------------------------------------------------------

# Short options that take a secret: `-k KEY`, llama.cpp's `-hft TOKEN` (= --hf-token).
_SECRET_SHORT_OPTIONS = {"-k", "-hft"}
# Secret-named flags that take no value: vLLM's --allow-credentials, llama.cpp's
# --cors-credentials / --no-cors-credentials (`llama-server --help`).
_SWITCHES = {"--allow-credentials", "--cors-credentials"}
_SWITCH_PREFIXES = ("no-", "no_", "disable-", "disable_", "enable-", "enable_", "allow-", "allow_")
# An argument shown to be an option, which ends a run of secret values: a long option of
# word-like parts (`--max-model-len`, `--fp8-x`, `--port=8000`) or a short one (`-t`, `-ngl`).
_LONG_OPTION = re.compile(r"--[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*")
_OPTION_WORD = re.compile(r"[a-z]{1,24}[0-9]{0,4}|[0-9]{1,4}[a-z]{0,8}")
_SHORT_OPTION = re.compile(r"-[A-Za-z][a-z]{0,5}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_EMBEDDED_OPTION = re.compile(r"(?:^|\s)--?[A-Za-z]")


def _shown_option(arg: str) -> bool:
    if arg == "--":
        return True
    name = arg.split("=", 1)[0]
    if _LONG_OPTION.fullmatch(name):
        return all(_OPTION_WORD.fullmatch(w) for w in re.split(r"[-_]", name[2:]))
    return _SHORT_OPTION.fullmatch(arg) is not None


def _is_number(arg: str) -> bool:
    try:
        float(arg)
    except ValueError:
        return False
    return True


def _secret_flag(name: str) -> bool:
    return name in _SECRET_SHORT_OPTIONS or is_secret_name(name)


def _switch(name: str) -> bool:
    low = name.lower()
    return low in _SWITCHES or low.lstrip("-").startswith(_SWITCH_PREFIXES)


def redact_cmdline(argv: Sequence[str]) -> list[str]:
    """An engine's argv with every secret value redacted, everything else kept in place.

    - A secret flag (`--api-key`, `--api-keys`, `--hf-token`, `-hft`, `--admin-api-key`,
      `--ssl-keyfile-password`, `--ngrok-authtoken`, any secret-named option) redacts every
      value after it (`--api-key K1 K2`: vLLM takes several keys), in either form
      (`--api-key=K1 K2`), a value beginning with `-` included. Fail closed: the run of
      secret values ends only at an argument shown to be an option (`_shown_option`).
    - `NAME=VALUE` with a secret name; header values; URLs (userinfo, secret parameters); key
      formats.
    - An argument that holds arguments itself (`bash -c "vllm serve --api-key K"`) gets the
      same rules over its own words."""
    return _redact_argv(list(argv), 0)


def _redact_argv(argv: list[str], depth: int) -> list[str]:
    out: list[str] = []
    secret_run = False
    for arg in argv:
        if secret_run:
            if not _shown_option(arg):
                out.append(REDACTED)
                continue
            secret_run = False
        if arg.startswith("-") and len(arg) > 1 and not _is_number(arg):
            name, eq, value = arg.partition("=")
            if _secret_flag(name):
                if eq:
                    out.append(f"{name}={REDACTED}" if value else arg)
                else:
                    out.append(arg)
                secret_run = not _switch(name)
                continue
            if eq:
                out.append(f"{name}={_redact_arg_text(value, depth)}")
                continue
            out.append(_redact_value(arg))
            continue
        name, eq, value = arg.partition("=")
        if eq and _ENV_NAME.fullmatch(name):
            out.append(f"{name}={REDACTED}" if is_secret_name(name)
                       else f"{name}={_redact_arg_text(value, depth)}")
            continue
        out.append(_redact_arg_text(arg, depth))
    return out


def _split_args(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:  # an unbalanced quote: fail closed on plain words
        return [w.strip("'\"") for w in text.split()]


def _redact_arg_text(value: str, depth: int = 0) -> str:
    """One argument or environment value: when it holds options of its own
    (`VLLM_EXTRA_ARGS="--api-key K"`), its words get the command-line rules; otherwise (or when
    none of its words is secret) the text and URL rules."""
    if depth < MAX_ARG_DEPTH and _EMBEDDED_OPTION.search(value):
        words = _split_args(value)
        if words:
            redacted = _redact_argv(words, depth + 1)
            if redacted != words:
                return " ".join(redacted)
    return _redact_value(value)


def _redact_value(value: str) -> str:
    """A value that is a URL gets the URL rules (a password with a space goes whole); other
    text gets the text rules, which also catch URLs inside it."""
    if "://" in value and _SCHEME.match(value.strip()):  # one URL, spaces and all
        return redact_url(value)
    return redact_text(value)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Secret-named variables (`HF_TOKEN`, `VLLM_API_KEY`, `LLAMA_API_KEY`, `NGROK_AUTHTOKEN`)
    become `<redacted>`; a value holding arguments (`VLLM_EXTRA_ARGS="--api-key K"`) gets the
    command-line rules; URLs lose their password; the rest gets the text rules."""
    return {k: REDACTED if is_secret_name(k) else _redact_arg_text(v) for k, v in env.items()}


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


def _argv_like(items: Sequence[Any]) -> bool:
    """A list of strings with a secret flag in it: read it as a command line."""
    return (len(items) > 1 and all(isinstance(x, str) for x in items)
            and any(x.startswith("-") and _secret_flag(x.partition("=")[0]) for x in items))


def redact_record(obj: Any) -> Any:
    """Deep redaction of a JSON-able value before it is stored or exported: every string gets
    the text rules; a string under a secret-named key becomes `<redacted>`; a list that is a
    command line gets the command-line rules. Unlike `redact_obj`, numbers and booleans are
    kept (measurements are never secrets), so stored results keep their types."""
    if hasattr(obj, "to_dict") and not isinstance(obj, type):
        obj = obj.to_dict()
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, Mapping):
        out: dict[Any, Any] = {}
        for k, v in obj.items():
            if isinstance(k, str) and is_secret_name(k) and (
                    (isinstance(v, str) and v)
                    or (isinstance(v, list) and v and all(isinstance(x, str) for x in v))):
                out[k] = REDACTED if isinstance(v, str) else [REDACTED for _ in v]
            else:
                out[k] = redact_record(v)
        return out
    if isinstance(obj, (list, tuple)):
        if _argv_like(obj):
            return [redact_text(x) for x in redact_cmdline(obj)]
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
        return redact_cmdline(obj) if _argv_like(obj) else [redact_obj(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(redact_obj(v) for v in obj)
    if isinstance(obj, str):
        return _redact_arg_text(obj)
    return obj
