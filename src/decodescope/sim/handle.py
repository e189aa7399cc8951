"""A simulator running on its own event loop in a daemon thread (tests, benchmarks): the class
lives beside SimServer (server.py), whose start_in_thread() makes one."""

from decodescope.sim.server import STOP_TIMEOUT_S, SimHandle

__all__ = ["STOP_TIMEOUT_S", "SimHandle"]
