"""linescan.match accepts what the bulk readers' line regexes accept and reads the same numbers,
bit for bit (`float()` of the captured text), on the common lines and on every one-byte
mutation class of them; it may refuse more (numbers of 16 digits and more: the per-line read
then takes the log), never less. Scan.find and Scan.any_kw agree with bytes.find."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from decodescope.telemetry.logs import bulk_sglang, bulk_vllm, linescan
from decodescope.telemetry.logs.linescan import Scan, Template, Unusual, match

_SG = ("[2026-09-01 00:00:01 TP0] Decode batch{sep} #running-req: {run}, #token: 71157, token "
       "usage: 0.15, {spec}{cuda}gen throughput (token/s): {gen}, #queue-req: 0{tail}")
_ST = ("(APIServer pid=5020) INFO 09-01 00:00:10 [loggers.py:271] Engine 000: Avg prompt "
       "throughput: 327.4 tokens/s, Avg generation throughput: {gen} tokens/s, Running: {run} "
       "reqs, Waiting: 2 reqs, GPU KV cache usage: 19.0%, Prefix cache hit rate: 0.0%")
_SP = ("(APIServer pid=5020) INFO 09-01 00:00:10 [metrics.py:101] SpecDecoding metrics: Mean "
       "acceptance length: {mal}, Accepted throughput: 285.90 tokens/s, Drafted throughput: "
       "465.90 tokens/s, Accepted: {acc} tokens, Drafted: {dr} tokens, Per-position acceptance "
       "rate: {pp}, Avg Draft acceptance rate: 61.4%")


def _num(rng: random.Random, dec: bool) -> str:
    whole = str(rng.choice((0, 1, 7, 12, 305, 4096, rng.randrange(10 ** rng.randrange(1, 15)))))
    if not dec or rng.random() < 0.3:
        return whole
    return f"{whole}.{rng.randrange(10 ** 6):0{rng.randrange(1, 7)}d}"[:16]


def _sglang(rng: random.Random) -> str:
    return _SG.format(
        sep=rng.choice(".,"), run=_num(rng, False), gen=_num(rng, True),
        spec=rng.choice(("", f"accept len: {_num(rng, True)}, accept rate: 0.73, ")),
        cuda=rng.choice(("", "cuda graph: True, ", "cuda graph: False, ")),
        tail=rng.choice((", ", ",", "")))


def _stats(rng: random.Random) -> str:
    return _ST.format(gen=_num(rng, True), run=_num(rng, False))


def _spec(rng: random.Random, k: int) -> str:
    return _SP.format(mal=_num(rng, True), acc=_num(rng, False), dr=_num(rng, False),
                      pp=", ".join(_num(rng, True) for _ in range(k)))


def _mutate(rng: random.Random, line: str) -> str:
    i = rng.randrange(len(line))
    c = rng.choice("0123456789.,: x%-\n") if rng.random() < 0.9 else "1" * 17
    op = rng.randrange(3)
    if op == 0:
        return line[:i] + line[i + 1:]
    if op == 1:
        return line[:i] + c + line[i:]
    return line[:i] + c + line[i + 1:]


# (keyword, regex of the line from its keyword (group 1: None when refused), template,
# captured names -> regex group)
def _cases(k: int) -> dict[str, tuple[bytes, re.Pattern[bytes], Template, dict[str, int]]]:
    return {
        "sglang": (bulk_sglang._KEY, bulk_sglang._LINE, bulk_sglang._TEMPLATE,
                   {"run": 2, "acc": 3, "gen": 4}),
        "stats": (bulk_vllm._STATS_KEY, bulk_vllm._STATS, bulk_vllm._STATS_T,
                  {"gen": 1, "run": 2}),
        "spec": (bulk_vllm._SPEC_KEY, bulk_vllm._spec_line(k), bulk_vllm._spec_template(k),
                 {"mal": 1, "acc": 2, "drafted": 3}),
    }


def _long_digits(text: bytes) -> bool:
    return re.search(rb"\d{16}", text) is not None or any(
        len(m.group().replace(b".", b"")) > 15 for m in re.finditer(rb"\d+(?:\.\d+)?", text))


@pytest.mark.parametrize("kind", ["sglang", "stats", "spec"])
@pytest.mark.parametrize("seed", range(3))
def test_match_is_the_regex(kind: str, seed: int) -> None:
    rng = random.Random(seed)
    k = rng.randrange(1, 5)
    key, rx, template, groups = _cases(k)[kind]
    make = {"sglang": lambda: _sglang(rng), "stats": lambda: _stats(rng),
            "spec": lambda: _spec(rng, k)}[kind]
    accepted = refused = 0
    for n in range(1500):
        line = make()
        if n % 3:
            line = _mutate(rng, line)
            if n % 7 == 0:
                line = _mutate(rng, line)
        block = b"\n" + line.encode() + b"\n"
        at = block.find(key)
        if at < 0:
            continue
        m = rx.match(block, at, len(block))
        assert m is not None
        buf = np.frombuffer(block, np.uint8)
        try:
            got = match(buf, np.array([at + len(key)]), len(block), template)
        except Unusual:
            got = None
        if m.group(1) is None:
            assert got is None, line
            refused += 1
            continue
        if got is None:  # refused where the regex accepts: only for very long numbers
            assert _long_digits(block[at:m.end()]), line
            continue
        accepted += 1
        for name, g in groups.items():
            want = m.group(g)
            v = float(got[name][0])
            if want is None:
                assert v != v, line
            else:
                assert v == float(want) and repr(v) == repr(float(want)), (line, name)
    assert accepted > 300 and refused > 100


def test_match_many_lines_at_once() -> None:
    rng = random.Random(5)
    lines = [_sglang(rng) for _ in range(400)]
    block = ("\n" + "\n".join(lines) + "\n").encode()
    buf = np.frombuffer(block, np.uint8)
    scan = Scan(block)
    at = scan.find(buf, block, bulk_sglang._KEY, len(block))
    assert at.tolist() == [m.start() for m in re.finditer(b"Decode batch", block)]
    got = match(buf, at + len(bulk_sglang._KEY), len(block), bulk_sglang._TEMPLATE)
    for i, m in enumerate(bulk_sglang._LINE.finditer(block)):
        assert got["gen"][i] == float(m.group(4))
        assert got["run"][i] == float(m.group(2))
        a = m.group(3)
        assert (got["acc"][i] != got["acc"][i]) if a is None else got["acc"][i] == float(a)
    bad = block.replace(b"#queue-req: 0", b"#queue-req: x", 1)
    with pytest.raises(Unusual):
        match(np.frombuffer(bad, np.uint8), at + len(bulk_sglang._KEY), len(bad),
              bulk_sglang._TEMPLATE)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("dense", [1, 64, 10 ** 6])  # which path find and any_kw take
@pytest.mark.parametrize("pure", [True, False])  # numpy / memchr and memmem (_linescan.c)
def test_scan_is_bytes_find(seed: int, dense: int, pure: bool,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(linescan, "DENSE", dense)
    monkeypatch.setattr(linescan, "_PURE", pure)
    rng = random.Random(seed)
    alphabet = b"ab=D\n metrics:Avgevaltime"
    data = bytes(rng.choice(alphabet) for _ in range(20000))
    kws = (b"eval time =", b" metrics: ", b"Decode batch", b"ab", b"=", b"Dab")
    for kw in kws:
        pos = rng.randrange(len(data))
        data = data[:pos] + kw + data[pos:]
    scan = Scan(data[:3000])
    buf = np.frombuffer(data, np.uint8)
    for kw in (*kws, b"ma", b"zz"):
        for end in (len(data), rng.randrange(len(data)), 5):
            want = [m.start() for m in re.finditer(re.escape(kw), data[:end])]
            got = scan.find(buf, data, kw, end).tolist()
            if kw not in (b"ab", b"=", b"ma"):  # non-overlapping: the keywords have no border
                assert got == want
            assert scan.any_kw(data, (kw,), end) == (data.find(kw, 0, end) >= 0)
            assert scan.any_kw(data, (kw,), end, buf) == (data.find(kw, 0, end) >= 0)
    # several keywords at once, by the bytes the plan shares between them
    many = (b"eval time =", b" metrics: ", b"Decode batch", b"Dab", b"zz")
    for end in (len(data), rng.randrange(len(data)), 5):
        got = [q.tolist() for q in scan.find_many(buf, data, many, end, scan.plan(many))]
        assert got == [[m.start() for m in re.finditer(re.escape(kw), data[:end])]
                       for kw in many]


_LL = {  # llama.cpp lines (PR #24536 / b1-0c1e570 shapes), from the stamp
    "timing": "{e} I slot print_timing: id{sp}{slot} | task {task} | {pad}{kind} time = {pad}"
              "{ms} ms / {pad}{tok} tokens{tail}",
    "draft": "{e} I slot print_timing: id{sp}{slot} | task {task} | draft acceptance = 0.75804 "
             "({pad}{acc} accepted / {pad}{gen} generated), mean {key} = {pad}{mal}{tail}",
    "stats": "{e} I statistics{sp}{name}: #calls(b,g,a) = {pad}1 {acc} 2, #gen drafts = {pad}"
             "{gd}, #acc drafts = {pad}98, #gen tokens = {pad}{gen}, #acc tokens = {pad}{acc}"
             "{tail}",
    "release": "{e} I slot{sp}release: id{sp}{slot} | task {task} | stop processing: "
               "n_tokens = {tok}, truncated = 0",
}
_LL_TAILS = ("", " ( 0.50 ms per token, 2000.00 tokens per second)",
             ", acceptance rate per position = (0.800, 0.600, 0.400)",
             ", #mean acc len = 3.27, #acc rate/pos = (0.8, 0.6), dur(b,g,a) = 0.005, 1.1 ms")


def _llama(rng: random.Random, kind: str) -> str:
    m = rng.choice((0, 7, 59, 228, 1234, rng.randrange(10 ** 6)))
    e = f"{m}.{rng.randrange(60):02d}.{rng.randrange(1000):03d}.{rng.randrange(1000):03d}"
    return _LL[kind].format(
        e=e, sp=" " * rng.randrange(1, 12), pad=" " * rng.randrange(0, 10),
        slot=_num(rng, False), task=_num(rng, False), tok=_num(rng, False),
        kind=rng.choice(("prompt eval", "       eval", "      total")), ms=_num(rng, True),
        acc=_num(rng, False), gen=_num(rng, False), gd=_num(rng, False),
        key=rng.choice(("acceptance length", "len")), mal=_num(rng, True),
        name=rng.choice(("draft-mtp", "ngram-cache", "x.y_z-1")), tail=rng.choice(_LL_TAILS))


@pytest.mark.parametrize("kind", sorted(_LL))
@pytest.mark.parametrize("seed", range(2))
def test_llamacpp_lines_are_the_per_line_parse(kind: str, seed: int) -> None:
    """What the llama.cpp bulk read takes from a line (its templates) is what the per-line
    parser (`llamacpp.parse`) gives for it, field by field, bit for bit; it refuses a line
    the parser reads otherwise or not at all, and may refuse more (the per-line read then
    takes the log)."""
    from decodescope.telemetry.logs import bulk_llamacpp as bl
    from decodescope.telemetry.logs import llamacpp
    from decodescope.telemetry.logs.accumulate import LogAccumulator
    from decodescope.telemetry.logs.clock import Clock
    from decodescope.telemetry.logs.parse_counts import ParseCounts

    rng = random.Random(seed)
    accepted = refused = 0
    for n in range(1200):
        line = _llama(rng, kind)
        if n % 3:
            line = _mutate(rng, line)
            if n % 7 == 0:
                line = _mutate(rng, line)
        if "\n" in line:
            continue
        block = b"\n" + line.encode() + b"\n"
        found = [block.count(kw) for kw in bl.KEYWORDS]
        if sum(found) != 1:  # the bulk read's own check: one keyword a line
            continue
        which = np.array([found.index(1)])
        bulk = bl.BulkLlamacpp(LogAccumulator(), ParseCounts(), 0)
        try:
            k, col = bulk.lines(np.frombuffer(block, np.uint8), len(block), np.array([1]), which)
        except Unusual:
            refused += 1
            continue
        rec = llamacpp.parse(line, Clock(2026), ParseCounts())
        accepted += 1
        kind_got = int(k[0])
        got = {c: float(v[0]) for c, v in col.items()}
        assert rec is not None and not isinstance(rec, llamacpp.Unparsed), line
        assert rec.t_elapsed_s == got["te"] and repr(rec.t_elapsed_s) == repr(got["te"]), line
        if isinstance(rec, llamacpp.LTime):
            assert kind_got == ("prompt eval", "eval", "total").index(rec.kind), line
            assert (rec.slot, rec.ms, rec.tokens) == ((got["slot"], got["task"]), got["a"],
                                                      got["b"]), line
        elif isinstance(rec, llamacpp.LDraft):
            assert kind_got == bl.DRAFT and rec.mal is not None, line
            assert (rec.slot, rec.accepted, rec.generated, rec.mal) == (
                (got["slot"], got["task"]), got["a"], got["b"], got["c"]), line
        elif isinstance(rec, llamacpp.LStats):
            assert kind_got == bl.STATS, line
            assert rec.impl == bulk.names[int(got["p"])], line
            assert (rec.gen_drafts, rec.gen_tokens, rec.acc_tokens) == (got["a"], got["b"],
                                                                       got["c"]), line
        else:
            assert isinstance(rec, llamacpp.LRelease) and kind_got == bl.RELEASE, line
            assert rec.slot == (got["slot"], got["task"]), line
    assert accepted > 300 and refused > 50, (accepted, refused)


def _all_templates() -> list[tuple[str, Template]]:
    from decodescope.telemetry.logs import bulk_llamacpp as bl
    out = [("sglang", bulk_sglang._TEMPLATE), ("vllm stats", bulk_vllm._STATS_T)]
    out += [(f"vllm spec {k}", bulk_vllm._spec_template(k)) for k in (1, 3, 5)]
    out += [(name, getattr(bl, name)) for name in
            ("_STAMP", "_HEAD", "_TIMING", "_DRAFT", "_STATS", "_RELEASE")]
    return out


def _same(a: dict[str, np.ndarray] | str, b: dict[str, np.ndarray] | str) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str)
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
        and np.array_equal(a[k], b[k], equal_nan=a[k].dtype.kind == "f") for k in a)


@pytest.mark.skipif(linescan._compiled is None, reason="built without a C compiler")
@pytest.mark.parametrize("seed", range(3))
def test_compiled_match_is_the_numpy_match(seed: int) -> None:
    """The compiled template run (_linescan.c) gives what the numpy one (the definition)
    gives — every capture with its dtype, NaN where absent, every cursor, Unusual alike —
    for every template of the three bulk readers, started at every place of fuzzed lines of
    every engine, one line at a time and many at once."""
    rng = random.Random(seed)
    makers = [lambda: _sglang(rng), lambda: _stats(rng), lambda: _spec(rng, rng.choice((1, 3, 5)))]
    makers += [lambda kind=kind: _llama(rng, kind) for kind in sorted(_LL)]
    templates = _all_templates()
    lines = []
    for n in range(240):
        line = rng.choice(makers)()
        if n % 2:
            line = _mutate(rng, line)
        lines.append(line.encode())

    def both(buf: np.ndarray, at: np.ndarray, end: int, t: Template) -> tuple[object, object]:
        got = []
        for run in (linescan.match_numpy, linescan.match_compiled):
            try:
                got.append(run(buf, at, end, t, cursor="c"))
            except Unusual:
                got.append("unusual")
        return got[0], got[1]

    keys = (bulk_sglang._KEY, bulk_vllm._STATS_KEY, bulk_vllm._SPEC_KEY)

    def places(block: bytes) -> list[int]:
        """Where a template may start: the line's start, after each space (every llama.cpp
        template), after the vLLM and SGLang keywords, and a few places anywhere."""
        out = {1, *(i + 1 for i, ch in enumerate(block[:-2]) if ch == 32)}
        out |= {block.find(k) + len(k) for k in keys if block.find(k) >= 0}
        out |= {rng.randrange(1, len(block) - 1) for _ in range(4)}
        return sorted(out)

    agreed, matched = 0, {}
    for line in lines:
        block = b"\n" + line + b"\n"
        buf = np.frombuffer(block, np.uint8)
        for name, t in templates:
            for at in places(block):
                a, b = both(buf, np.array([at]), len(block), t)
                assert _same(a, b), (name, at, line, a, b)
                agreed += 1
                if not isinstance(a, str):
                    matched[name] = matched.get(name, 0) + 1
    # many lines at once: the lines one template takes, then one that it refuses among them
    for name, t in templates:
        block = b"\n" + b"\n".join(lines) + b"\n"
        buf = np.frombuffer(block, np.uint8)
        starts = [i + 1 for i, ch in enumerate(block[:-1]) if ch == 10]
        ok = [s for s in starts if not isinstance(both(buf, np.array([s]), len(block), t)[0], str)]
        # the stamp template matches from the line start; the others start past a keyword:
        # try every start of every line and the 30th byte of each
        ok += [s + 30 for s in starts if s + 30 < len(block) and not isinstance(
            both(buf, np.array([s + 30]), len(block), t)[0], str)]
        if ok:
            a, b = both(buf, np.array(ok), len(block), t)
            assert not isinstance(a, str) and _same(a, b), name
            bad = np.array([*ok[:3], starts[0] + 1, *ok[3:]])
            a, b = both(buf, bad, len(block), t)
            assert _same(a, b), name
    few = [(name, matched.get(name, 0)) for name, _ in templates if matched.get(name, 0) < 2]
    assert agreed > 10_000 and not few, few


@pytest.mark.skipif(linescan._compiled is None, reason="built without a C compiler")
def test_compiled_module_refuses_what_it_cannot_run() -> None:
    """Found by review: a start past the buffer (2**63 - 1 overflowed a bound and crashed),
    a malformed program, a count past 2**53: a ValueError, never a crash."""
    from decodescope.telemetry.logs import _linescan

    block = b"\nabc 12\n" * 4
    buf = np.frombuffer(block, np.uint8)
    t = ((b"lit", b"abc"), (b"sp", None), (b"int", "n"))
    for start in (2 ** 63 - 1, 2 ** 62, len(block) + 1, -1):
        with pytest.raises(ValueError):
            linescan.match_compiled(buf, np.array([start]), len(block), t)
    assert linescan.match_compiled(buf, np.array([1, 9]), len(block), t)["n"].tolist() == \
        [12.0, 12.0]
    prog = linescan._program(t)
    caps, cur = np.full((1, 1), np.nan), np.empty(1, np.int64)
    for ops in ([1], [1, 0, 10 ** 6], [2, -1], [2, 2 ** 62], [12, 0, 3, 10 ** 9], [99]):
        with pytest.raises(ValueError):
            _linescan.run(block, len(block), np.array([1]), np.array(ops, np.int64),
                          prog.const_bytes, caps, cur)
    # a captures' buffer too small for the lines is never written past (nor at all here)
    assert _linescan.run(block, len(block), np.array([1, 9, 17, 25]), prog.ops,
                         prog.const_bytes, caps, np.empty(4, np.int64)) is None
    assert np.isnan(caps).all()
    for n in (-1, 2 ** 60):
        with pytest.raises(ValueError):
            _linescan.welford(np.ones(3), n, 0.0, 0.0)


def test_a_module_built_from_other_sources_is_left_unused() -> None:
    """An editable install whose C file changed but was not rebuilt: the old module (another
    API number, or none) is not called; numpy reads, and doctor can say why."""
    import types

    assert linescan.usable(None) == (None, False)
    old = types.SimpleNamespace(run=lambda *a: None)  # no API constant: before API existed
    assert linescan.usable(old) == (None, True)
    assert linescan.usable(types.SimpleNamespace(API=linescan.API + 1)) == (None, True)
    good = types.SimpleNamespace(API=linescan.API)
    assert linescan.usable(good) == (good, False)
