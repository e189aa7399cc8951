"""End-to-end triage on the real engine: llama.cpp's llama-server + Gemma 3 270M (CPU).

Each scenario probes the demo calibers through the CLI (observers, fingerprint and all) on
engines started by decodescope, then asks `triage` for the verdict:

    -t 2 → -t 1, same caliber                    REGRESSION (step rate), cmdline in evidence
    --spec-synth-len 3 → 2, same caliber         REGRESSION (acceptance) (or INCONCLUSIVE: noise)
    demo-code-rewrite → demo-varied-prose        CALIBER_MISMATCH
    the same probe twice                         same caliber, MAL unchanged (rates: timing)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from coherence_checks import check_stored_verdict

from decodescope.cli.main import main
from decodescope.engines import server
from decodescope.engines.install import EngineInstall, find_install
from decodescope.engines.server import EngineSettings

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

INSTALL = find_install()
needs_engine = pytest.mark.skipif(
    INSTALL is None, reason="embedded engine not installed: run `decodescope engine install`")
CODE, PROSE = "demo-code-rewrite", "demo-varied-prose"
TRIALS = 3
# The same probe twice must read NO_CHANGE: 5 trials per side keep the 95 % interval inside
# ±10 % up to a 6.5 % trial-to-trial spread (3 trials: 4.2 %, which a busy 2-core machine
# exceeds — measured: one slow trial gave +5.9 %, CI −7.0 % … +20.6 %, INCONCLUSIVE).
SAME_TRIALS = 5
# Between-run spread of these hosts, percent (bench/bench_run_noise.py measured 3.8 %).
HOST_RUN_SPREAD_PCT = 4.0


def _install() -> EngineInstall:
    assert INSTALL is not None
    return INSTALL


def _probe(url: str, store: str, caliber: str, label: str, trials: int = TRIALS) -> None:
    code = main(["probe", url, "--caliber", caliber, "--trials", str(trials), "--store", store,
                 "--label", f"run={label}", "--json"])
    assert code == 0, f"probe {label} exited {code}"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("e2e-triage") / "runs.sqlite")


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e-triage-engines")


def _scenario(store: str, state: Path, settings: EngineSettings,
              probes: list[tuple[str, str, int]], warmup: bool = True) -> None:
    """Start one engine, run its probes into the shared store, stop it.

    With `warmup`, a one-trial probe goes first: the first request after a start pays the
    full prefill and, with n-gram speculation, may accept differently from the requests after
    it (measured on the -t 2 engine: MAL 6.57 on the first trial, 5.97 on every later one,
    same greedy prompt; on the -t 1 engine the first trial already read 5.97, and synthetic
    acceptance does not depend on content: first trial MAL 3.16 like the others).
    """
    with server.running_engine(settings, install=_install(), state_dir=state) as eng:
        if warmup:
            _probe(eng.url, store, probes[0][0], f"warmup-{probes[0][1]}", 1)
        for caliber, label, trials in probes:
            _probe(eng.url, store, caliber, label, trials)


# One engine per fixture, so each test starts only the engines it needs (and a test's
# timeout covers its own probes only). Module scope: the t2 runs serve three tests.
@pytest.fixture(scope="module")
def ngram_t2(store: str, state_dir: Path) -> str:
    _scenario(store, state_dir, EngineSettings(port=0, threads=2, spec="ngram"),
              [(CODE, "t2", SAME_TRIALS), (CODE, "t2-again", SAME_TRIALS)])
    return store


@pytest.fixture(scope="module")
def ngram_t1(ngram_t2: str, state_dir: Path) -> str:
    _scenario(ngram_t2, state_dir, EngineSettings(port=0, threads=1, spec="ngram"),
              [(CODE, "t1", TRIALS)], warmup=False)
    return ngram_t2


@pytest.fixture(scope="module")
def prose(ngram_t2: str, state_dir: Path) -> str:
    _scenario(ngram_t2, state_dir, EngineSettings(port=0, threads=2, spec="ngram"),
              [(PROSE, "prose", 2)], warmup=False)
    return ngram_t2


@pytest.fixture(scope="module")
def synth(store: str, state_dir: Path) -> str:
    for length in (3, 2):
        _scenario(store, state_dir,
                  EngineSettings(port=0, threads=2, spec="synth", spec_synth_len=length),
                  [(CODE, f"synth{length}", 2)], warmup=False)  # MAL is exact: 2 trials do
    return store


def _triage(store: str, current: str, baseline: str, capsys: pytest.CaptureFixture[str]
            ) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["triage", f"run={current}", "--baseline", f"run={baseline}", "--store", store,
                 "--json"])
    out = json.loads(capsys.readouterr().out)
    # one coherent explanation (issue 21): the verdict's and both runs' outputs agree
    check_stored_verdict(store, f"run={current}", f"run={baseline}")
    return code, out


def _rows(out: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["check"]: r for r in out["evidence"]}


@needs_engine
def test_one_thread_is_a_step_rate_regression_with_the_cmdline_diff(ngram_t1, capsys):
    """Half the threads: a step-rate regression. What always holds on a busy machine too:
    never an improvement, never acceptance; at worst INCONCLUSIVE (noise)."""
    code, out = _triage(ngram_t1, "t1", "t2", capsys)
    assert out["label"] in ("REGRESSION (step rate)", "INCONCLUSIVE"), out["headline"]
    if out["verdict"] == "REGRESSION":
        assert code == 1
        assert out["changes"]["step_rate"]["status"] in ("down", "no_data")
    cmd = _rows(out)["same launch cmdline?"]
    assert cmd["status"] == "changed" and "-t 2 → -t 1" in cmd["result"]


@needs_engine
def test_shorter_synthetic_acceptance_is_an_acceptance_regression(synth, capsys):
    """MAL 3 → 2 (exact); the decode rate falls with it: REGRESSION (acceptance), or
    INCONCLUSIVE when the machine is too noisy to decide the decode rate — never a step-rate
    regression, never stalls, never an improvement."""
    code, out = _triage(synth, "synth2", "synth3", capsys)
    assert out["label"] in ("REGRESSION (acceptance)", "INCONCLUSIVE"), out["headline"]
    assert code in (1, 3)
    assert out["changes"]["mal"]["status"] == "down"
    assert "--spec-synth-len" in _rows(out)["same launch cmdline?"]["result"]


@needs_engine
def test_code_rewrite_vs_varied_prose_is_a_caliber_mismatch(prose, capsys):
    code, out = _triage(prose, "prose", "t2", capsys)
    assert out["verdict"] == "CALIBER_MISMATCH", out["headline"]
    assert code == 3
    differ = {r["element"] for r in out["caliber"]["rows"] if not r["same"]}
    assert {"content class", "temperature", "prompt text sha256"} <= differ
    # The delta is still decomposed; no assertion on the MAL direction: llama.cpp's n-gram
    # drafts also match the slot's previous generation, so a repeated identical prose request
    # accepts far more than the first one (measured: MAL 3.1, then 6.0).
    assert out["decomposition"]["log_mal"] is not None
    # the content factor the split reads: tokens per step where n-gram drafts only some steps
    words = " ".join(out["explanation"])
    assert out["decomposition"]["acceptance_metric"] in words, words


@needs_engine
def test_the_same_probe_twice_is_never_a_false_alarm(ngram_t2, capsys):
    """What always holds on an unchanged server, whatever the host's load: the same caliber,
    the same launch command, MAL unchanged — so never CALIBER_MISMATCH and never a change
    attributed to acceptance. The decode and step rates themselves are timing: on these shared
    2-core hosts back-to-back runs of one unchanged llama.cpp server land 3.8 % apart on a
    quiet box (`python bench/bench_run_noise.py --runs 8 --trials 5`), and CI runs saw step
    rate −7.7 % and +18.1 % between two tight 5-trial runs. Whether the rate verdict is
    NO_CHANGE is the false-alarm rate, which bench/bench_run_noise.py measures; it is not
    asserted here (a timing assertion under load is a flaky test)."""
    capsys.readouterr()
    code = main(["triage", "run=t2-again", "--baseline", "run=t2", "--store", ngram_t2,
                 "--run-spread", str(HOST_RUN_SPREAD_PCT), "--json"])
    out = json.loads(capsys.readouterr().out)
    check_stored_verdict(ngram_t2, "run=t2-again", "run=t2", "--run-spread",
                         str(HOST_RUN_SPREAD_PCT))
    assert out["verdict"] in ("NO_CHANGE", "INCONCLUSIVE", "REGRESSION", "IMPROVEMENT"), \
        out["headline"]
    assert out["caliber"]["same"] is True
    assert out["changes"]["mal"]["status"] not in ("up", "down"), out["changes"]["mal"]
    if out["verdict"] in ("REGRESSION", "IMPROVEMENT"):
        # the host's speed, never acceptance or speculation (MAL did not move)
        assert out["cause"] not in ("acceptance", "speculative decoding off"), out["headline"]
    assert code in (0, 1, 3)
    assert _rows(out)["same launch cmdline?"]["status"] == "same"
