"""The simulator's pure parts: tokenizer, content classes, the deterministic schedule model,
config and fault parsing."""

from __future__ import annotations

import random
from typing import Any

import pytest

from decodescope.errors import UsageError
from decodescope.sim.config import (
    CONTENT_CLASSES,
    FaultSpec,
    SimConfig,
    expected_mal,
    position_probs,
)
from decodescope.sim.engine import (
    RequestModel,
    RequestSpec,
    acceptance_sequence,
    prefill_real_s,
    step_interval_real_s,
)
from decodescope.sim.text import classify_prompt, corpus_lines, token_stream
from decodescope.sim.tokenizer import (
    CHAT_GENERATION_PROMPT_TOKENS,
    CHAT_MESSAGE_OVERHEAD_TOKENS,
    chat_prompt_tokens,
    count_tokens,
    prompt_token_count,
    tokenize,
)


def spec(**kw: Any) -> RequestSpec:
    base: dict[str, Any] = dict(endpoint="chat", prompt_key="p", prompt_tokens=10,
                                   max_tokens=400, ignore_eos=True, temperature=0.0,
                                   content_class="code")
    base.update(kw)
    return RequestSpec(**base)


def test_tokenizer_rule() -> None:
    assert tokenize("def f(x):") == ["def", " f", "(", "x", ")", ":"]
    assert tokenize(" Hello, world!\n") == [" Hello", ",", " world", "!", "\n"]
    assert count_tokens("") == 0
    assert prompt_token_count([1, 2, 3]) == 3
    assert prompt_token_count(["a b"]) == 2
    with pytest.raises(ValueError):
        prompt_token_count({"x": 1})


def test_chat_template_overhead() -> None:
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    expected = 3 + 2 + 2 * CHAT_MESSAGE_OVERHEAD_TOKENS + CHAT_GENERATION_PROMPT_TOKENS
    assert chat_prompt_tokens(msgs) == expected
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hi there"}]}]
    assert chat_prompt_tokens(parts) == 2 + CHAT_MESSAGE_OVERHEAD_TOKENS + CHAT_GENERATION_PROMPT_TOKENS


@pytest.mark.parametrize("cls", CONTENT_CLASSES)
def test_output_retokenizes_exactly(cls: str) -> None:
    for line in corpus_lines(cls):
        assert line[0].isspace() and not line[-1].isspace(), line
    rng = random.Random(3)
    tokens = [t for t, _ in zip(token_stream(cls, random.Random(1)), range(3000), strict=False)]
    for _ in range(300):
        i = rng.randrange(len(tokens))
        j = rng.randrange(i, min(len(tokens), i + 12)) + 1
        assert tokenize("".join(tokens[i:j])) == tokens[i:j]


def test_classify_prompt() -> None:
    assert classify_prompt("Rewrite this:\n```python\nx = 1\n```") == "code"
    assert classify_prompt("def main(): pass") == "code"
    assert classify_prompt("Write a story about a lighthouse keeper.") == "text"


def test_schedule_is_deterministic_per_seed() -> None:
    cfg = SimConfig(seed=1)
    a = acceptance_sequence(cfg, spec(), 200)
    assert a == acceptance_sequence(SimConfig(seed=1), spec(), 200)
    assert a != acceptance_sequence(SimConfig(seed=2), spec(), 200)
    assert a != acceptance_sequence(cfg, spec(prompt_key="other"), 200)
    texts = []
    for _ in range(2):
        m = RequestModel(cfg, spec(max_tokens=60))
        outs = [m.first_token()] + [m.next_step() for _ in range(200) if not m.done]
        texts.append("".join("".join(o.content) for o in outs))
    assert texts[0] == texts[1] and count_tokens(texts[0]) == 60


@pytest.mark.parametrize(("cls", "lo", "hi"), [("code", 4.0, 5.0), ("text", 2.5, 3.0)])
def test_class_mal_at_temperature_zero(cls: str, lo: float, hi: float) -> None:
    cfg = SimConfig()
    probs = cfg.probs(cls, 0.0)
    assert lo <= expected_mal(probs) <= hi
    seq = acceptance_sequence(cfg, spec(content_class=cls, max_tokens=20000), 3000)
    realized = 1 + sum(seq) / len(seq)
    assert realized == pytest.approx(expected_mal(probs), abs=0.08)
    assert max(seq) == cfg.k


