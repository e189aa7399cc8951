"""Prompt datasets as caliber material: formats, content hashing, deterministic sampling, and a
probe against the simulator."""

from __future__ import annotations

import json

import pytest

from decodescope.caliber.dataset import Sampler, order, parse_dataset, read_dataset
from decodescope.caliber.derive import derive_caliber
from decodescope.caliber.resolve import load_file, resolve
from decodescope.caliber.spec import element_table
from decodescope.cli.main import main
from decodescope.errors import CaliberError
from decodescope.probe.load_shape import RequestBodies
from decodescope.probe.request import build_body
from decodescope.sim import SimConfig, SimServer
from decodescope.store import runs as sr
from decodescope.store.connect import open_store

PROMPTS = [f"Write a short story number {i} about a lighthouse." for i in range(5)]


def jsonl(tmp_path, name="p.jsonl", key="prompt", items=PROMPTS):
    path = tmp_path / name
    path.write_text("".join(json.dumps({key: p}) + "\n" for p in items), encoding="utf-8")
    return path


def test_formats_are_detected(tmp_path):
    assert parse_dataset(jsonl(tmp_path).read_bytes(), "x")[0] == "jsonl-prompt"
    assert parse_dataset(jsonl(tmp_path, key="text").read_bytes(), "x")[0] == "jsonl-prompt"
    msgs = tmp_path / "m.jsonl"
    msgs.write_text(json.dumps({"messages": [{"role": "system", "content": "be brief"},
                                             {"role": "user", "content": "hi"}]}) + "\n")
    fmt, entries = parse_dataset(msgs.read_bytes(), "x")
    assert fmt == "jsonl-messages" and entries[0].messages[1]["content"] == "hi"
    share = tmp_path / "sg.json"
    share.write_text(json.dumps([
        {"conversations": [{"from": "human", "value": "Q1"}, {"from": "gpt", "value": "A1"}]},
        {"conversations": [{"from": "gpt", "value": "no human turn"}]},
        {"conversations": [{"from": "human", "value": "Q2"}]},
    ]))
    fmt, entries = parse_dataset(share.read_bytes(), "x")
    assert fmt == "sharegpt" and [e.prompt for e in entries] == ["Q1", "Q2"]


@pytest.mark.parametrize("text", ["", "not json\n", '{"other": 1}\n', "[]",
                                  '{"prompt": "a"}\n{"messages": [{"role": "user", "content": "b"}]}\n'])
def test_bad_datasets_are_caliber_errors(text):
    with pytest.raises(CaliberError):
        parse_dataset(text.encode(), "x")


def test_identity_follows_the_content_not_the_path(tmp_path):
    base = resolve("demo-code-rewrite")
    a = derive_caliber(base, dataset=str(jsonl(tmp_path, "a.jsonl")))
    b = derive_caliber(base, dataset=str(jsonl(tmp_path, "b.jsonl")))
    c = derive_caliber(base, dataset=str(jsonl(tmp_path, "c.jsonl", items=PROMPTS[:4])))
    assert a.identity == b.identity != base.identity
    assert c.identity != a.identity
    assert dict(element_table(a))["dataset"].startswith("jsonl-prompt, 5 entries")
    assert len(element_table(a)) == len(element_table(base))


def test_sampling_order_is_fixed_and_covers_every_entry(tmp_path):
    assert order(50, 0) == order(50, 0) and sorted(order(50, 0)) == list(range(50))
    assert order(50, 0) != order(50, 1)
    spec, entries = read_dataset(jsonl(tmp_path))
    s = Sampler(spec, entries)
    firsts = [s.entry(j).prompt for j in range(5)]
    assert sorted(firsts) == sorted(PROMPTS)
    assert s.entry(5) == s.entry(0)


def test_request_bodies_carry_the_entries(tmp_path):
    cal = derive_caliber(resolve("demo-code-rewrite"), dataset=str(jsonl(tmp_path)))
    bodies = RequestBodies(cal, build_body(cal, "m", cal.prompt_text()), "m")
    sent = [b["messages"][-1]["content"] for b in (bodies.body(j) for j in range(5))]
    assert sorted(sent) == sorted(PROMPTS)
    assert bodies.warmup(0)["messages"][-1]["content"] == bodies.body(4)["messages"][-1]["content"]


def test_changed_file_is_refused_at_probe_time(tmp_path):
    path = jsonl(tmp_path)
    cal = derive_caliber(resolve("demo-code-rewrite"), dataset=str(path))
    path.write_text(json.dumps({"prompt": "edited"}) + "\n")
    with pytest.raises(CaliberError, match="dataset changed"):
        RequestBodies(cal, {}, None)


def test_caliber_file_with_a_dataset_section(tmp_path):
    jsonl(tmp_path, "prompts.jsonl")
    toml = tmp_path / "mine.toml"
    toml.write_text('name = "mine"\nversion = 1\n[dataset]\npath = "prompts.jsonl"\n'
                    '[load]\nnum_requests = 4\n[output]\nmax_tokens = 32\n')
    cal = load_file(toml)
    assert cal.dataset is not None and cal.dataset.entries == 5 and cal.load.num_requests == 4


def test_probe_with_a_dataset_against_the_simulator(tmp_path, capsys):
    store = str(tmp_path / "runs.sqlite")
    share = tmp_path / "sg.json"
    share.write_text(json.dumps([{"conversations": [{"from": "human", "value": p}]}
                                 for p in PROMPTS]))
    handle = SimServer(SimConfig(time_scale=0.05, seed=2)).start_in_thread()
    try:
        code = main(["probe", handle.url, "--caliber", "demo-code-rewrite", "--dataset",
                     str(share), "--trials", "2", "--num-requests", "3", "--concurrency", "2",
                     "--store", store, "--no-fingerprint", "--no-scrape", "--json"])
    finally:
        handle.stop()
    assert code == 0, capsys.readouterr().err
    doc = json.loads(capsys.readouterr().out)
    assert doc["caliber"]["dataset"]["format"] == "sharegpt"
    with open_store(store, read_only=True) as st:
        run = sr.get_run(st, doc["id"])
    prompts = [r.prompt_tokens for t in run.trials for r in t.requests]
    assert len(prompts) == 6 and all(p is not None for p in prompts)


def test_template_documents_prompt_text_and_load(tmp_path):
    assert main(["calibers", "new", "mine", "-o", str(tmp_path / "mine.toml")]) == 0
    text = (tmp_path / "mine.toml").read_text()
    assert "# text = " in text and "[load]" in text and "request_rate" in text
    assert "[dataset]" in text
