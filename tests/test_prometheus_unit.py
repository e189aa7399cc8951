"""Prometheus parsing, window deltas, counter resets and DP aggregation on scripted text."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from decodescope.records.window import EngineWindow
from decodescope.run.observers import PrometheusObserver
from decodescope.telemetry.prometheus import (
    Scrape,
    count_resets,
    interval_windows,
    is_reset,
    parse_metrics,
    relevant_lines,
    trial_windows,
    window_between,
    windows_from_scrapes,
)


def vllm_text(gen: float, drafts: float, dtok: float, acc: float, per_pos: tuple[float, ...],
              running: float = 1, waiting: float = 0, engines: int = 1, created: float = 1e9,
              steps: float = 0) -> str:
    """vLLM V1 exposition (prometheus_client style: _total + _created), split over DP engines."""
    lines = []

    def counter(name: str, value: float, extra: str = "") -> None:
        lines.append(f"# TYPE {name} counter")
        for e in range(engines):
            lab = f'engine="{e}",model_name="m"{extra}'
            lines.append(f"{name}_total{{{lab}}} {value / engines}")
            lines.append(f"{name}_created{{{lab}}} {created}")

    for name, v in (("vllm:generation_tokens", gen), ("vllm:prompt_tokens", 1000.0),
                    ("vllm:spec_decode_num_drafts", drafts),
                    ("vllm:spec_decode_num_draft_tokens", dtok),
                    ("vllm:spec_decode_num_accepted_tokens", acc)):
        counter(name, v)
    lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter")
    for e in range(engines):
        for i, v in enumerate(per_pos):
            lines.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="{e}",'
                         f'model_name="m",position="{i}"}} {v / engines}')
    for name, v in (("vllm:num_requests_running", running), ("vllm:num_requests_waiting", waiting)):
        lines.append(f"# TYPE {name} gauge")
        for e in range(engines):
            lines.append(f'{name}{{engine="{e}",model_name="m"}} {v / engines}')
    lines.append("# TYPE vllm:iteration_tokens_total histogram")
    lines.append(f'vllm:iteration_tokens_total_bucket{{le="+Inf"}} {steps}')
    lines.append(f"vllm:iteration_tokens_total_count {steps}")
    lines.append(f"vllm:iteration_tokens_total_sum {steps * 3}")
    return "\n".join(lines) + "\n"


LLAMACPP = """# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total {gen}
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total {sec}
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1181
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total {ndec}
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total {dtok}
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total {acc}
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total {drafts}
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing {running}
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="0"}} {p0}
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="1"}} {p1}
"""


def llama(gen: float = 0, sec: float = 0, ndec: float = 0, dtok: float = 0, acc: float = 0,
          drafts: float = 0, running: float = 0, p0: float = 0, p1: float = 0) -> str:
    return LLAMACPP.format(gen=gen, sec=sec, ndec=ndec, dtok=dtok, acc=acc, drafts=drafts,
                           running=running, p0=p0, p1=p1)


def test_parse_vllm_sums_engines_and_ignores_created() -> None:
    s = parse_metrics(vllm_text(100, 20, 80, 50, (20, 15, 10, 5), running=4, engines=4,
                                steps=25), 1.0, 1000.0)
    assert s.prefix == "vllm" and s.error is None
    assert s.counters["generation_tokens"] == pytest.approx(100)
    assert s.counters["drafts"] == pytest.approx(20)
    assert s.counters["batch_steps"] == 25
    assert s.per_pos == pytest.approx((20, 15, 10, 5))
    assert s.gauges == {"running": pytest.approx(4), "waiting": 0}
    assert s.created_s == 1e9  # witnessed, never summed into a count
    assert all(v < 1e8 for v in s.counters.values())


def test_parse_llamacpp_names() -> None:
    s = parse_metrics(llama(gen=384, sec=5.0, ndec=64, dtok=461, acc=323, drafts=58, running=1,
                            p0=50, p1=40), 0.0, 0.0)
    assert s.prefix == "llamacpp"
    assert s.counters == {"generation_tokens": 384, "prompt_tokens": 1181, "decode_s": 5.0,
                          "drafts": 58, "draft_tokens": 461, "accepted_tokens": 323,
                          "batch_steps": 64}
    assert s.per_pos == (50, 40)
    assert s.gauges["running"] == 1


def test_parse_garbage_and_unknown_text() -> None:
    bad = parse_metrics("vllm:generation_tokens_total{ 1 2 3\n", 0.0, 0.0)
    assert bad.prefix is None and bad.error and "unparsable" in bad.error
    other = parse_metrics("# TYPE foo counter\nfoo_total 3\n", 0.0, 0.0)
    assert other.prefix is None and other.error is None


def test_window_deltas_and_derived_numbers() -> None:
    a = parse_metrics(vllm_text(1000, 200, 800, 500, (200, 150, 100, 50), running=2), 10.0, 100.0)
    b = parse_metrics(vllm_text(1400, 300, 1200, 600, (260, 190, 110, 40 + 50)),  # +100 drafts
                      12.0, 102.0)
    w = window_between(a, b, "vllm")
    assert (w.t_start_s, w.t_end_s) == (100.0, 102.0)
    assert w.generation_tokens == 400 and w.drafts == 100 and w.draft_tokens == 400
    assert w.accepted_tokens == 100
    assert w.mal == pytest.approx(1 + 100 / 100)
    assert w.accepted_per_pos == (60, 40, 10, 40)
    assert w.running == pytest.approx(1.5)  # mean of the gauges at both ends
    assert w.decode_rate == pytest.approx(200.0)
    assert w.step_rate == pytest.approx(100 / 2 / 1.5)  # drafts / s / running


def test_counter_reset_flags_the_interval_and_carries_no_counts() -> None:
    texts = [vllm_text(1000, 200, 800, 500, (200, 150, 100, 50)),
             vllm_text(1400, 300, 1200, 600, (260, 190, 110, 60)),
             vllm_text(50, 10, 40, 20, (10, 5, 3, 2), created=2e9),  # restarted: counters low
             vllm_text(450, 110, 440, 220, (80, 60, 50, 30), created=2e9)]
    scrapes = [parse_metrics(t, float(i), 100.0 + i) for i, t in enumerate(texts)]
    ws = interval_windows(scrapes, "vllm")
    assert [w.flags for w in ws] == [(), ("reset",), ()]
    assert ws[1].generation_tokens is None and ws[1].drafts is None and ws[1].decode_rate is None
    assert ws[2].generation_tokens == 400 and ws[2].mal == pytest.approx(1 + 200 / 100)
    for w in ws:
        for v in (w.generation_tokens, w.drafts, w.accepted_tokens, w.draft_tokens):
            assert v is None or v >= 0
    assert count_resets(scrapes) == 1


def test_restart_that_overtakes_old_counters_is_caught_by_created_time() -> None:
    a = parse_metrics(vllm_text(100, 20, 80, 50, (20, 15, 10, 5)), 0.0, 100.0)
    b = parse_metrics(vllm_text(5000, 900, 3600, 2000, (900, 600, 400, 100), created=2e9),
                      1.0, 101.0)  # every counter grew, yet it is a new process
    assert is_reset(a, b)
    assert window_between(a, b, "vllm").flags == ("reset",)


def test_per_position_counter_going_back_is_a_reset() -> None:
    a = Scrape(0.0, 0.0, "vllm", {"drafts": 10.0}, per_pos=(5.0, 3.0))
    b = Scrape(1.0, 1.0, "vllm", {"drafts": 12.0}, per_pos=(4.0, 3.0))
    assert is_reset(a, b)


def test_failed_scrape_joins_its_neighbours_and_loses_no_count() -> None:
    """A scrape that failed mid-run (a timeout under load) must not drop the tokens around it:
    the good scrapes on each side bracket them. Only failures with no good scrape beyond them
    (at the very start or end) leave gaps without counts."""
    a = parse_metrics(vllm_text(100, 20, 80, 50, (20, 15, 10, 5)), 0.0, 100.0)
    bad = Scrape(1.0, 101.0, None, error="HTTP 503")
    bad2 = Scrape(1.5, 101.5, None, error="timed out")
    c = parse_metrics(vllm_text(300, 60, 240, 150, (60, 45, 30, 15)), 2.0, 102.0)
    d = parse_metrics(vllm_text(500, 90, 400, 250, (90, 70, 40, 20)), 3.0, 103.0)
    ws = interval_windows([a, bad, bad2, c, d], "vllm")
    assert [w.flags for w in ws] == [("joined",), ()]
    assert (ws[0].t_start_s, ws[0].t_end_s) == (100.0, 102.0)
    whole = window_between(a, d, "vllm")
    for key in ("generation_tokens", "drafts", "accepted_tokens", "draft_tokens"):
        assert sum(getattr(w, key) for w in ws) == getattr(whole, key), key
    assert tuple(map(sum, zip(*(w.accepted_per_pos for w in ws), strict=True))) == \
        whole.accepted_per_pos
    # failures at the ends: nothing brackets them
    ws = interval_windows([Scrape(-1.0, 99.0, None, error="HTTP 503"), a, c,
                           Scrape(2.5, 102.5, None, error="HTTP 503")], "vllm")
    assert [w.flags for w in ws] == [("gap",), (), ("gap",)]
    assert ws[0].generation_tokens is None and ws[2].generation_tokens is None
    assert ws[1].generation_tokens == 200
    # every scrape failed: gaps only
    ws = interval_windows([bad, bad2], "vllm")
    assert [w.flags for w in ws] == [("gap",)]


def test_a_restart_behind_a_failed_scrape_is_still_a_reset() -> None:
    a = parse_metrics(vllm_text(1000, 200, 800, 500, (200, 150, 100, 50)), 0.0, 100.0)
    bad = Scrape(1.0, 101.0, None, error="connection refused")
    c = parse_metrics(vllm_text(5000, 900, 3600, 2000, (900, 600, 400, 100), created=2e9),
                      2.0, 102.0)
    ws = interval_windows([a, bad, c], "vllm")
    assert len(ws) == 1 and "reset" in ws[0].flags and ws[0].generation_tokens is None


def test_llamacpp_gets_whole_trial_windows() -> None:
    """Counters move when a request finishes: only trial_start -> trial_end means anything."""
    scr = [parse_metrics(llama(), 0.0, 100.0, "start"),
           parse_metrics(llama(), 0.1, 100.1, "trial_start:0"),
           parse_metrics(llama(running=1), 1.1, 101.1),
           parse_metrics(llama(running=1), 2.1, 102.1),
           parse_metrics(llama(gen=384, sec=5.12, ndec=64, dtok=461, acc=323, drafts=58,
                               p0=50, p1=40), 6.0, 106.0, "trial_end:0")]
    ws = windows_from_scrapes(scr, "llamacpp")
    assert len(ws) == 1
    w = ws[0]
    assert w.flags == ("trial",)
    assert (w.t_start_s, w.t_end_s) == (100.1, 106.0)
    assert w.running == 1.0  # interior gauges, not the idle ends
    assert w.mal == pytest.approx(1 + 323 / 58)
    assert w.printed["decode_s"] == pytest.approx(5.12)
    assert w.printed["batch_steps"] == 64
    assert w.accepted_per_pos == (50, 40)


def test_trial_window_with_a_restart_inside_is_reset() -> None:
    scr = [parse_metrics(llama(gen=1000, drafts=100, acc=300), 0.0, 0.0, "trial_start:0"),
           parse_metrics(llama(gen=10, drafts=1, acc=3), 1.0, 1.0),
           parse_metrics(llama(gen=1400, drafts=160, acc=500), 2.0, 2.0, "trial_end:0")]
    (w,) = trial_windows(scr, "llamacpp")
    assert "reset" in w.flags and w.generation_tokens is None


def _one_trial(handler: Any, during: Any) -> Any:
    """An observer of a vLLM whose /metrics is `handler`, over one trial (`during` runs
    between its marks); its result. The scrape thread waits 60 s: only boundaries scrape."""
    clock = iter(range(1000))
    ob = PrometheusObserver("http://engine", "vllm", interval_s=60.0, in_flight=1,
                            transport=httpx.MockTransport(handler),
                            clock=lambda: float(next(clock)), wall=lambda: 1e9)
    ob.start()
    ob.mark("trial_start:0", 0.0)
    during()
    ob.mark("trial_end:0", 0.0)
    return ob.stop()


def test_observer_scrapes_at_marks_and_in_thread() -> None:
    state = {"gen": 0.0, "drafts": 0.0, "acc": 0.0, "n": 0}

    def handler(req: httpx.Request) -> httpx.Response:
        state["n"] += 1
        return httpx.Response(200, text=vllm_text(state["gen"], state["drafts"],
                                                  state["drafts"] * 4, state["acc"],
                                                  (state["acc"], 0, 0, 0)))

    res = _one_trial(handler, lambda: state.update(gen=300.0, drafts=100.0, acc=200.0))
    scrapes = res.series["prometheus"]["scrapes"]
    assert [s["mark"] for s in scrapes] == ["start", "trial_start:0", "trial_end:0", "stop"]
    assert state["n"] == 4
    mals = [w.mal for w in res.windows if w.generation_tokens]
    assert mals == [pytest.approx(3.0)]
    assert not res.findings


def test_a_boundary_scrape_lost_in_transit_is_tried_once_more() -> None:
    """Under load a scrape at a trial boundary can time out; the windows hang on it, so it is
    tried again at once. A server that keeps failing is not waited on twice per boundary."""
    state = {"gen": 0.0, "n": 0, "fail": set()}

    def handler(req: httpx.Request) -> httpx.Response:
        state["n"] += 1  # type: ignore[operator]
        if state["n"] in state["fail"]:  # type: ignore[operator]
            raise httpx.ReadTimeout("timed out", request=req)
        g = float(state["gen"])  # type: ignore[arg-type]
        return httpx.Response(200, text=vllm_text(g, g / 3, g, g / 2, (g / 2, 0, 0, 0)))

    def run(fail: set[int]) -> tuple[list[str | None], list[EngineWindow], int]:
        state.update(gen=0.0, n=0, fail=fail)
        res = _one_trial(handler, lambda: state.update(gen=300.0))
        marks = [s["mark"] for s in res.series["prometheus"]["scrapes"]]
        return marks, res.windows, int(state["n"])  # type: ignore[call-overload]

    marks, ws, n = run({3})  # trial_end's first try timed out
    assert marks == ["start", "trial_start:0", "trial_end:0", "trial_end:0", "stop"] and n == 5
    assert sum(w.generation_tokens or 0 for w in ws) == 300
    marks, ws, n = run({1})  # so did the very first scrape
    assert marks[:2] == ["start", "start"] and n == 5
    assert sum(w.generation_tokens or 0 for w in ws) == 300
    # failing from trial_start on: one try per boundary after the first failure
    marks, ws, n = run({2, 3, 4, 5, 6, 7, 8})
    assert marks == ["start", "trial_start:0", "trial_start:0", "trial_end:0", "stop"]
    assert n == 5 and not any(w.generation_tokens for w in ws)


def test_observer_without_metrics_says_so_once() -> None:
    calls = []

    def handler(req: httpx.Request) -> httpx.Response:
        calls.append(req.url.path)
        return httpx.Response(404, text="not found")

    ob = PrometheusObserver("http://engine", "sglang", transport=httpx.MockTransport(handler))
    ob.start()
    ob.mark("trial_start:0", 0.0)
    ob.mark("trial_end:0", 0.0)
    res = ob.stop()
    assert calls == ["/metrics"]  # no thread, no boundary scrapes after a 404
    assert [f.code for f in res.findings] == ["telemetry.no_metrics"]
    assert res.windows == []


def test_only_relevant_lines_are_parsed() -> None:
    noise = "".join(f'vllm:e2e_request_latency_seconds_bucket{{le="{i}"}} {i}\n' for i in range(500))
    text = vllm_text(100, 20, 80, 50, (20, 15, 10, 5), steps=7)
    assert relevant_lines(noise) == "\n"
    kept = relevant_lines(noise + text)
    assert "e2e_request_latency" not in kept and "# TYPE" not in kept
    assert parse_metrics(noise + text, 0.0, 0.0) == parse_metrics(text, 0.0, 0.0)
