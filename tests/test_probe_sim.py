"""The probe against the simulator, whose ground truth is known (integration tests)."""

import json
from dataclasses import replace

import pytest

from decodescope.caliber.resolve import resolve
from decodescope.cli.main import main
from decodescope.errors import StreamClosedError, UnreachableError
from decodescope.exitcodes import ExitCode
from decodescope.records.request_metrics import compute
from decodescope.run.runner import ProbeSettings, run_probe
from decodescope.sim import FaultSpec, SimConfig, SimServer
from decodescope.store import runs as sr
from decodescope.store.connect import open_store

ACCURACY = 0.005  # the target: client decode rate within 0.5% of the truth at c1


def truth_steady_rate(truth, start):
    cum, anchor = 0, None
    for i, (_, n) in enumerate(truth.emits):
        cum += n
        if cum >= max(start, 1):
            anchor = i
            break
    t_a = truth.emits[anchor][0]
    t_b = truth.emits[-1][0]
    return sum(n for _, n in truth.emits[anchor + 1:]) / (t_b - t_a)


@pytest.fixture()
def store(tmp_path):
    with open_store(tmp_path / "runs.sqlite") as st:
        yield st


def thinking_code_caliber():
    c = resolve("demo-code-rewrite")
    return replace(c, thinking=True, output=replace(c.output, max_tokens=480, min_tokens=480))


def test_decode_rate_matches_truth_with_multi_token_chunks_and_thinking(store):
    cal = thinking_code_caliber()
    with SimServer(SimConfig(seed=3, reasoning_tokens=160)).start_in_thread() as sim:
        out = run_probe(ProbeSettings(sim.url, cal, trials=2), store)
        run = sr.get_run(store, out.run_id)
        assert run.simulated and run.status == "complete"
        for trial in run.trials:
            for tr in trial.requests:
                truth = sim.truth[tr.request_id]
                m = compute(tr, cal.output.steady_state_start)
                assert truth.mal >= 3
                assert m.mean_tokens_per_chunk > 2  # multi-token chunks
                assert m.reasoning_tokens == truth.reasoning_tokens > 0  # thinking on
                assert m.output_tokens == truth.completion_tokens == sum(c.tokens or 0 for c in tr.chunks)
                assert m.itl_count == m.output_tokens - 1
                true_rate = truth_steady_rate(truth, cal.output.steady_state_start)
                assert abs(m.decode_rate - true_rate) / true_rate < ACCURACY, (m.decode_rate, true_rate)
        assert (run.result or {})["caliber_status"] == "ok"


def test_caliber_miss_is_marked(store, capsys):
    cal = resolve("chat-short-3k")  # thinking on, the sim can be told to send no reasoning
    with SimServer(SimConfig(seed=1, time_scale=0.02, thinking_default=False, reasoning_tokens=0,
                             eos_mean_tokens=40)).start_in_thread() as sim:
        rc = main(["probe", sim.url, "--caliber", "chat-short-3k", "--trials", "1",
                   "--store", store.path, "--no-fingerprint"])
    assert rc == ExitCode.CALIBER_MISSED
    run = sr.get_run(store, sr.resolve_run_id(store, "last"))
    codes = {f["code"] for f in run.warnings}
    assert run.result["caliber_status"] == "missed" and cal.thinking
    assert {"caliber.no_reasoning"} <= codes


@pytest.mark.parametrize("config,code,needle", [
    (SimConfig(api_key="right-key"), ExitCode.UNREACHABLE, "API key"),
    (SimConfig(faults=FaultSpec.parse("html")), ExitCode.PROTOCOL, "HTML"),
    (SimConfig(faults=FaultSpec.parse("malformed=4")), ExitCode.PROTOCOL, "not JSON"),
    (SimConfig(faults=FaultSpec.parse("drop_after=20")), ExitCode.PROTOCOL, "mid-stream"),
    (SimConfig(faults=FaultSpec.parse("status=503")), ExitCode.PROTOCOL, "503"),
])
def test_bad_servers_one_line_error_and_exit_code(tmp_path, capsys, config, code, needle):
    with SimServer(replace(config, time_scale=0.02)).start_in_thread() as sim:
        rc = main(["probe", sim.url, "--caliber", "demo-code-rewrite", "--trials", "2",
                   "--store", str(tmp_path / "s.sqlite"), "--no-fingerprint", "--no-scrape"])
    err = capsys.readouterr().err
    assert rc == code, err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in err


