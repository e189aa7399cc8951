"""Prometheus history as a side: selectors, the bounded reader, the point bound."""

from __future__ import annotations

import http.server
import io
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from decodescope.cli.main import main
from decodescope.cli.prom import full_selector
from decodescope.errors import ResponseTooLargeError, UsageError
from decodescope.telemetry.prom_history import (
    MAX_POINTS,
    PromClient,
    is_prom_selector,
    parse_duration,
    parse_selector,
    read_bounded,
    resolve_range,
)
from decodescope.verdict.side_resolve import is_log_selector


def test_full_selector_with_server_matchers_step_and_range():
    s = parse_selector("prom+http://prom.example:9090/?job=vllm&instance=gpu-a:8000"
                       "&engine=~0|1&model_name=!x&step=15s@2026-11-29T23:00..23:30")
    assert s.server == "http://prom.example:9090"
    assert s.matchers == (("job", "=", "vllm"), ("instance", "=", "gpu-a:8000"),
                          ("engine", "=~", "0|1"), ("model_name", "!=", "x"))
    assert s.step_s == 15.0 and s.start == "2026-11-29T23:00" and s.end == "23:30"
    assert s.promql() == 'job="vllm",instance="gpu-a:8000",engine=~"0|1",model_name!="x"'
    # triage needs no run store for it, as for a log window
    assert is_prom_selector("prom:?job=vllm@23:00..23:30")
    assert is_log_selector("prom+http://h:9090/?job=vllm@23:00..23:30")


def test_short_form_takes_the_default_server_or_says_it_is_missing(monkeypatch):
    monkeypatch.delenv("DECODESCOPE_PROMETHEUS", raising=False)
    s = parse_selector("prom:?job=vllm@23:00..23:30", default_server="http://p:9090/")
    assert s.server == "http://p:9090" and s.matchers == (("job", "=", "vllm"),)
    with pytest.raises(UsageError, match="names no Prometheus server"):
        parse_selector("prom:?job=vllm@23:00..23:30")
    monkeypatch.setenv("DECODESCOPE_PROMETHEUS", "http://q:9090")
    assert parse_selector("prom:?job=vllm@23:00..23:30").server == "http://q:9090"


@pytest.mark.parametrize("bad, match", [
    ("prom+http://h:9090/?job=vllm", "no time range"),
    ("prom+ftp://h/?job=vllm@1..2", "not an http"),
    ("prom+http://user:secret@h:9090/?job=vllm@23:00..23:30", "user info"),
    ("prom+http://h:9090/?1x=y@23:00..23:30", "not a label name"),
    ("prom+http://h:9090/?step=fast@23:00..23:30", "not a duration"),
])
def test_bad_selectors_are_usage_errors(bad: str, match: str):
    with pytest.raises(UsageError, match=match) as e:
        parse_selector(bad)
    assert "secret" not in e.value.one_line()


def test_durations_and_ranges():
    assert parse_duration("1m") == 60.0 and parse_duration("500ms") == 0.5
    assert parse_duration("30") == 30.0
    s = parse_selector("prom+http://h:9090/?job=v@1796190000..1796191800")
    assert resolve_range(s) == (1796190000.0, 1796191800.0)
    with pytest.raises(UsageError, match="ends before it starts"):
        resolve_range(parse_selector("prom+http://h:9090/?job=v@1796191800..1796190000"))


def test_cli_selector_forms():
    assert full_selector("job=vllm", "23:00", "23:30") == "prom:?job=vllm@23:00..23:30"
    assert full_selector("http://h:9090/?job=v", "23:00", None) == "prom+http://h:9090/?job=v@23:00.."
    with pytest.raises(UsageError, match="has a range and"):
        full_selector("job=v@1..2", "23:00", None)
    with pytest.raises(UsageError, match="no time range"):
        full_selector("job=v", None, None)


def test_bounded_reader_refuses_a_large_body():
    assert read_bounded(io.BytesIO(b"x" * 100), limit=100) == b"x" * 100
    with pytest.raises(ResponseTooLargeError):
        read_bounded(io.BytesIO(b"x" * 101), limit=100)


def test_too_many_points_are_refused_before_anything_is_sent():
    client = PromClient("http://127.0.0.1:9")  # nothing listens: a request would fail
    with pytest.raises(UsageError, match="points"):
        client.query_range("up", 0.0, float(MAX_POINTS) * 10, 1.0)
    assert client.queries == 0