def test_temperature_lowers_acceptance() -> None:
    cfg = SimConfig()
    assert expected_mal(cfg.probs("code", 1.0)) < expected_mal(cfg.probs("code", 0.0))
    assert expected_mal(cfg.probs("code", 1.0)) >= 4.0
    assert position_probs((0.9, 0.8), 4) == (0.9, 0.8, 0.8, 0.8)


def test_request_model_lengths_and_reasoning() -> None:
    cfg = SimConfig(reasoning_tokens=30)
    m = RequestModel(cfg, spec(max_tokens=100, thinking=True))
    outs = [m.first_token()]
    while not m.done:
        outs.append(m.next_step())
    assert sum(o.tokens for o in outs) == 100
    assert sum(len(o.reasoning) for o in outs) == 30
    first_content = next(i for i, o in enumerate(outs) if o.content)
    assert all(not o.reasoning for o in outs[first_content + 1:])
    assert outs[-1].finish_reason == "length" and all(o.finish_reason is None for o in outs[:-1])
    assert all(o.tokens <= cfg.k + 1 for o in outs) and outs[0].drafted == 0
    capped = RequestModel(cfg, spec(max_tokens=20, thinking=True))
    assert capped.reasoning_tokens == 10


def test_eos_without_ignore_eos() -> None:
    m = RequestModel(SimConfig(eos_mean_tokens=40), spec(max_tokens=1000, ignore_eos=False))
    assert 20 <= m.output_tokens <= 60 and m.finish_reason == "stop"
    m2 = RequestModel(SimConfig(eos_mean_tokens=40), spec(max_tokens=10, ignore_eos=False))
    assert m2.output_tokens == 10 and m2.finish_reason == "length"


def test_step_interval_and_prefill() -> None:
    cfg = SimConfig(step_rate_hz=40, time_scale=0.5, batch_slowdown=0.1, length_decay_per_1k=0.2)
    assert step_interval_real_s(cfg, 1, 0) == pytest.approx(0.5 / 40)
    assert step_interval_real_s(cfg, 11, 0) == pytest.approx(2 * 0.5 / 40)
    assert step_interval_real_s(cfg, 1, 5000) == pytest.approx(2 * 0.5 / 40)
    assert prefill_real_s(cfg, 8000) == pytest.approx(0.5 * (1 + cfg.prefill_overhead_s))


def test_fault_parse() -> None:
    f = FaultSpec.parse("drop_after=10, stall=1.5; stall_after=3,malformed, no_usage")
    assert (f.drop_after_tokens, f.stall_s, f.stall_after_tokens) == (10, 1.5, 3)
    assert f.malformed_after_tokens == FaultSpec.MALFORMED_DEFAULT_AFTER and f.no_usage
    assert FaultSpec.parse("503").status == 503
    assert FaultSpec.parse("").describe() == "none"
    merged = FaultSpec(status=500, foreign_load=2).merged(FaultSpec(status=429))
    assert (merged.status, merged.foreign_load) == (429, 2)
    for bad in ("bogus", "drop_after=x", "stall=-1", "html=maybe", "status=200"):
        with pytest.raises(UsageError):
            FaultSpec.parse(bad)


def test_config_validation() -> None:
    bad: list[dict[str, Any]] = [{"time_scale": 0}, {"k": -1}, {"reasoning_field": "thoughts"},
                                 {"acceptance": {"code": (0.5,)}}, {"sse_framing": "ws"}]
    for kw in bad:
        with pytest.raises(UsageError):
            SimConfig(**kw)
    assert SimConfig(time_scale=0.1).real_s(10) == pytest.approx(1.0)


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_fast_event_equals_json_chunk(endpoint: str) -> None:
    import json

    from decodescope.sim.engine import StepOut
    from decodescope.sim.openai import Formatter, sse

    fmt = Formatter(endpoint, 'id-"1"', "sim-vllm/m", 123, "reasoning", 7, True)
    for out in (StepOut(4, 2, ("a", " é\n"), (' "q"',), None), StepOut(4, 0, (), ("\tz",), "length")):
        for usage in (None, fmt.usage(5, 2)):
            usage_json = None if usage is None else fmt.usage_json(5, 2)
            fast = fmt.token_event(out, usage_json)
            assert fast.startswith(b"data: ") and fast.endswith(b"\n\n")
            want = sse(fmt.token_chunk(out, usage))
            assert json.loads(fast[6:]) == json.loads(want[6:])
