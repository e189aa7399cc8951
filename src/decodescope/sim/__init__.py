"""The simulator: an OpenAI-compatible, vLLM-like engine with speculative decoding.

A test instrument (fast tests, fault injection, client-accuracy benchmarks). Everything it
produces is labelled simulated: model id `sim-vllm/...`, `/version` -> {"simulated": true},
and its vLLM-format log file starts with a line saying so. See docs/simulator.md.
"""

from decodescope.sim.config import (
    ACCEPTANCE_PROFILES,
    SIM_VERSION,
    FaultSpec,
    SimConfig,
    expected_mal,
)
from decodescope.sim.handle import SimHandle
from decodescope.sim.server import SimServer
from decodescope.sim.truth import ChunkTruth, RequestTruth, Truth

__all__ = [
    "ACCEPTANCE_PROFILES",
    "SIM_VERSION",
    "ChunkTruth",
    "FaultSpec",
    "RequestTruth",
    "SimConfig",
    "SimHandle",
    "SimServer",
    "Truth",
    "expected_mal",
]
