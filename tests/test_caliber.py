import json
import subprocess
import sys
from dataclasses import replace

import pytest

from decodescope.caliber.resolve import builtin_calibers, load_file, resolve
from decodescope.caliber.spec import OutputSpec, PromptSpec, SamplingSpec
from decodescope.cli.main import main
from decodescope.errors import CaliberError
from decodescope.exitcodes import ExitCode

EXPECTED = {"parity-code-32k@1", "parity-code-64k@1", "chat-short-3k@1", "anchor-c1-out1280@1",
            "demo-code-rewrite@1", "demo-varied-prose@1"}


def test_builtins_present_and_versioned():
    assert set(builtin_calibers()) >= EXPECTED


def test_seed_calibers_match_the_seed():
    p = resolve("parity-code-32k")
    assert p.thinking and p.prompt.target_tokens >= 32768 and p.prompt.content_class == "code"
    assert p.output.min_tokens >= 10_000 and p.output.steady_state_start >= 8000
    assert (p.sampling.temperature, p.sampling.top_p, p.concurrency) == (1.0, 0.95, 1)
    assert "Flask" in p.prompt.task
    assert resolve("parity-code-64k").prompt.target_tokens >= 65536
    c = resolve("chat-short-3k")
    assert c.output.max_tokens == 3000 and c.thinking and c.sampling.temperature == 1.0
    a = resolve("anchor-c1-out1280")
    assert a.output.max_tokens == 1280 and a.output.ignore_eos and a.concurrency == 1


