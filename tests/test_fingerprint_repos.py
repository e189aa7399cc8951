"""Watched repos (git HEAD; referenced via PYTHONPATH, .pth, package grep) and engine package
install state (version, newest file mtime, __pycache__ ignored)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from decodescope.fingerprint.packages import (
    Interpreter,
    engine_package_item,
    installed,
    newest_file,
)
from decodescope.fingerprint.process import ServerProcess
from decodescope.fingerprint.repos import collect_repos, git_head, grep_tree, references

REPO_NAME = "Qwen-Flash-SM80-170HX"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / REPO_NAME
    r.mkdir()
    (r / "ple.py").write_text("x = 1\n")
    git = ["git", "-C", str(r), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "PLE handoff hardening"], check=True)
    subprocess.run([*git, "tag", "v0.1.7"], check=True)
    return r


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A site-packages with a fake vllm distribution."""
    s = tmp_path / "venv" / "lib" / "python3.12" / "site-packages"
    pkg = s / "vllm"
    (pkg / "model_executor").mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '0.11.2.dev499'\n")
    (pkg / "model_executor" / "moe.py").write_text("BACKEND = 'MARLIN'\n")
    info = s / "vllm-0.11.2.dev499.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.11.2.dev499\n")
    (s / "torch-2.9.0.dist-info").mkdir()
    (s / "torch-2.9.0.dist-info" / "METADATA").write_text("Name: torch\nVersion: 2.9.0\n")
    old = 1_757_320_000.0  # 2025-09-08
    for p in pkg.rglob("*"):
        os.utime(p, (old, old))
    return s


def server(pythonpath: tuple[str, ...] = (), exe: str = "/usr/bin/python3") -> ServerProcess:
    return ServerProcess(pid=1, create_time=0.0, exe=exe, interpreter=exe,
                         pythonpath=pythonpath, env_path=None)


def test_git_head(repo: Path) -> None:
    head = git_head(repo)
    assert head.collected
    assert head.value["subject"] == "PLE handoff hardening"
    assert head.value["describe"] == "v0.1.7"
    assert head.value["dirty_files"] == 0
    assert len(head.value["sha"]) >= 7
    assert git_head(repo / "nope").status == "unavailable"


def test_not_referenced_when_all_checks_clean(repo: Path, site: Path) -> None:
    interp = Interpreter("/venv/bin/python3", (str(site),), "3.12.3")
    it = references(repo, server(), interp, site / "vllm")
    assert it.value["referenced"] is False
    assert it.value["package_grep"]["hits"] == []
    assert it.value["package_grep"]["files_scanned"] == 2


def test_referenced_via_pythonpath_pth_and_grep(repo: Path, site: Path) -> None:
    interp = Interpreter("/venv/bin/python3", (str(site),), "3.12.3")
    assert references(repo, server(pythonpath=(str(repo),)), interp, site / "vllm"
                      ).value["pythonpath_entries"] == [str(repo)]
    (site / "qsa.pth").write_text(f"{repo}\n")
    it = references(repo, server(), interp, site / "vllm")
    assert it.value["referenced"] is True
    assert it.value["pth_hits"][0]["file"].endswith("qsa.pth")
    (site / "qsa.pth").unlink()
    (site / "vllm" / "patched.py").write_text(f"# ported from {REPO_NAME}\n")
    it = references(repo, server(), interp, site / "vllm")
    assert it.value["referenced"] is True
    assert it.value["package_grep"]["hits"] == ["patched.py"]


def test_truncated_grep_is_not_a_no(repo: Path, site: Path) -> None:
    out = grep_tree(site / "vllm", [REPO_NAME.encode()], max_files=1)
    assert out["truncated"] is True
    interp = Interpreter("/venv/bin/python3", (str(site),), "3.12.3")
    it = references(repo, server(), interp, None)  # no package dir to grep: not complete
    assert it.value["referenced"] is None


def test_collect_repos_items(repo: Path) -> None:
    items = collect_repos((str(repo), str(repo.parent / "missing")), None, None, None)
    assert items[f"git:{repo.resolve()}"].collected
    assert items[f"referenced:{repo.resolve()}"].status == "unavailable"
    assert items[f"referenced:{repo.parent / 'missing'}"].why == f"{repo.parent / 'missing'} does not exist"
    assert collect_repos((), None, None, None)["watched"].status == "unavailable"


def test_engine_package_newest_mtime_ignores_pycache(site: Path) -> None:
    dists = installed((str(site),))
    assert set(dists) == {"vllm", "torch"}
    item, pkg = engine_package_item(dists, "/venv/bin/python3", "vllm")
    assert pkg == site / "vllm"
    assert item.value["version"] == "0.11.2.dev499"
    assert item.value["newest_mtime_iso"].startswith("2025-09-08")
    # Importing writes bytecode: that is not a modification.
    cache = site / "vllm" / "__pycache__"
    cache.mkdir()
    (cache / "moe.cpython-312.pyc").write_bytes(b"\0")
    assert engine_package_item(dists, "/p", "vllm")[0].value["newest_mtime_iso"].startswith("2025-09-08")
    (site / "vllm" / "model_executor" / "moe.py").write_text("BACKEND = 'CUTLASS'\n")
    changed = engine_package_item(dists, "/p", "vllm")[0].value
    assert changed["newest_file"] == os.path.join("model_executor", "moe.py")
    assert not changed["newest_mtime_iso"].startswith("2025-09-08")
    missing, _ = engine_package_item(dists, "/p", "sglang")
    assert missing.status == "unavailable" and "no sglang package" in (missing.why or "")


def test_newest_file_bounded(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"f{i}.py").write_text("x")
    out = newest_file(tmp_path, max_files=2)
    assert out["files_scanned"] == 2
    assert out["truncated"] is True
    assert "newest_mtime" in out
    full = newest_file(tmp_path)
    assert full["files_scanned"] == 5 and full["truncated"] is False


def test_non_python_engine_reports_its_binary(tmp_path: Path) -> None:
    from decodescope.fingerprint.packages import collect_packages

    binary = tmp_path / "llama-server"
    binary.write_bytes(b"\x7fELF")
    os.utime(binary, (1_757_320_000.0, 1_757_320_000.0))
    srv = ServerProcess(pid=1, create_time=0.0, exe=str(binary), interpreter=None,
                        pythonpath=(), env_path=None)
    items, interp, pkg = collect_packages(srv, "llamacpp")
    assert interp is None and pkg is None
    assert items["engine_binary"].value["path"] == str(binary)
    assert items["engine_binary"].value["size_bytes"] == 4
    assert items["engine_binary"].value["mtime_iso"].startswith("2025-09-08")
    assert "not a Python interpreter" in (items["engine_package"].why or "")