def test_unreachable_url(tmp_path, capsys):
    rc = main(["probe", "http://127.0.0.1:9", "--caliber", "demo-code-rewrite",
               "--store", str(tmp_path / "s.sqlite")])
    err = capsys.readouterr().err
    assert rc == ExitCode.UNREACHABLE and err.startswith("error: cannot reach the server")
    assert "Traceback" not in err


def test_model_not_served(tmp_path, capsys):
    with SimServer(SimConfig(time_scale=0.02)).start_in_thread() as sim:
        rc = main(["probe", sim.url, "--caliber", "demo-code-rewrite", "--model", "nope",
                   "--store", str(tmp_path / "s.sqlite")])
    err = capsys.readouterr().err
    assert rc == ExitCode.UNREACHABLE and "'nope' is not served" in err and "sim-vllm" in err


def test_bad_caliber_inputs(tmp_path, capsys):
    assert main(["probe", "http://127.0.0.1:9", "--caliber", "nope"]) == ExitCode.USAGE
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    assert main(["probe", "http://127.0.0.1:9", "--caliber", str(bad)]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "unknown caliber 'nope'" in err and "malformed caliber file" in err
    assert "Traceback" not in err


class StopServerAfterFirstTrial:
    name = "kill-switch"

    def __init__(self, sim):
        self.sim = sim

    def start(self):
        pass

    def mark(self, event, t_s):
        if event == "trial_end:0":
            self.sim.stop()

    def stop(self):
        from decodescope.run.observer_protocol import ObserverResult
        return ObserverResult()


def test_completed_trials_are_kept_when_the_server_dies(store):
    cal = resolve("demo-code-rewrite")
    sim = SimServer(SimConfig(time_scale=0.02)).start_in_thread()
    with pytest.raises(UnreachableError):
        run_probe(ProbeSettings(sim.url, cal, trials=3), store,
                  observers=[StopServerAfterFirstTrial(sim)])
    run = sr.get_run(store, sr.resolve_run_id(store, "last"))
    assert run.status == "failed"
    assert [t.status for t in run.trials] == ["ok", "failed"]
    assert run.trials[0].requests[0].completion_tokens == 384


def test_mid_stream_close_keeps_partial_trace(store):
    cal = resolve("demo-code-rewrite")
    config = SimConfig(time_scale=0.02, faults=FaultSpec.parse("drop_after=30"))
    with SimServer(config).start_in_thread() as sim, pytest.raises(StreamClosedError):
        run_probe(ProbeSettings(sim.url, cal, trials=2), store)
    run = sr.get_run(store, sr.resolve_run_id(store, "last"))
    tr = run.trials[0].requests[0]
    assert run.status == "failed" and tr.error_kind == "StreamClosedError"
    assert sum(c.tokens or 0 for c in tr.chunks) == 30


def test_canary_api_key_never_stored_or_printed(tmp_path, capsys, monkeypatch):
    canary = "sk-CANARY-7f3a9c1e5d2b4a6f8e0c"
    monkeypatch.setenv("SIM_KEY", canary)
    db = tmp_path / "s.sqlite"
    with SimServer(SimConfig(time_scale=0.02, api_key=canary)).start_in_thread() as sim:
        rc = main(["probe", sim.url, "--caliber", "demo-code-rewrite", "--trials", "1",
                   "--api-key-env", "SIM_KEY", "--store", str(db), "--json"])
        out = capsys.readouterr()
        assert rc == 0, out.err
        assert main(["runs", "export", "last", "--store", str(db)]) == 0
        exported = capsys.readouterr().out
    assert canary not in out.out and canary not in out.err and canary not in exported
    assert json.loads(exported)["run"]["status"] == "complete"
    assert canary.encode() not in db.read_bytes()
    for p in tmp_path.iterdir():  # WAL and shared-memory files too
        assert canary.encode() not in p.read_bytes()