def test_identity_same_in_another_process():
    code = ("from decodescope.caliber.resolve import builtin_calibers;"
            "import json;print(json.dumps({k: c.identity for k, c in builtin_calibers().items()}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    other = json.loads(out.stdout)
    assert other == {k: c.identity for k, c in builtin_calibers().items()}


def test_prompt_is_deterministic_and_ascii():
    c = resolve("parity-code-32k")
    a, b = c.prompt_text(50), c.prompt_text(50)
    assert a == b and a.isascii() and len(a) > 40_000
    # golden: the first bytes of the material never change between versions of Python
    assert c.prompt_text(1).startswith("class ")


@pytest.mark.parametrize("change", [
    lambda c: replace(c, thinking=not c.thinking),
    lambda c: replace(c, concurrency=c.concurrency + 1),
    lambda c: replace(c, endpoint="completions"),
    lambda c: replace(c, prompt=replace(c.prompt, task=c.prompt.task + "!")),
    lambda c: replace(c, prompt=replace(c.prompt, material_seed=c.prompt.material_seed + 1)),
    lambda c: replace(c, prompt=replace(c.prompt, blocks=c.prompt.blocks + 1)),
    lambda c: replace(c, output=replace(c.output, max_tokens=c.output.max_tokens + 1)),
    lambda c: replace(c, output=replace(c.output, steady_state_start=c.output.steady_state_start + 1)),
    lambda c: replace(c, output=replace(c.output, ignore_eos=not c.output.ignore_eos)),
    lambda c: replace(c, sampling=replace(c.sampling, temperature=0.5)),
    lambda c: replace(c, sampling=replace(c.sampling, top_p=0.9)),
    lambda c: replace(c, sampling=replace(c.sampling, seed=99)),
    lambda c: replace(c, sampling=replace(c.sampling, extra={"dry_multiplier": 1.0})),
    lambda c: replace(c, continuous_usage_stats=False),
])
def test_any_element_changes_identity(change):
    c = resolve("demo-code-rewrite")
    assert change(c).identity != c.identity


def test_description_is_cosmetic():
    c = resolve("demo-code-rewrite")
    assert replace(c, description="other words").identity == c.identity


def test_unknown_caliber_names_choices():
    with pytest.raises(CaliberError) as e:
        resolve("nope")
    assert "demo-code-rewrite" in e.value.one_line()


@pytest.mark.parametrize("body,needle", [
    ('name = "x"\nversion = 1\n[prompt]\ntask = "t"\nbogus = 1\n', "prompt.bogus"),
    ('name = "x"\nversion = "one"\n[prompt]\ntask = "t"\n', "'version' must be int"),
    ('name = "x"\nversion = 1\n[prompt]\ntask = "t"\n[output]\nmax_tokens = 0\n', "max_tokens"),
    ('name = "x"\nversion = 1\n', "prompt is empty"),
    ('name = "x\nversion = 1\n', "malformed caliber file"),
    ('version = 1\n[prompt]\ntask = "t"\n', "has no 'name'"),
])
def test_malformed_caliber_files(tmp_path, body, needle):
    p = tmp_path / "c.toml"
    p.write_text(body)
    with pytest.raises(CaliberError) as e:
        load_file(p)
    assert needle in e.value.one_line() and str(p) in e.value.one_line()


def test_cli_new_then_show_roundtrip(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["calibers", "new", "mine"]) == 0
    assert main(["calibers", "show", "mine.toml", "--json"]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out[out.index("{"):])
    assert doc["ref"] == "mine@1" and len(doc["identity"]) == 12


def test_cli_unknown_caliber_exit_code(capsys):
    assert main(["calibers", "show", "nope"]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.startswith("error: unknown caliber 'nope'") and "Traceback" not in err


def test_cli_show_has_elements(capsys):
    assert main(["calibers", "show", "parity-code-32k"]) == 0
    out = capsys.readouterr().out
    for needle in ("identity", "thinking", "on", "32768", "prompt head", "temperature"):
        assert needle in out


def test_spec_roundtrip():
    for c in builtin_calibers().values():
        assert type(c).from_dict(c.to_dict()) == c
    assert isinstance(resolve("demo-varied-prose").sampling, SamplingSpec)
    assert isinstance(resolve("demo-varied-prose").output, OutputSpec)
    assert isinstance(resolve("demo-varied-prose").prompt, PromptSpec)


BASE = 'name = "lim"\nversion = 1\nconcurrency = {conc}\n[prompt]\nmaterial = "code"\nblocks = {blocks}\ntask = "x"\n[output]\nmax_tokens = {mt}\n'


@pytest.mark.parametrize("values, needle", [
    ({"blocks": 100_000_000}, "prompt.blocks must be within 0..2000"),
    ({"blocks": -1}, "prompt.blocks must be within 0..2000"),
    ({"conc": 0}, "concurrency must be within 1..1024"),
    ({"conc": 100_000}, "concurrency must be within 1..1024"),
    ({"mt": 10**12}, "output.max_tokens must be within 1..1048576"),
])
def test_limits_are_checked_before_any_material(tmp_path, monkeypatch, values, needle):
    import decodescope.caliber.material as mat

    monkeypatch.setattr(mat, "blocks", lambda *a: pytest.fail("material generated"))
    f = tmp_path / "lim.toml"
    f.write_text(BASE.format(**{"conc": 1, "blocks": 4, "mt": 64, **values}), encoding="utf-8")
    with pytest.raises(CaliberError) as e:
        load_file(f)
    assert needle in e.value.one_line()


def test_material_blocks_guard_other_paths():
    c = resolve("demo-code-rewrite")
    big = replace(c, prompt=replace(c.prompt, blocks=10**8))  # e.g. a stored caliber
    with pytest.raises(CaliberError):
        big.prompt_text()


def test_names_and_file_size_are_limited(tmp_path, monkeypatch):
    from decodescope.caliber import resolve as caliber_files

    for bad in ("a/b", 'a"b', "a@1", "x.toml", ""):
        with pytest.raises(CaliberError):
            caliber_files.check_name(bad, "test")
    caliber_files.check_name("parity-code-32k.v2_b", "test")
    f = tmp_path / "c.toml"
    f.write_text('name = "ok"\nversion = 1\n[prompt]\ntask = "x"\n', encoding="utf-8")
    monkeypatch.setattr(caliber_files, "MAX_CALIBER_FILE_BYTES", 10)
    with pytest.raises(CaliberError) as e:
        caliber_files.load_file(f)
    assert "at most 10 are read" in e.value.one_line()
