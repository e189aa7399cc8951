"""`decodescope exporter`: config, samples, staleness and errors (a scripted runner and clock)."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from decodescope.cli.main import main
from decodescope.errors import UsageError
from decodescope.exporter import Exporter, Outcome, parse_config, run_check
from decodescope.exporter.config import CheckSpec, load_config

CFG = {"exporter": {"listen": "127.0.0.1:0"},
       "check": [{"name": "a", "baseline": "anchor", "url": "http://127.0.0.1:9", "every_s": 10}]}


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def good(t: float) -> Outcome:
    return Outcome(t, 2.0, verdict="BELOW_FLOOR", exit_code=1, decode_rate=80.0, source="client",
                   mal=2.5, step_rate=32.0, floor=90.0, band_lo=95.0, band_hi=105.0)


def test_numbers_are_served_while_fresh_and_dropped_when_stale():
    clock = Clock()
    exp = Exporter(parse_config(CFG), runner=lambda spec, store: good(clock.t), clock=clock)
    exp.run_once()
    s = samples(exp.metrics_text())
    assert s["decodescope_check_decode_rate_tokens_per_second"] == [
        ({"check": "a", "baseline": "anchor", "url": "http://127.0.0.1:9", "source": "client"},
         80.0)]
    assert s["decodescope_check_band_floor_tokens_per_second"][0][1] == 90.0
    assert s["decodescope_check_band_ceiling_tokens_per_second"][0][1] == 105.0
    assert s["decodescope_check_mal"][0][1] == 2.5
    assert s["decodescope_check_step_rate_per_second"][0][1] == 32.0
    assert s["decodescope_check_verdict"][0][0]["verdict"] == "BELOW_FLOOR"
    assert s["decodescope_check_exit_code"][0][1] == 1.0
    assert s["decodescope_check_stale"][0][1] == 0.0
    assert s["decodescope_check_runs_total"][0][0]["exit_code"] == "1"
    clock.t += 20.0  # exactly 2 schedules: still fresh
    assert samples(exp.metrics_text())["decodescope_check_stale"][0][1] == 0.0
    clock.t += 0.5
    s = samples(exp.metrics_text())
    assert s["decodescope_check_stale"][0][1] == 1.0
    for gone in ("decodescope_check_decode_rate_tokens_per_second", "decodescope_check_mal",
                 "decodescope_check_verdict", "decodescope_check_exit_code"):
        assert gone not in s, gone
    assert s["decodescope_check_last_success_timestamp_seconds"][0][1] == 1_000_000.0
    assert s["decodescope_check_result_age_seconds"][0][1] == 20.5


def test_errors_are_counted_never_raised():
    clock = Clock()
    calls = iter([good(clock.t), Outcome(clock.t, 0.1, error_kind="ProbeError", error="refused")])
    exp = Exporter(parse_config(CFG), runner=lambda spec, store: next(calls), clock=clock)
    exp.run_once()
    exp.run_once()
    s = samples(exp.metrics_text())
    assert s["decodescope_check_probe_errors_total"] == [
        ({"check": "a", "baseline": "anchor", "url": "http://127.0.0.1:9", "kind": "ProbeError"},
         1.0)]
    assert s["decodescope_check_last_run_ok"][0][1] == 0.0
    assert s["decodescope_check_exit_code"][0][1] == 1.0  # the last success, still fresh


def test_a_check_that_cannot_run_is_an_outcome(tmp_path: Path):
    spec = CheckSpec(name="a", baseline="nope", url="http://127.0.0.1:9", every_s=10)
    o = run_check(spec, str(tmp_path / "s.sqlite"))
    assert not o.ok and o.error_kind and "nope" in (o.error or "")
    assert o.verdict is None and o.decode_rate is None


def test_never_run_is_stale_without_numbers():
    exp = Exporter(parse_config(CFG), runner=lambda spec, store: good(0.0), clock=Clock())
    s = samples(exp.metrics_text())
    assert s["decodescope_check_stale"][0][1] == 1.0
    assert "decodescope_check_exit_code" not in s


@pytest.mark.parametrize("bad, msg", [
    ({"check": []}, "no [[check]]"),
    ({"check": [{"name": "a", "url": "http://x"}]}, "missing baseline"),
    ({"check": [{"name": "a", "baseline": "b", "url": "http://h", "every": 3}]}, "unknown key"),
    ({"check": [{"name": "a", "baseline": "b", "url": "http://h", "every_s": 0}]}, "every_s"),
    ({"check": [{"name": "a", "baseline": "b", "url": "http://h"}] * 2}, "unique"),
    ({"exporter": {"listen": "nowhere"},
      "check": [{"name": "a", "baseline": "b", "url": "http://h"}]}, "listen"),
])
def test_config_errors_say_what_and_how(bad, msg):
    with pytest.raises(UsageError) as e:
        parse_config(bad)
    assert msg in e.value.one_line()


def test_cli_bad_config_is_exit_2_without_traceback(tmp_path: Path, capsys):
    p = tmp_path / "fleet.toml"
    p.write_text("[[check]]\nname = 'a'\n")
    assert main(["exporter", "--config", str(p)]) == 2
    err = capsys.readouterr().err
    assert "missing baseline, url" in err and "Traceback" not in err
    assert main(["exporter", "--config", str(tmp_path / "none.toml")]) == 2


def test_example_config_loads():
    cfg = load_config(str(Path(__file__).parent.parent / "deploy" / "fleet.toml"))
    assert [c.name for c in cfg.checks] == ["gpu-a", "gpu-b"]
    assert cfg.checks[1].labels == (("team", "inference"),)
