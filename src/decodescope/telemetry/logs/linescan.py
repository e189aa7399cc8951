"""Lines of one fixed shape, found and read in bulk with numpy: no per-line `re`.

The bulk readers (bulk_sglang.py, bulk_vllm.py) need, per block of a few MiB, every place of
a keyword, whether each of those lines is of the common shape, and the numbers it holds.
`re.finditer` with a pattern of the whole line did that at ~1 µs a line; here:

- `Scan.find`: the places of a keyword, from the places of its rarest byte in the log (one
  numpy compare over the block), each checked against the whole keyword;
- `Scan.any_kw`: whether a keyword occurs at all (the watch keywords, expected nowhere):
  `bytes.find` of its rarest byte (memchr), each hit checked; `bytes.find` of the whole
  keyword when that byte turns out common;
- `match`: a line template (literals, numbers, alternatives, optional groups, the line end)
  checked for all lines at once, one numpy step per token, with the numbers it captures.

`match` accepts exactly what the template's regex (`\\d+`, `\\d+(?:\\.\\d+)?`, literals,
`(?:...)?`, `(?:a|b)`, `(?=\\n)`) accepts where the token after a number never starts with a
digit (so no backtracking into a number changes the answer), and raises Unusual for any line
it does not accept: the caller then gives the log to the per-line read. A captured number is
`float()` of its text, bit for bit: `M / 10**f` of its digits M (< 2**53) and f decimals (both
exact doubles: the division is the correctly rounded decimal, as `float()` is); a number of
more than MAX_DIGITS digits is Unusual.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

MAX_DIGITS = 15  # digits of a captured number: below 2**53, exact as an int64 and a double
_P10 = 10 ** np.arange(MAX_DIGITS + 1, dtype=np.int64)
SAMPLE_BYTES = 1 << 20  # where each keyword's rarest byte is chosen
DENSE = 64  # a byte more frequent than 1 in DENSE: bytes.find of the keyword instead
_TWO = np.array([0, 8])
COMPARE_HITS = 50  # one byte compare over a block ~ checking 1 in 50 of its bytes (plan)
_HITS = 64  # hits of a watch keyword's rarest byte checked one by one before a whole find

# A template: a tuple of tokens, each one of
#   (b"lit", bytes)                      the bytes themselves
#   (b"int", capture) / (b"dec", capture) \d+ / \d+(?:\.\d+)?; capture: a name or None
#   (b"alt", (bytes, ...))               the first alternative that matches
#   (b"opt", template)                   present where the whole group matches, else skipped
#                                        (its captures NaN there)
#   (b"end", (bytes, ...))               one of these, the last ending in b"\n" (a lookahead:
#                                        the template's last token)
#   (b"fix", (width, capture))           exactly `width` digits (\d\d\d), not followed by a digit
#   (b"fdec", capture)                   \d+\.\d+ (a decimal point and digits required)
#   (b"sp", None) / (b"sp0", None)       " +" / " *" (a run of SET_MAX spaces or more: Unusual)
#   (b"set", (bytes, least, back, capture))  a run of bytes of the set, greedy, of at least
#                                        `least` + `back` bytes, then `back` bytes given back
#                                        (`[0-9., ]+ ms`: back 1, the space of " ms"); capture:
#                                        the run's place and length (name, name + "_n") or None;
#                                        a run of SET_MAX bytes or more is Unusual
#   (b"which", (capture, (bytes, ...)))  an alternative, the index of the first that matches
#                                        captured
Template = tuple[tuple[bytes, Any], ...]


SET_MAX = 128  # bytes looked at for a run of spaces or of a set (b"sp", b"set")


class Unusual(Exception):
    """The log has something the bulk read leaves to the per-line read."""


class Scan:
    """Keyword search over the blocks of one log; byte frequencies from its first block."""

    def __init__(self, first_block: Any) -> None:
        self.sample = bytes(first_block[:SAMPLE_BYTES])
        self.freq = np.bincount(np.frombuffer(self.sample, np.uint8), minlength=256)
        self._rare: dict[bytes, tuple[int, int, int]] = {}
        self._buf: Any = None  # the block whose byte places are cached
        self._hits: dict[tuple[int, ...], Any] = {}
        self._mask = np.empty(0, bool)

    def rare(self, kw: bytes) -> tuple[int, int, int]:
        """(index in kw of its byte least frequent in the sample, that byte's count there,
        kw's count there)."""
        r = self._rare.get(kw)
        if r is None:
            counts = [int(self.freq[b]) for b in kw]
            i = min(range(len(kw)), key=lambda i: (counts[i], i))
            r = self._rare[kw] = (i, counts[i], self.sample.count(kw))
        return r

    def _order(self, kw: bytes) -> list[int]:
        """kw's byte indexes, rarest in the sample first."""
        return sorted(range(len(kw)), key=lambda i: (int(self.freq[kw[i]]), i))

    def plan(self, kws: tuple[bytes, ...]) -> dict[bytes, int]:
        """For each of kws the index of the byte its places are found by (`find`'s `at`):
        each keyword's rarest byte, then, keyword by keyword, a byte another keyword's
        search compares anyway where that costs less: one compare over a block costs about
        as much as checking COMPARE_HITS of its hits (measured: docs/logs.md)."""
        freq = self.freq
        share = len(self.sample) / COMPARE_HITS
        pick = {kw: self.rare(kw)[0] for kw in kws}

        def cost() -> float:
            used = {kw[i] for kw, i in pick.items()}
            return len(used) * share + sum(float(freq[kw[i]]) for kw, i in pick.items())

        best, better = cost(), True
        while better:
            better = False
            for kw in kws:
                for i in range(len(kw)):
                    old, pick[kw] = pick[kw], i
                    c = cost()
                    if c < best - 1e-9:
                        best, better = c, True
                    else:
                        pick[kw] = old
        return pick

    def find(self, buf: Any, data: Any, kw: bytes, end: int, at: int | None = None) -> Any:
        """Every place (ascending, int64) where kw lies whole in buf[:end] (buf: data's bytes,
        a new array for each block). Where kw's rarest byte is not common (at most one byte in
        DENSE of the sample, or at most twice kw's own count), the places of that byte (one
        numpy compare, shared by the keywords of that byte), each checked whole; else
        `bytes.find` from place to place. The keywords have no border (no overlapping
        places) or, where they have, a line with two overlapping places is of another shape
        for its template either way."""
        m = len(kw)
        if end < m:
            return np.empty(0, np.int64)
        run = compiled()
        if run is not None:  # memchr / memmem from place to place (_linescan.c)
            return places_of(run, data, end, kw)
        r, nr, nk = self.rare(kw)
        if at is not None:  # a byte the search of another keyword compares too (plan)
            r = at
        elif nr > len(self.sample) // DENSE and nr > 2 * nk + 64:
            out, p, find = [], data.find(kw, 0, end), data.find
            while p >= 0:
                out.append(p)
                p = find(kw, p + m, end)
            return np.array(out, np.int64)
        key = (kw[r], end)
        if self._buf is not buf:
            self._buf, self._hits = buf, {}
        hits = self._hits.get(key)
        if hits is None:
            if len(self._mask) < end:  # reused: no fresh pages for each block's compare
                self._mask = np.empty(end, bool)
            hits = self._hits[key] = np.flatnonzero(
                np.equal(buf[:end], kw[r], out=self._mask[:end]))
        if m >= 8 and at is not None:
            # The 8 bytes of kw that hold its byte r and end as late as they can: keywords of
            # one byte that end alike ("eval time =", "total time =": "l time =") share the
            # gather of those words (cached), each hit then one uint64 compare.
            s0 = min(m - 8, r)
            w = words(buf)
            gkey = (kw[r], end, r - s0)
            got = self._hits.get(gkey)
            if got is None:
                got = self._hits[gkey] = w[np.clip(hits - (r - s0), 0, len(w) - 1)]
            q = hits[got == np.uint64(int.from_bytes(kw[s0:s0 + 8], "little"))] - r
            q = q[(q >= 0) & (q <= end - m)]
            ok = np.ones(len(q), bool)
            for k in [*range(0, m - 7, 8), m - 8]:
                if k != s0:
                    ok &= w[q + k] == np.uint64(int.from_bytes(kw[k:k + 8], "little"))
            return q[ok].astype(np.int64)
        q = hits - r
        q = q[(q >= 0) & (q <= end - m)]
        for i in [i for i in self._order(kw) if i != r][:2]:  # two more of its rarest bytes
            q = q[buf[q + i] == kw[i]]
        if m >= 8:
            w = words(buf)
            ok = np.ones(len(q), bool)
            for k in [*range(0, m - 7, 8), m - 8]:
                ok &= w[q + k] == np.uint64(int.from_bytes(kw[k:k + 8], "little"))
        else:
            ok = (buf[q[:, None] + np.arange(m)] == np.frombuffer(kw, np.uint8)).all(axis=1)
        return q[ok].astype(np.int64)

    def find_many(self, buf: Any, data: Any, kws: tuple[bytes, ...], end: int,
                  by: dict[bytes, int]) -> list[Any]:
        """`find` of each of kws, by the byte `by[kw]` of each (`plan`): by the compiled module
        one memchr pass per byte for all the keywords that share it, each hit checked whole
        (measured on a llama.cpp block: 3.4 ms for its six keywords, 6.9 ms by memmem
        keyword by keyword, docs/logs.md)."""
        run = compiled()
        if run is None:
            return [self.find(buf, data, kw, end, by[kw]) for kw in kws]
        return [np.frombuffer(b, np.int64) for b in
                run.find_by(data, end, kws, tuple(by[kw] for kw in kws))]

    def any_kw(self, data: Any, kws: tuple[bytes, ...], end: int, buf: Any = None) -> bool:
        """Whether any of kws occurs in data[:end] (`data.find(kw, 0, end) >= 0`): memchr
        of the keyword's rarest byte, each hit checked, where that byte is rare in the
        sample (or bytes.find of the keyword after _HITS hits); else `find` where that byte is
        not common (its places may be known already: a byte of the lines' own keywords) and
        buf (data's bytes) is given; else `bytes.find` of the whole keyword."""
        for kw in kws:
            (r, nr, _), m = self.rare(kw), len(kw)
            if nr > _HITS:
                if nr <= len(self.sample) // DENSE and buf is not None:
                    if len(self.find(buf, data, kw, end)):
                        return True
                elif data.find(kw, 0, end) >= 0:
                    return True
                continue
            byte, hi = kw[r:r + 1], end - (m - 1 - r)  # kw's byte at p: kw ends by `end`
            if hi <= r:
                continue
            p, hits = data.find(byte, r, hi), 0
            while p >= 0:
                if data.startswith(kw, p - r):
                    return True
                hits += 1
                if hits >= _HITS:  # a common byte after all: the whole keyword
                    if data.find(kw, p - r, end) >= 0:
                        return True
                    break
                p = data.find(byte, p + 1, hi)
        return False


def words(buf: Any) -> Any:
    """buf (uint8) as one little-endian uint64 at every byte offset: an overlapping, unaligned
    view (8 bytes in one gather)."""
    return np.ndarray((len(buf) - 7,), "<u8", buf, 0, (1,))


def gather(buf: Any, at: Any, n: int, w: Any = None) -> Any:
    """(len(at), n) uint8: buf[a:a + n] for each a of at (a + n <= len(buf), n >= 8), a uint64
    gather per 8 bytes."""
    if n < 8:
        return buf[np.asarray(at, np.int64)[:, None] + np.arange(n)]
    w = words(buf) if w is None else w
    whole, rest = divmod(n, 8)
    offs = [8 * k for k in range(whole)] + ([n - 8] if rest else [])
    got = w[np.asarray(at, np.int64)[:, None] + np.array(offs)].view(np.uint8)
    if not rest:
        return got
    return np.concatenate((got[:, :8 * whole], got[:, -rest:]), axis=1)


class _Bytes:
    """A block's bytes, and the same as one little-endian uint64 at every byte offset (an
    overlapping, unaligned view: 8 bytes in one gather)."""

    def __init__(self, buf: Any) -> None:
        self.b = buf
        self.w = words(buf)


def _word(lit: bytes) -> tuple[int, int]:
    """(value, mask) of up to 8 bytes as the little-endian uint64 that starts with them."""
    return int.from_bytes(lit, "little"), (1 << (8 * len(lit))) - 1


_HI, _LO = np.uint64(0xF0F0F0F0F0F0F0F0), np.uint64(0x0F0F0F0F0F0F0F0F)
_ZEROS, _SIXES = np.uint64(0x3030303030303030), np.uint64(0x0606060606060606)
_SPACES = np.uint64(0x2020202020202020)
_STEPS = ((np.uint64(0x0F000F000F000F00), np.uint64(0x000F000F000F000F), np.uint64(8),
           np.uint64(10)),
          (np.uint64(0x00FF000000FF0000), np.uint64(0x000000FF000000FF), np.uint64(16),
           np.uint64(100)),
          (np.uint64(0x0000FFFF00000000), np.uint64(0x000000000000FFFF), np.uint64(32),
           np.uint64(10000)))


def _zero_bytes(t: Any) -> Any:
    """The number of low-order zero bytes of each uint64 (8 where it is 0): in a word read
    little-endian, the bytes before the first one that is not zero."""
    low = t & (~t + np.uint64(1))  # the lowest set bit
    bit = np.frexp(low.astype(np.float64))[1] - 1  # exact: a power of two
    return np.where(t == 0, 8, bit // 8).astype(np.int64)


def _nondigit(w: Any) -> Any:
    """Each byte of w zero where it is an ASCII digit (high nibble 3, low nibble <= 9; the
    low nibbles are masked before the add: no carry from byte to byte)."""
    return ((w & _HI) ^ _ZEROS) | (((w & _LO) + _SIXES) & _HI)


def _swar(w: Any, n: Any) -> Any:
    """The value (int64) of the first n (0-8) bytes of each word w, all digits: shifted to
    the word's top (the bytes shifted in are leading zeros), then pairs, quads and halves
    combined (a multiply and an add a step, no loop over digits)."""
    shift = np.uint64(8) * (np.uint64(8) - np.clip(n, 1, 8).astype(np.uint64))
    d = np.where(n > 0, (w ^ _ZEROS) << shift, np.uint64(0))
    for hi, lo, sh, mul in _STEPS:
        d = ((d & hi) >> sh) + (d & lo) * mul
    return d.astype(np.int64)


def _digits(buf: _Bytes, c: Any, ok: Any) -> tuple[Any, Any]:
    """(length, int64 value) of the digit run at each of c, a word at a time (Unusual for
    a run of more than MAX_DIGITS digits on a row of ok)."""
    w = buf.w[c]
    n = _zero_bytes(_nondigit(w))
    v = _swar(w, n)
    more = np.flatnonzero(n == 8)
    if len(more):
        w2 = buf.w[c[more] + 8]
        n2 = _zero_bytes(_nondigit(w2))
        if ((n2 + 8 > MAX_DIGITS) & ok[more]).any():
            raise Unusual("a number of too many digits")
        n2 = np.minimum(n2, MAX_DIGITS - 8)
        n[more] += n2
        v[more] = v[more] * _P10[n2] + _swar(w2, n2)
    return n, v


def _spaces(buf: _Bytes, c: Any, ok: Any) -> Any:
    """The length of the run of spaces at each of c, a word at a time (Unusual for SET_MAX
    or more on a row of ok)."""
    n = _zero_bytes(buf.w[c] ^ _SPACES)
    more, k = np.flatnonzero(n == 8), 8
    while len(more):
        if k >= SET_MAX:
            if ok[more].any():
                raise Unusual("a run of too many bytes")
            break
        m = _zero_bytes(buf.w[c[more] + k] ^ _SPACES)
        n[more] += m
        more, k = more[m == 8], k + 8
    return n


def match(buf: Any, at: Any, end: int, template: Template,
          cursor: str | None = None) -> dict[str, Any]:
    """The captured numbers (float64 arrays) of the lines whose template starts at each of
    `at` (the bytes buf[:end]; buf[end-1] is a newline); Unusual when any line does not
    match the template whole. `cursor`: also where the template ended, under that name (the
    next template of the same lines starts there). Run by the compiled module where it was
    built (`_linescan.c`, the same answers), else by numpy (`match_numpy`)."""
    if compiled() is not None:
        return match_compiled(buf, at, end, template, cursor)
    return match_numpy(buf, at, end, template, cursor)


def match_numpy(buf: Any, at: Any, end: int, template: Template,
                cursor: str | None = None) -> dict[str, Any]:
    """`match` by numpy: one step over all lines per token (the definition)."""
    out: dict[str, Any] = {}
    c = np.asarray(at, np.int64).copy()
    if len(c) and int(c.max()) + _longest(template) + 8 >= len(buf):  # room to look ahead
        pad = np.zeros(int(c.max()) + _longest(template) + 9, np.uint8)
        pad[:end] = buf[:end]
        buf = pad
    _match(_Bytes(buf), c, np.ones(len(c), bool), template, out)
    if cursor is not None:
        out[cursor] = c
    return out


# --- the compiled run (_linescan.c) -------------------------------------------------------

API = 1  # the compiled module's API (its `API` constant) this code calls


def usable(module: Any) -> tuple[Any, bool]:
    """(the module, or None where it cannot be used; whether it is stale: built from other
    sources, as an editable install whose C file changed and was not rebuilt)."""
    if module is None:
        return None, False
    if getattr(module, "API", None) != API:
        return None, True
    return module, False


try:
    from decodescope.telemetry.logs import _linescan as _built
except ImportError:  # built without a C compiler: numpy runs every template
    _built = None  # type: ignore[assignment]
_compiled, _STALE = usable(_built)
# DECODESCOPE_PURE_NUMPY=1: numpy only (the bench's comparison, a check of the C module)
_PURE = os.environ.get("DECODESCOPE_PURE_NUMPY", "") not in ("", "0")


def places_of(run: Any, data: Any, end: int, kw: bytes) -> Any:
    """Every place (int64, ascending) where kw lies whole in data[:end], by the compiled
    module (`run`): memchr for one byte, memmem for more, from place to place."""
    return np.frombuffer(run.find_all(data, end, kw), np.int64)


def compiled() -> Any:
    """The compiled module, or None (not built, or DECODESCOPE_PURE_NUMPY set)."""
    return None if _PURE else _compiled


def numpy_only_because() -> str | None:
    """Why the log reader runs without its compiled parts (None: it runs with them)."""
    if _PURE:
        return "DECODESCOPE_PURE_NUMPY is set"
    if _STALE:
        return ("its C module was built from other sources (reinstall: pip install -e . "
                "rebuilds it)")
    if _compiled is None:
        return "its C module was not built (no C compiler when decodescope was installed)"
    return None


_OP = {b"lit": 1, b"alt": 2, b"end": 3, b"which": 4, b"int": 5, b"dec": 6, b"fdec": 7,
       b"fix": 8, b"sp": 9, b"sp0": 10, b"set": 11, b"opt": 12}


class _Program:
    """A template as the compiled module's ops: int64 words, the literal bytes, and per
    capture slot its name and whether numpy gives it as int64 (a run's place and length
    outside an optional group) or float64."""

    def __init__(self, template: Template) -> None:
        self.consts = bytearray()
        self.names: list[str] = []
        self.ints: list[bool] = []
        self.ops = np.array(self._ops(template, False), np.int64)
        self.const_bytes = bytes(self.consts) or b"\0"

    def _lit(self, lit: bytes) -> list[int]:
        off = len(self.consts)
        self.consts += lit
        return [off, len(lit)]

    def _slot(self, name: str | None, is_int: bool = False) -> int:
        if name is None:
            return -1
        self.names.append(name)
        self.ints.append(is_int)
        return len(self.names) - 1

    def _ops(self, template: Template, in_opt: bool) -> list[int]:
        out: list[int] = []
        for kind, arg in template:
            op = _OP[kind]
            if kind == b"lit":
                out += [op, *self._lit(arg)]
            elif kind in (b"alt", b"end"):
                out += [op, len(arg)]
                for lit in arg:
                    out += self._lit(lit)
            elif kind == b"which":
                name, alts = arg
                out += [op, self._slot(name), len(alts)]
                for lit in alts:
                    out += self._lit(lit)
            elif kind in (b"int", b"dec", b"fdec"):
                out += [op, self._slot(arg)]
            elif kind == b"fix":
                width, name = arg
                out += [op, width, self._slot(name)]
            elif kind in (b"sp", b"sp0"):
                out += [op]
            elif kind == b"set":
                members, least, back, name = arg
                where = self._lit(members)
                at = self._slot(name, not in_opt)
                n = self._slot(None if name is None else name + "_n", not in_opt)
                out += [op, *where, least, back, at, n]
            elif kind == b"opt":
                first = arg[0]
                assert first[0] == b"lit"
                lit = self._lit(first[1])
                sub = self._ops(arg, True)
                out += [op, *lit, len(sub), *sub]
            else:  # pragma: no cover - a template error
                raise ValueError(kind)
        return out


_PROGRAMS: dict[int, tuple[Template, _Program]] = {}


def _program(template: Template) -> _Program:
    got = _PROGRAMS.get(id(template))
    if got is None or got[0] is not template:
        got = _PROGRAMS[id(template)] = (template, _Program(template))
    return got[1]


def match_compiled(buf: Any, at: Any, end: int, template: Template,
                   cursor: str | None = None) -> dict[str, Any]:
    """`match` by the compiled module: each line read once, token after token."""
    prog = _program(template)
    starts = np.ascontiguousarray(at, np.int64)
    n = len(starts)
    caps = np.full((len(prog.names), n), np.nan)
    cur = np.empty(n, np.int64)
    data = np.ascontiguousarray(buf, np.uint8)
    why = _compiled.run(data, end, starts, prog.ops, prog.const_bytes, caps, cur)
    if why is not None:
        raise Unusual(why)
    out: dict[str, Any] = {}
    for i, (name, is_int) in enumerate(zip(prog.names, prog.ints, strict=True)):
        out[name] = caps[i].astype(np.int64) if is_int else caps[i]
    if cursor is not None:
        out[cursor] = cur
    return out


_LUTS: dict[bytes, Any] = {}


def _lut(members: bytes) -> Any:
    """A 256-entry table: True for the bytes of `members`."""
    t = _LUTS.get(members)
    if t is None:
        t = _LUTS[members] = np.zeros(256, bool)
        t[np.frombuffer(members, np.uint8)] = True
    return t


def _set_run(buf: _Bytes, c: Any, ok: Any, members: bytes) -> Any:
    """The length of the run of bytes of `members` at each of c (Unusual for one of SET_MAX
    bytes or more on a row of ok)."""
    lut = _lut(members)
    n = np.zeros(len(c), np.int64)
    open_ = np.ones(len(c), bool)  # the run has not ended within the bytes looked at
    for k in range(0, SET_MAX, 16):
        rows = np.flatnonzero(open_)
        if not len(rows):
            break
        stop = ~lut[buf.w[c[rows, None] + k + _TWO].view(np.uint8)]
        has = stop.any(axis=1)
        n[rows] += np.where(has, stop.argmax(axis=1), 16)
        open_[rows[has]] = False
    if (open_ & ok).any():
        raise Unusual("a run of too many bytes")
    return n


def _longest(template: Template) -> int:
    """An upper bound of the bytes the template looks at past its start."""
    n = 0
    for kind, arg in template:
        if kind == b"lit":
            n += len(arg)
        elif kind in (b"alt", b"end"):
            n += max(map(len, arg))
        elif kind == b"opt":
            n += _longest(arg)
        elif kind == b"which":
            n += max(map(len, arg[1]))
        elif kind in (b"set", b"sp", b"sp0"):
            n += SET_MAX
        else:
            n += 2 * 16 + 2
    return n


def _lit(buf: _Bytes, c: Any, lit: bytes) -> Any:
    """Whether lit lies at each of c: a uint64 compare per 8 bytes."""
    if len(lit) == 1:
        return buf.b[c] == lit[0]
    if len(lit) < 8:
        v, m = _word(lit)
        return buf.w[c] & np.uint64(m) == np.uint64(v)
    out: Any = None
    for k in [*range(0, len(lit) - 7, 8), len(lit) - 8]:
        eq = buf.w[c + k] == np.uint64(_word(lit[k:k + 8])[0])
        out = eq if out is None else out & eq
    return out


def _match(buf: _Bytes, c: Any, ok: Any, template: Template, out: dict[str, Any],
           soft: bool = False) -> Any:
    """Advance c (in place) through the template; the rows that match (every row of `ok`,
    or Unusual, unless soft: an optional group's trial, whose failing rows are dropped; the
    cursors of rows not ok are meaningless)."""
    ok = ok.copy()

    def check(good: Any) -> None:
        nonlocal ok
        if soft:
            ok &= good
        elif not good.all():
            raise Unusual("a line of another shape")

    for kind, arg in template:
        if kind == b"lit":
            check(_lit(buf, c, arg))
            c += len(arg)
        elif kind == b"alt" or kind == b"end":
            step = np.full(len(c), -1, np.int64)
            for lit in arg:
                step[(step < 0) & _lit(buf, c, lit)] = len(lit)
            check(step >= 0)
            if kind == b"alt":
                c += np.maximum(step, 0)
        elif kind in (b"int", b"dec", b"fdec"):
            n1, v1 = _digits(buf, c, ok)
            total = n1
            if kind == b"int":
                check(n1 > 0)
            else:
                c1 = c + n1
                frac = (buf.b[c1] == 46) & (buf.b[c1 + 1] - np.uint8(48) < 10)
                check((n1 > 0) & frac if kind == b"fdec" else n1 > 0)
                n2, v2 = _digits(buf, c1 + 1, ok & frac)
                n2 = np.where(frac, n2, 0)
                total = n1 + np.where(frac, 1 + n2, 0)
            if arg is not None:
                v = np.full(len(c), np.nan)
                if ok.any():
                    if kind == b"int":
                        v[ok] = v1[ok].astype(np.float64)
                    else:
                        m1, m2 = n1[ok], n2[ok]
                        if (m1 + m2 > MAX_DIGITS).any():
                            raise Unusual("a number of too many digits")
                        m = v1[ok] * _P10[m2] + np.where(m2 > 0, v2[ok], 0)
                        v[ok] = m / _P10[m2].astype(np.float64)
                out[arg] = v
            c += total
        elif kind == b"fix":
            width, name = arg
            n, v = _digits(buf, c, ok)
            check(n == width)
            if name is not None:
                out[name] = np.where(ok, v, 0).astype(np.float64)
            c += width
        elif kind == b"sp" or kind == b"sp0":
            n = _spaces(buf, c, ok)
            if kind == b"sp":
                check(n > 0)
            c += n
        elif kind == b"set":
            members, least, back, name = arg
            n = _set_run(buf, c, ok, members)
            check(n >= least + back)
            if name is not None:
                out[name], out[name + "_n"] = c.copy(), n - back
            c += np.maximum(n - back, 0)
        elif kind == b"which":
            name, alts = arg
            step = np.full(len(c), -1, np.int64)
            idx = np.full(len(c), np.nan)
            for i, lit in enumerate(alts):
                hit = (step < 0) & _lit(buf, c, lit)
                step[hit], idx[hit] = len(lit), float(i)
            check(step >= 0)
            out[name] = idx
            c += np.maximum(step, 0)
        elif kind == b"opt":
            first = arg[0]
            assert first[0] == b"lit"
            present = ok & _lit(buf, c, first[1])
            trial = c.copy()
            sub: dict[str, Any] = {}
            got = _match(buf, trial, present, arg, sub, soft=True)
            check(got == present)
            c[:] = np.where(got, trial, c)
            for name, v in sub.items():
                out[name] = np.where(got, v, np.nan)
        else:  # pragma: no cover - a template error
            raise ValueError(kind)
    return ok
