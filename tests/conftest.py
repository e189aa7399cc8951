"""Fixtures shared across test modules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from llamacpp_pair import Pair
    from vllm_lab import Lab


@pytest.fixture(scope="session")
def vllm_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """The real vLLM servers of the e2e tests (tests/vllm_lab.py), one at a time, and the
    probes run on them: started on first use, shared by every module that reads them."""
    from vllm_lab import INSTALL, Lab

    assert INSTALL is not None, (
        "the vLLM engine is not installed but this platform can run it: run "
        "`decodescope engine install --engine vllm` (./dev test does)")
    lab = Lab(tmp_path_factory.mktemp("vllm-e2e"))
    try:
        yield lab
    finally:
        lab.close()


@pytest.fixture(scope="session")
def llamacpp_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    """The real llama.cpp n-gram engine and its code / prose probes (tests/llamacpp_pair.py),
    run once for the modules that read them; each module stops the engine when it ends."""
    from llamacpp_pair import Pair

    pair = Pair(tmp_path_factory.mktemp("llamacpp-pair"))
    try:
        yield pair
    finally:
        pair.stop()
