"""Unit tests of the embedded engine: arguments, cache, state files, errors (no real build)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from decodescope.cli.main import main
from decodescope.engines import build, install, process, server, state
from decodescope.engines.install import EngineInstall
from decodescope.engines.server import EngineSettings
from decodescope.errors import EngineError, UsageError

# A stand-in llama-server: answers /health 503 once, then 200; exits on SIGTERM.
FAKE_SERVER = """#!{python}
import http.server, signal, sys
args = sys.argv[1:]
if "--version" in args:
    print("version: 1 (fake000)"); sys.exit(0)
port = int(args[args.index("--port") + 1])
calls = []
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        calls.append(1)
        self.send_response(503 if len(calls) == 1 else 200)
        self.end_headers()
        self.wfile.write(b"{{}}")
    def log_message(self, *a):
        pass
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def _fake_install(tmp_path: Path, body: str = FAKE_SERVER) -> EngineInstall:
    binary = tmp_path / "bin" / "llama-server"
    binary.parent.mkdir(parents=True, exist_ok=True)
    binary.write_text(body.format(python=sys.executable))
    binary.chmod(0o755)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    return EngineInstall(
        root=tmp_path, binary=binary, model=model, llama_cpp_python_version="0.3.36",
        model_package="x", engine_version="1", cmake_flags=(), build_s=None, source="test",
    )  # fmt: skip


def _fake_model(path: Path, size: int = install.MODEL_SIZE_BYTES) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.truncate(size)  # sparse: no disk cost


# --- arguments ---------------------------------------------------------------------------


def test_build_args_match_the_recipe() -> None:
    args = server.build_args(
        Path("/b/llama-server"), Path("/m.gguf"), Path("/t.jinja"), EngineSettings(threads=2), 9000
    )
    assert args == [
        "/b/llama-server", "-m", "/m.gguf", "--host", "127.0.0.1", "--port", "9000", "--metrics",
        "-t", "2", "-c", "8192", "-np", "1", "--chat-template-file", "/t.jinja",
    ]  # fmt: skip


def test_spec_args_per_mode() -> None:
    assert server.spec_args(EngineSettings(spec="none")) == []
    ngram = ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3",
             "--spec-ngram-simple-size-m", "8"]  # fmt: skip
    assert server.spec_args(EngineSettings(spec="ngram")) == ngram
    synth = server.spec_args(EngineSettings(spec="synth", spec_synth_len=2.5))
    assert synth == [*ngram, "--spec-synth-len", "2.5"]
    custom = server.spec_args(EngineSettings(spec="ngram", ngram_n=4, ngram_m=6))
    assert custom[3] == "4" and custom[5] == "6"


def test_extra_args_go_last_and_threads_default_to_cores() -> None:
    settings = EngineSettings(extra=("--seed", "1"))
    args = server.build_args(Path("b"), Path("m"), Path("t"), settings, 1)
    assert args[-2:] == ["--seed", "1"]
    assert args[args.index("-t") + 1] == str(server.default_threads())