@contextmanager
def endless_server() -> Iterator[str]:
    """Answers every GET with a JSON body that never ends."""

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            try:
                self.wfile.write(b'{"status":"success","data":[')
                while True:
                    self.wfile.write(b'"x",' * 4096)
            except OSError:
                pass

        def log_message(self, *a: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_an_endless_body_is_cut_with_a_clear_error(capsys):
    with endless_server() as url:
        client = PromClient(url, max_body=1 << 20)
        with pytest.raises(ResponseTooLargeError, match="larger than 1 MiB"):
            client.names("", 0.0, 1.0)
        code = main(["prom", f"{url}/?job=vllm", "--since", "1796190000",
                     "--until", "1796190600"])
    assert code == 5  # a protocol error (the body passed its limit), never a traceback
    assert "larger than 32 MiB" in capsys.readouterr().err


def test_unreachable_server_is_exit_4(capsys):
    code = main(["prom", "http://127.0.0.1:9/?job=vllm", "--since", "1796190000",
                 "--until", "1796190600"])
    assert code == 4
    assert "cannot reach Prometheus" in capsys.readouterr().err


class FakeProm:
    """Answers read_windows' queries from per-series sample lists, the way Prometheus does:
    the newest sample at or before each step point (within the 5-minute lookback)."""

    def __init__(self, samples: dict[str, dict[str, list[tuple[float, float]]]]):
        self.samples = samples  # metric -> series label ("engine=0") -> [(t, value)]
        self.queries = 0

    def names(self, m: str, start: float, end: float) -> list[str]:
        return list(self.samples)

    def series(self, expr: str, start: float, end: float) -> list[dict[str, str]]:
        name = expr.split("{")[0]
        return [dict([kv.split("=")]) | {"model_name": "m"} for kv in self.samples.get(name, {})]

    def get(self, path: str, params: object) -> list[str]:
        return []

    def _at(self, pts: list[tuple[float, float]], t: float) -> tuple[float, float] | None:
        before = [p for p in pts if p[0] <= t and t - p[0] <= 300]
        return before[-1] if before else None

    def query_range(self, expr: str, start: float, end: float, step: float, n_series: int = 1):
        self.queries += 1
        fn, _, rest = expr.partition("(")
        if not rest:
            fn, rest = "", expr
        name = rest.split("{")[0]
        out = {}
        for label, pts in self.samples.get(name, {}).items():
            key = (tuple(sorted([tuple(label.split("=")), ("job", "vllm")])))
            vals = {}
            t = start
            while t <= end + 1e-9:
                tr = round(t, 3)
                inside = [p for p in pts if tr - step < p[0] <= tr]
                if fn == "resets":
                    pairs = zip(inside, inside[1:], strict=False)
                    vals[tr] = float(sum(1 for a, b in pairs if b[1] < a[1]))
                elif fn == "count_over_time":
                    if inside:
                        vals[tr] = float(len(inside))
                elif fn == "avg_over_time":
                    if inside:
                        vals[tr] = sum(v for _, v in inside) / len(inside)
                else:
                    p = self._at(pts, tr)
                    if p is not None:
                        vals[tr] = p[0] if fn == "timestamp" else p[1]
                t += step
            out[key] = vals
        return out


def _counter(t0: float, n: int, rate: float, *, reset_at: float | None = None,
             gap: tuple[float, float] | None = None) -> list[tuple[float, float]]:
    pts, v = [], 1000.0
    for i in range(n):
        t = t0 + i * 1.0
        if gap and gap[0] <= t < gap[1]:
            v += rate
            continue
        v += rate
        if reset_at is not None and abs(t - reset_at) < 0.5:
            v = rate
        pts.append((t, v))
    return pts


def test_windows_sum_series_and_flag_a_reset_and_a_gap():
    from decodescope.telemetry.prom_history import read_windows

    t0 = 1_796_190_000.0
    gen = {"engine=0": _counter(t0, 80, 100.0, reset_at=t0 + 33),
           "engine=1": _counter(t0, 80, 100.0, gap=(t0 + 50, t0 + 58))}
    fake = FakeProm({"vllm:generation_tokens_total": gen,
                     "vllm:num_requests_running": {k: [(t, 1.0) for t in
                                                       [p[0] for p in v]] for k, v in gen.items()}})
    sel = parse_selector(f"prom+http://h:9090/?job=vllm&step=5s@{t0 + 10:.0f}..{t0 + 75:.0f}")
    read = read_windows(sel, client=fake)  # type: ignore[arg-type]
    notes = " ".join(read.notes)
    assert "2 series summed" in notes and "engine=0; engine=1" in notes
    assert "speculative decoding off" in notes and read.spec["off"] is True
    flags = [w.flags for w in read.windows]
    assert ("reset",) in flags and (("gap",) in flags or ("stale",) in flags)
    clean = [w for w in read.windows if not w.flags]
    # both series summed: 2 × 100 tokens per second over the exact sample-to-sample time
    assert clean and all(w.generation_tokens / w.duration_s == pytest.approx(200.0)
                         for w in clean)
    assert all(w.running == pytest.approx(2.0) for w in clean)
    assert all(w.generation_tokens is None for w in read.windows if w.flags)


def test_a_range_without_samples_is_bad_input_not_a_crash():
    from decodescope.telemetry.prom_history import read_windows

    t0 = 1_796_190_000.0
    fake = FakeProm({"vllm:generation_tokens_total": {"engine=0": [(t0 - 9000.0, 5.0)]}})
    sel = parse_selector(f"prom+http://h:9090/?job=vllm&step=5s@{t0:.0f}..{t0 + 60:.0f}")
    with pytest.raises(UsageError, match="no vllm:generation_tokens_total samples"):
        read_windows(sel, client=fake)  # type: ignore[arg-type]


def test_llamacpp_names_are_read_and_finish_time_counting_is_said():
    from decodescope.telemetry.prom_history import read_windows

    t0 = 1_796_190_000.0
    pts = [(t0 + i, 10.0 * i) for i in range(60)]
    fake = FakeProm({"llamacpp:tokens_predicted_total": {"instance=a": pts},
                     "llamacpp:n_decode_total": {"instance=a": [(t, v / 2) for t, v in pts]},
                     "llamacpp:requests_processing": {"instance=a": [(t, 1.0) for t, _ in pts]}})
    sel = parse_selector(f"prom+http://h:9090/?job=llama&step=5s@{t0 + 10:.0f}..{t0 + 50:.0f}")
    read = read_windows(sel, client=fake)  # type: ignore[arg-type]
    assert read.engine == "llamacpp" and read.spec["off"] is False
    assert any("when a request finishes" in n for n in read.notes)
    w = read.windows[1]
    assert w.generation_tokens == 50 and w.printed["batch_steps"] == 25 and w.running == 1.0
