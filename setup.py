"""The one compiled part: linescan.match as C (src/decodescope/telemetry/logs/_linescan.c).

Optional: where no C compiler is at hand the build goes on without it and the numpy code of
linescan.py runs instead (the same answers; a full scan of a 1 or 4 GiB log takes 1.5-1.8x the CPU for vLLM and
SGLang, 2.0-2.1x for llama.cpp, measured in docs/logs.md "Sixth step").
Everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "decodescope.telemetry.logs._linescan",
    ["src/decodescope/telemetry/logs/_linescan.c"],
    extra_compile_args=["-O2", "-ffp-contract=off"],
    optional=True,
)])