@pytest.mark.parametrize(
    ("settings", "needle"),
    [
        (EngineSettings(spec="synth"), "--spec-synth-len"),
        (EngineSettings(spec="ngram", spec_synth_len=3), "only applies"),
        (EngineSettings(spec="synth", spec_synth_len=0.5), ">= 1"),
        (EngineSettings(slots=0), "--slots"),
        (EngineSettings(port=70000), "port"),
    ],
)
def test_bad_settings_are_usage_errors(settings: EngineSettings, needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        settings.validate()


def test_cmake_commands_are_the_recipe() -> None:
    assert build.configure_command("cmake") == [
        "cmake", "-B", "build", "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_SERVER=ON",
        "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DBUILD_SHARED_LIBS=OFF",
    ] + ([  # x86-64: no AMX tile kernels (they die of SIGILL in this llama.cpp)
        "-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
        "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
    ] if platform.machine().lower() in ("x86_64", "amd64") else [])  # fmt: skip
    assert build.build_command("cmake", 2) == [
        "cmake", "--build", "build", "--target", "llama-server", "-j", "2",
    ]  # fmt: skip


def test_parse_percent() -> None:
    assert build.parse_percent("[ 42%] Building CXX object x.o") == 42.0
    assert build.parse_percent("[100%] Built target llama-server") == 100.0
    assert build.parse_percent("-- Configuring done") is None


def test_missing_toolchain_names_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    monkeypatch.setattr(build.sys, "executable", str(tmp_path / "python"))
    monkeypatch.delenv("CMAKE_GENERATOR", raising=False)
    with pytest.raises(EngineError) as err:
        build.check_toolchain()
    assert "cmake" in err.value.cause and "C++ compiler" in err.value.cause
    assert "apt-get install cmake g++" in (err.value.remedy or "")
    assert "pip install cmake" in (err.value.remedy or "")


# --- cache / install ---------------------------------------------------------------------


def _seed_cache(root: Path) -> Path:
    final = install.install_dir(root)
    (final / "bin").mkdir(parents=True)
    binary = final / "bin" / "llama-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    _fake_model(final / "models" / install.MODEL_FILENAME)
    meta = {
        "schema_version": install.INSTALL_SCHEMA_VERSION,
        "llama_cpp_python_version": install.LLAMA_CPP_PYTHON_VERSION,
        "model_package": f"{install.MODEL_PACKAGE}=={install.MODEL_PACKAGE_VERSION}",
        "engine_version": "1 (abc)", "cmake_flags": list(build.CMAKE_FLAGS), "build_s": 1.0,
    }  # fmt: skip
    (final / "install.json").write_text(json.dumps(meta))
    return final


def test_cache_root_env_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DECODESCOPE_CACHE", str(tmp_path))
    assert install.install_dir() == tmp_path / "engines" / "llama.cpp-0.3.36"


def test_installed_engine_is_found_without_building(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    final = _seed_cache(tmp_path)

    def boom(*a: object, **k: object) -> None:
        raise AssertionError("must not build")

    monkeypatch.setattr(install, "_build_from_sdist", boom)
    t0 = time.monotonic()
    found = install.ensure_installed(root=tmp_path)
    assert time.monotonic() - t0 < 1.0
    assert found.already_installed and found.binary == final / "bin" / "llama-server"
    assert found.engine_version == "1 (abc)"


def test_incomplete_or_other_version_is_not_installed(tmp_path: Path) -> None:
    final = _seed_cache(tmp_path)
    meta = json.loads((final / "install.json").read_text())
    (final / "install.json").write_text(json.dumps({**meta, "llama_cpp_python_version": "9"}))
    assert install.find_install(tmp_path) is None
    (final / "install.json").write_text(json.dumps(meta))
    assert install.find_install(tmp_path) is not None
    (final / "models" / install.MODEL_FILENAME).write_bytes(b"short")
    assert install.find_install(tmp_path) is None
    with pytest.raises(EngineError, match="not installed"):
        install.require_install(tmp_path)


def test_interrupted_install_leaves_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def half_build(partial: Path, stage: Path, report: object, jobs: object) -> None:
        (stage / "bin" / "llama-server").write_text("half")
        raise EngineError("cmake build failed")

    monkeypatch.setattr(install, "_build_from_sdist", half_build)
    leftover = tmp_path / "engines" / ".partial-old"
    leftover.mkdir(parents=True)
    with pytest.raises(EngineError, match="cmake build failed"):
        install.ensure_installed(root=tmp_path)
    engines = tmp_path / "engines"
    assert not install.install_dir(tmp_path).exists()
    assert sorted(p.name for p in engines.iterdir()) == [".install.lock"]


def test_from_build_then_idempotent_cli(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = _fake_install(tmp_path / "built")
    built = tmp_path / "tree"
    (built / "build" / "bin").mkdir(parents=True)
    (built / "build" / "bin" / "llama-server").write_bytes(fake.binary.read_bytes())
    (built / "build" / "bin" / "llama-server").chmod(0o755)
    monkeypatch.setattr(
        install, "assemble_model", lambda partial, target, report: _fake_model(target)
    )
    monkeypatch.setenv("DECODESCOPE_CACHE", str(tmp_path / "cache"))
    assert main(["engine", "install", "--from-build", str(built), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["already_installed"] is False and out["engine_version"] == "1 (fake000)"
    assert out["source"].startswith("from-build")
    assert Path(out["binary"]).is_file() and Path(out["model"]).is_file()
    assert main(["engine", "install"]) == 0
    assert "already installed" in capsys.readouterr().out


def test_from_build_without_binary_is_an_engine_error(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="no llama-server binary"):
        install.ensure_installed(root=tmp_path / "c", from_build=tmp_path)


# --- state files, start / stop -------------------------------------------------------------


def _record_for(proc: psutil.Process, port: int, tmp_path: Path) -> state.RunningEngine:
    return state.RunningEngine(
        pid=proc.pid, port=port, url=f"http://127.0.0.1:{port}", log_path=tmp_path / "x.log",
        cmdline=tuple(proc.cmdline()), started_at=time.time(), create_time=proc.create_time(),
    )  # fmt: skip


@contextlib.contextmanager
def _short_lived() -> Iterator[psutil.Process]:
    """A process that is alive inside the block and gone (reaped) after it."""
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as proc:
        try:
            yield psutil.Process(proc.pid)
        finally:
            proc.kill()
            proc.wait()


def test_record_roundtrip_and_identity(tmp_path: Path) -> None:
    me = psutil.Process(os.getpid())
    rec = _record_for(me, 1234, tmp_path)
    state.write_record(tmp_path, rec)
    back = state.read_record(tmp_path, 1234)
    assert back is not None and back.pid == rec.pid and back.cmdline == rec.cmdline
    assert state.live_process(back) is not None
    reused = state.RunningEngine(**{**rec.__dict__, "create_time": rec.create_time - 100})
    assert state.live_process(reused) is None  # same pid, other process: never ours
    other_cmd = state.RunningEngine(**{**rec.__dict__, "cmdline": ("llama-server",)})
    assert state.live_process(other_cmd) is None


def test_stale_record_is_pruned_and_stop_says_so(tmp_path: Path) -> None:
    with _short_lived() as ps:
        rec = _record_for(ps, 4321, tmp_path)
    state.write_record(tmp_path, rec)
    result = server.stop_engine(4321, state_dir=tmp_path)
    assert not result.was_running and "stale" in result.note
    assert state.read_record(tmp_path, 4321) is None
    state.write_record(tmp_path, rec)
    assert server.list_engines(state_dir=tmp_path) == []
    assert not state.record_path(tmp_path, 4321).exists()


def test_stop_without_record(tmp_path: Path) -> None:
    result = server.stop_engine(4999, state_dir=tmp_path)
    assert not result.was_running and result.pid is None


def test_start_on_a_port_in_use_names_the_owner(tmp_path: Path) -> None:
    inst = _fake_install(tmp_path)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(EngineError) as err:
            server.start_engine(EngineSettings(port=port), install=inst, state_dir=tmp_path)
    assert f"port {port} is already in use by pid {os.getpid()}" in err.value.cause
    assert f"decodescope engine stop --port {port}" in (err.value.remedy or "")
    assert not state.record_path(tmp_path, port).exists()


def test_start_status_stop_with_a_stand_in_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inst = _fake_install(tmp_path)
    with server.running_engine(EngineSettings(port=0), install=inst, state_dir=tmp_path) as eng:
        assert eng.ready_s is not None and eng.log_path.exists()
        assert psutil.pid_exists(eng.pid)
        (tmp_path / "gemma.jinja").read_text().index("<start_of_turn>")
        listed = server.list_engines(state_dir=tmp_path)
        assert [e.pid for e in listed] == [eng.pid]
        with pytest.raises(EngineError, match=f"already runs on port {eng.port}"):
            server.start_engine(EngineSettings(port=eng.port), install=inst, state_dir=tmp_path)
        monkeypatch.setenv("DECODESCOPE_ENGINE_STATE", str(tmp_path))
        assert main(["engine", "status", "--json"]) == 0
        status = json.loads(capsys.readouterr().out)
        assert status["engines"][0]["port"] == eng.port and status["engines"][0]["uptime_s"] >= 0
    assert not psutil.pid_exists(eng.pid)
    assert server.list_engines(state_dir=tmp_path) == []


def test_cli_stop_ends_exactly_the_recorded_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inst = _fake_install(tmp_path)
    eng = server.start_engine(EngineSettings(port=0), install=inst, state_dir=tmp_path)
    monkeypatch.setenv("DECODESCOPE_ENGINE_STATE", str(tmp_path))
    assert main(["engine", "stop", "--port", str(eng.port), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["stopped"][0]["was_running"] and out["stopped"][0]["signal"] == "SIGTERM"
    assert not psutil.pid_exists(eng.pid)


def test_server_that_dies_while_starting(tmp_path: Path) -> None:
    inst = _fake_install(tmp_path, "#!/bin/sh\necho 'error: invalid argument: --bogus'\nexit 1\n")
    with pytest.raises(EngineError, match="exited with code 1.*invalid argument"):
        server.start_engine(EngineSettings(port=0), install=inst, state_dir=tmp_path)
    assert server.list_engines(state_dir=tmp_path) == []


def test_server_that_dies_of_sigill_names_the_cpu_and_the_rebuild(tmp_path: Path) -> None:
    """A binary built for another CPU (or hitting a miscompiled kernel, as llama.cpp's AMX
    tiles did on a Xeon) dies of SIGILL at its first decode, during start-up."""
    inst = _fake_install(tmp_path, "#!/bin/sh\necho 'init: threadpool'\nkill -ILL $$\n")
    with pytest.raises(EngineError, match="illegal instruction") as e:
        server.start_engine(EngineSettings(port=0), install=inst, state_dir=tmp_path)
    assert e.value.remedy and "engine install --force" in e.value.remedy
    assert server.list_engines(state_dir=tmp_path) == []


def test_cli_start_without_install_exits_7(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DECODESCOPE_CACHE", str(tmp_path))
    monkeypatch.setenv("DECODESCOPE_ENGINE_STATE", str(tmp_path / "state"))
    assert main(["engine", "start", "--port", "0"]) == 7
    assert "decodescope engine install" in capsys.readouterr().err


def test_flags_are_read_back_from_a_cmake_cache(tmp_path: Path) -> None:
    cache = tmp_path / "CMakeCache.txt"
    cache.write_text(
        "// comment\nGGML_NATIVE:BOOL=ON\nLLAMA_CURL:UNINITIALIZED=OFF\n"
        "CMAKE_BUILD_TYPE:STRING=Release\nOTHER:BOOL=ON\n"
    )
    assert build.flags_from_cmake_cache(cache) == (
        "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF",
    )  # fmt: skip
    assert build.flags_from_cmake_cache(tmp_path / "missing") is None


def test_start_over_a_stale_record_replaces_it(tmp_path: Path) -> None:
    with _short_lived() as ps:
        port = process.free_port()
        stale = _record_for(ps, port, tmp_path)
    state.write_record(tmp_path, stale)
    settings = EngineSettings(port=port)
    with server.running_engine(
        settings, install=_fake_install(tmp_path), state_dir=tmp_path
    ) as eng:
        record = state.read_record(tmp_path, port)
        assert record is not None and record.pid == eng.pid != stale.pid


def test_cli_start_in_another_process_then_stop_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    final = _seed_cache(tmp_path / "cache")
    (final / "bin" / "llama-server").write_text(FAKE_SERVER.format(python=sys.executable))
    env = {
        **os.environ,
        "DECODESCOPE_CACHE": str(tmp_path / "cache"),
        "DECODESCOPE_ENGINE_STATE": str(tmp_path / "state"),
    }
    port = process.free_port()
    cmd = [sys.executable, "-m", "decodescope.cli.main", "engine", "start", "--port", str(port)]
    started = subprocess.run([*cmd, "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert started.returncode == 0, started.stderr
    pid = json.loads(started.stdout)["pid"]
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 7 and f"engine stop --port {port}" in again.stderr
    result = server.stop_engine(port, state_dir=tmp_path / "state")  # not our child
    assert result.was_running and result.signal == "SIGTERM" and result.pid == pid
    gone = not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert gone


def test_running_engine_ends_its_child_even_if_the_record_is_damaged(tmp_path: Path) -> None:
    inst = _fake_install(tmp_path)
    with server.running_engine(EngineSettings(port=0), install=inst, state_dir=tmp_path) as eng:
        state.write_record(tmp_path, dataclasses.replace(eng, cmdline=("something-else",)))
    assert not psutil.pid_exists(eng.pid)
    assert eng.pid not in process.CHILDREN


def test_the_state_file_never_holds_a_key_and_still_knows_its_process(tmp_path: Path) -> None:
    """A key passed to the engine (`--extra "--api-key K"`) is redacted in the state file; the
    record still identifies the live process (a redacted word stands for any live word), and
    a different key or command is still another process."""
    from decodescope.redact import redact_cmdline

    key = "sk-canary-Zq81statefile"
    live = ("llama-server", "-m", "m.gguf", "--api-key", key, "--port", "8080")
    recorded = tuple(redact_cmdline(live))
    assert key not in " ".join(recorded)
    assert state._same_command(live, recorded)
    assert state._same_command(("/usr/bin/python3", *live), recorded)  # via an interpreter
    assert not state._same_command(("llama-server", "-m", "other.gguf", "--api-key", key,
                                    "--port", "8080"), recorded)
    assert not state._same_command(live[:3], recorded)


def test_cli_stop_without_port_finds_the_only_engine_off_its_default_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inst = _fake_install(tmp_path)
    monkeypatch.setenv("DECODESCOPE_ENGINE_STATE", str(tmp_path))
    one = server.start_engine(EngineSettings(port=0), install=inst, state_dir=tmp_path)
    two = server.start_engine(EngineSettings(port=0), install=inst, state_dir=tmp_path)
    try:
        # two engines, neither on the default port: which one is meant is not known
        capsys.readouterr()
        assert main(["engine", "stop"]) == 2
        err = capsys.readouterr().err
        assert str(one.port) in err and str(two.port) in err and "--port" in err
        assert psutil.pid_exists(one.pid) and psutil.pid_exists(two.pid)
        server.stop_engine(two.port, state_dir=tmp_path)
        # one left: `engine stop` stops it
        assert main(["engine", "stop", "--engine", "llamacpp", "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["stopped"][0]["port"] == one.port and out["stopped"][0]["was_running"]
        assert not psutil.pid_exists(one.pid)
    finally:
        for eng in (one, two):
            server.stop_engine(eng.port, state_dir=tmp_path)
