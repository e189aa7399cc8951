"""End-to-end: the real llama-server + Gemma 3 270M on a loopback port (needs the install)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from decodescope.engines import server
from decodescope.engines.install import EngineInstall, find_install
from decodescope.engines.server import EngineSettings
from decodescope.engines.state import RunningEngine
from decodescope.errors import EngineError

pytestmark = pytest.mark.e2e

INSTALL = find_install()
needs_engine = pytest.mark.skipif(
    INSTALL is None, reason="embedded engine not installed: run `decodescope engine install`"
)
REPETITIVE = (
    "Rewrite this code exactly, unchanged:\n"
    + "def add(a, b):\n    return a + b\n\n" * 6
    + "def add(a, b):\n    return a + b\n"
)
SPEC_COUNTERS = (
    "llamacpp:spec_decode_num_drafts_total",
    "llamacpp:spec_decode_num_draft_tokens_total",
    "llamacpp:spec_decode_num_accepted_tokens_total",
)


def _install() -> EngineInstall:
    assert INSTALL is not None
    return INSTALL


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("engine-state")


@pytest.fixture(scope="module")
def ngram_engine(state_dir: Path) -> Iterator[RunningEngine]:
    settings = EngineSettings(port=0, threads=2, spec="ngram")
    with server.running_engine(settings, install=_install(), state_dir=state_dir) as eng:
        yield eng


def _stream_chat(url: str, prompt: str, max_tokens: int, **extra: Any) -> list[dict[str, Any]]:
    body = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        **extra,
    }
    chunks = []
    with (
        httpx.Client(trust_env=False, timeout=60) as client,
        client.stream("POST", f"{url}/v1/chat/completions", json=body) as resp,
    ):
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
    return chunks


def _metric(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert m, f"{name} not in /metrics"
    return float(m.group(1))


@needs_engine
def test_every_flag_we_pass_exists_in_this_build() -> None:
    inst = _install()
    help_text = subprocess.run(
        [str(inst.binary), "--help"], capture_output=True, text=True, timeout=30
    ).stdout
    known = set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", help_text))
    settings = EngineSettings(spec="synth", spec_synth_len=3)
    args = server.build_args(inst.binary, inst.model, Path("t.jinja"), settings, 1)
    flags = [a for a in args if a.startswith("-")]
    assert [f for f in flags if f not in known] == []


@needs_engine
def test_chat_template_renders_gemma_turns(ngram_engine: RunningEngine) -> None:
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    resp = httpx.post(
        f"{ngram_engine.url}/apply-template", json={"messages": msgs}, trust_env=False
    )
    prompt = resp.json()["prompt"]
    assert prompt.endswith(
        "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
    )


@needs_engine
def test_streaming_chat_has_usage_timings_and_drafts(ngram_engine: RunningEngine) -> None:
    chunks = _stream_chat(ngram_engine.url, REPETITIVE, max_tokens=48)
    text = "".join(
        c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices")
    )
    assert "return a + b" in text  # real text from the prompt, not the literal 'gemma'
    final = chunks[-1]
    assert final["usage"]["completion_tokens"] == 48
    assert final["usage"]["prompt_tokens"] > 40
    timings = final["timings"]
    assert timings["predicted_n"] == 48 and timings["predicted_per_second"] > 0
    assert timings["draft_n"] > 0 and 0 < timings["draft_n_accepted"] <= timings["draft_n"]

    metrics = httpx.get(f"{ngram_engine.url}/metrics", trust_env=False).text
    for name in SPEC_COUNTERS:
        assert _metric(metrics, name) > 0
    assert "llamacpp:spec_decode_num_accepted_tokens_per_pos_total{" in metrics
    assert _metric(metrics, "llamacpp:tokens_predicted_total") >= 48
    assert _metric(metrics, "llamacpp:n_decode_total") > 0


@needs_engine
def test_engine_identity_endpoints(ngram_engine: RunningEngine) -> None:
    with httpx.Client(trust_env=False, timeout=10) as client:
        models = client.get(f"{ngram_engine.url}/v1/models").json()
        assert models["data"][0]["owned_by"] == "llamacpp"
        props = client.get(f"{ngram_engine.url}/props").json()
        assert "build_info" in props or "default_generation_settings" in props
        tokens = client.post(f"{ngram_engine.url}/tokenize", json={"content": "hello world"})
        assert len(tokens.json()["tokens"]) >= 2


@needs_engine
def test_second_start_on_the_same_port_fails(ngram_engine: RunningEngine, state_dir: Path) -> None:
    settings = EngineSettings(port=ngram_engine.port, threads=2)
    with pytest.raises(EngineError, match=f"already runs on port {ngram_engine.port}"):
        server.start_engine(settings, install=_install(), state_dir=state_dir)


@needs_engine
def test_synth_spec_then_stop_leaves_no_process(tmp_path: Path) -> None:
    settings = EngineSettings(port=0, threads=2, spec="synth", spec_synth_len=3)
    with server.running_engine(settings, install=_install(), state_dir=tmp_path) as eng:
        assert psutil.pid_exists(eng.pid)
        final = _stream_chat(eng.url, REPETITIVE, max_tokens=32)[-1]
        assert final["usage"]["completion_tokens"] == 32
    assert not psutil.pid_exists(eng.pid)
    assert server.list_engines(state_dir=tmp_path) == []
