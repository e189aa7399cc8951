"""Fixtures shared across test modules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
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
