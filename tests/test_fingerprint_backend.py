"""Backend-selection lines since the engine's last start, prefixes stripped, repeats dropped."""

from __future__ import annotations

from pathlib import Path

from decodescope.fingerprint.backend import backend_lines, collect_backend, normalize_line

VLLM_LOG = """\
(APIServer pid=100) INFO 09-15 20:08:01 [api_server.py:1896] vLLM API server version 0.11.2.dev499
(APIServer pid=100) INFO 09-15 20:08:01 [utils.py:233] non-default args: {'model': 'q', 'api_key': ['sk-abcdefghijklmnopqrstuvwx']}
(EngineCore_DP0 pid=101) INFO 09-15 20:08:40 [nvfp4.py:203] Using 'FLASHINFER_CUTLASS' NvFp4 MoE backend out of potential backends: ['FLASHINFER_CUTLASS', 'MARLIN'].
(APIServer pid=100) INFO 09-15 20:30:00 [loggers.py:271] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 150.1 tokens/s, Running: 1 reqs
(APIServer pid=200) INFO 09-15 23:27:01 [api_server.py:1896] vLLM API server version 0.11.2.dev499
(APIServer pid=200) INFO 09-15 23:27:01 [utils.py:233] non-default args: {'model': 'q'}
(Worker_TP0 pid=201) WARNING 09-15 23:27:30 [marlin_utils_fp4.py:204] Your GPU does not have native support for FP4 computation but FP4 quantization is being used. Weight-only FP4 compression will be used leveraging the Marlin kernel. This may degrade performance for compute-heavy workloads.
(Worker_TP0 pid=201) INFO 09-15 23:27:40 [nvfp4.py:203] Using 'MARLIN' NvFp4 MoE backend out of potential backends: ['MARLIN', 'EMULATION'].
(Worker_TP1 pid=202) INFO 09-15 23:27:40 [nvfp4.py:203] Using 'MARLIN' NvFp4 MoE backend out of potential backends: ['MARLIN', 'EMULATION'].
(Worker_TP0 pid=201) INFO 09-15 23:27:41 [fused_moe.py:88] Using TRITON Unquantized MoE backend out of potential backends: ['TRITON'].
(Worker_TP0 pid=201) INFO 09-15 23:27:42 [__init__.py:683] Using MarlinNvFp4LinearKernel for NVFP4 GEMM
\x1b[32m(APIServer pid=200) INFO 09-15 23:40:00 [loggers.py:271] Engine 000: Avg generation throughput: 100.2 tokens/s\x1b[0m
"""

LLAMA_LOG = """\
0.00.000.010 I build: 6000 (0c1e570) with cc (Debian 12.2.0) 12.2.0 for x86_64-linux-gnu
0.00.000.100 I system_info: n_threads = 2 (n_threads_batch = 2) / 2 | CPU : SSE3 = 1 | AVX2 = 1 |
0.00.120.000 I load_tensors:   CPU_Mapped model buffer size =   241.41 MiB
0.06.895.980 I slot print_timing: id  1 | task 0 | eval time =  2296.72 ms /   256 tokens
"""


def test_vllm_lines_from_last_launch_only() -> None:
    lines, start, lineno = backend_lines(VLLM_LOG)
    # the launch begins at its version line (vLLM prints it, then its args, then loads)
    assert start == "vLLM API server version 0.11.2.dev499"
    assert lineno == 5
    assert lines == [
        "Your GPU does not have native support for FP4 computation but FP4 quantization is being "
        "used. Weight-only FP4 compression will be used leveraging the Marlin kernel. This may "
        "degrade performance for compute-heavy workloads.",
        "Using 'MARLIN' NvFp4 MoE backend out of potential backends: ['MARLIN', 'EMULATION'].",
        "Using TRITON Unquantized MoE backend out of potential backends: ['TRITON'].",
        "Using MarlinNvFp4LinearKernel for NVFP4 GEMM",
    ]


def test_llamacpp_lines() -> None:
    lines, start, _ = backend_lines(LLAMA_LOG)
    assert start is not None and start.startswith("build: 6000 (0c1e570)")
    assert lines[0].startswith("system_info: n_threads = 2")
    assert lines[1].startswith("load_tensors:   CPU_Mapped model buffer size")
    assert len(lines) == 2


def test_normalize_strips_prefixes_and_ansi() -> None:
    assert normalize_line("\x1b[1m(EngineCore_DP0 pid=7) INFO 01-02 03:04:05 [a.py:1] hello\x1b[0m") == "hello"
    assert normalize_line("[2025-10-22 10:00:01 TP0] Decode batch, #running-req: 1") == (
        "Decode batch, #running-req: 1")
    assert normalize_line("0.06.896.125 I slot release: id 1") == "slot release: id 1"


def test_collect_backend_items(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(VLLM_LOG)
    items = collect_backend(log)
    assert items["lines"].collected and len(items["lines"].value) == 4
    assert items["last_start"].value["line_number"] == 5
    missing = collect_backend(tmp_path / "nope.log")
    assert missing["lines"].status == "unavailable" and "cannot read" in (missing["lines"].why or "")
    assert collect_backend(None)["lines"].why == "no engine log given (--log FILE)"
    bare = tmp_path / "bare.log"
    bare.write_text("Using FlashInfer for top-p & top-k sampling.\n")
    items = collect_backend(bare)
    assert items["lines"].value == ["Using FlashInfer for top-p & top-k sampling."]
    assert items["last_start"].status == "unavailable"
