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

from typing import Any

import numpy as np

MAX_DIGITS = 15  # digits of a captured number: below 2**53, exact as an int64 and a double
_RUN = 16  # bytes looked at for a digit run (two words); a longer run is Unusual
_P10 = 10 ** np.arange(MAX_DIGITS + 1, dtype=np.int64)
SAMPLE_BYTES = 1 << 20  # where each keyword's rarest byte is chosen
DENSE = 64  # a byte more frequent than 1 in DENSE: bytes.find of the keyword instead
_TWO = np.array([0, 8])
_HITS = 64  # hits of a watch keyword's rarest byte checked one by one before a whole find

# A template: a tuple of tokens, each one of
#   (b"lit", bytes)                      the bytes themselves
#   (b"int", capture) / (b"dec", capture) \d+ / \d+(?:\.\d+)?; capture: a name or None
#   (b"alt", (bytes, ...))               the first alternative that matches
#   (b"opt", template)                   present where the whole group matches, else skipped
#                                        (its captures NaN there)
#   (b"end", (bytes, ...))               one of these, the last ending in b"\n" (a lookahead:
#                                        the template's last token)
Template = tuple[tuple[bytes, Any], ...]


class Unusual(Exception):
    """The log has something the bulk read leaves to the per-line read."""


class Scan:
    """Keyword search over the blocks of one log; byte frequencies from its first block."""

    def __init__(self, first_block: Any) -> None:
        self.sample = bytes(first_block[:SAMPLE_BYTES])
        self.freq = np.bincount(np.frombuffer(self.sample, np.uint8), minlength=256)
        self._rare: dict[bytes, tuple[int, int, int]] = {}
        self._buf: Any = None  # the block whose byte places are cached
        self._hits: dict[tuple[int, int], Any] = {}
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

    def find(self, buf: Any, data: Any, kw: bytes, end: int) -> Any:
        """Every place (ascending, int64) where kw lies whole in buf[:end] (buf: data's bytes,
        a new array for each block). Where kw's rarest byte is not common (at most one byte in
        DENSE of the sample, or at most twice kw's own count), the places of that byte (one
        numpy compare, shared by the keywords of that byte), each checked whole; else
        `bytes.find` from place to place. The keywords have no border (no overlapping
        places) or, where they have, a line with two overlapping places is of another shape
        for its template either way."""
        (r, nr, nk), m = self.rare(kw), len(kw)
        if end < m:
            return np.empty(0, np.int64)
        if nr > len(self.sample) // DENSE and nr > 2 * nk + 64:
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
        q = hits - r
        q = q[(q >= 0) & (q <= end - m)]
        for i in self._order(kw)[1:3]:  # two more of its rarest bytes: few places left
            q = q[buf[q + i] == kw[i]]
        if m >= 8:
            w = words(buf)
            ok = np.ones(len(q), bool)
            for k in [*range(0, m - 7, 8), m - 8]:
                ok &= w[q + k] == np.uint64(int.from_bytes(kw[k:k + 8], "little"))
        else:
            ok = (buf[q[:, None] + np.arange(m)] == np.frombuffer(kw, np.uint8)).all(axis=1)
        return q[ok].astype(np.int64)

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


def _runs(buf: _Bytes, c: Any, ok: Any) -> tuple[Any, Any]:
    """(length of the digit run at each of c, its bytes minus b"0" (n, _RUN) uint8)."""
    dig = buf.w[c[:, None] + _TWO].view(np.uint8) - np.uint8(48)
    isd = dig < 10
    n = (~isd).argmax(axis=1)
    if ((n == 0) & isd[:, 0] & ok).any():  # all digits
        raise Unusual("a number of too many digits")
    return n, dig


def _value(dig: Any, n: Any) -> Any:
    """The int64 value of the first n[i] digits of each row of dig (Horner, column by column)."""
    top = int(n.max()) if len(n) else 0
    if top > MAX_DIGITS:
        raise Unusual("a number of too many digits")
    v = np.zeros(len(n), np.int64)
    for k in range(top):
        v = np.where(k < n, v * 10 + dig[:, k], v)
    return v


def match(buf: Any, at: Any, end: int, template: Template) -> dict[str, Any]:
    """The captured numbers (float64 arrays) of the lines whose template starts at each of
    `at` (the bytes buf[:end]; buf[end-1] is a newline); Unusual when any line does not
    match the template whole."""
    out: dict[str, Any] = {}
    c = np.asarray(at, np.int64).copy()
    if len(c) and int(c.max()) + _longest(template) + 8 >= len(buf):  # room to look ahead
        pad = np.zeros(int(c.max()) + _longest(template) + 9, np.uint8)
        pad[:end] = buf[:end]
        buf = pad
    _match(_Bytes(buf), c, np.ones(len(c), bool), template, out)
    return out


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
        else:
            n += 2 * _RUN + 2
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
        elif kind in (b"int", b"dec"):
            n1, dig = _runs(buf, c, ok)
            check(n1 > 0)
            total = n1
            if kind == b"dec":
                c1 = c + n1
                frac = (buf.b[c1] == 46) & (buf.b[c1 + 1] - np.uint8(48) < 10)
                n2, dig2 = _runs(buf, c1 + 1, ok & frac)
                n2 = np.where(frac, n2, 0)
                total = n1 + np.where(frac, 1 + n2, 0)
            if arg is not None:
                v = np.full(len(c), np.nan)
                if ok.any():
                    if kind == b"int":
                        v[ok] = _value(dig[ok], n1[ok]).astype(np.float64)
                    else:
                        m1, m2 = n1[ok], n2[ok]
                        if (m1 + m2 > MAX_DIGITS).any():
                            raise Unusual("a number of too many digits")
                        m = _value(dig[ok], m1) * _P10[m2] + _value(dig2[ok], m2)
                        v[ok] = m / _P10[m2].astype(np.float64)
                out[arg] = v
            c += total
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
