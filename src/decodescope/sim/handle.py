"""A simulator running on its own event loop in a daemon thread (tests, benchmarks)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from decodescope.sim.config import SimConfig
from decodescope.sim.server import SimServer

STOP_TIMEOUT_S = 5.0


class SimHandle:
    """`SimServer(cfg).start_in_thread()`: .url, .port, .truth, .stop(); a context manager."""

    def __init__(self, server: SimServer):
        self.server = server
        self.truth = server.truth
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="decodescope-sim", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        try:
            await self.server.start()
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await self.server.stop()

    @property
    def port(self) -> int:
        assert self.server.port is not None
        return self.server.port

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def config(self) -> SimConfig:
        return self.server.config

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run fn on the server's loop and return its result (thread-safe control)."""
        assert self._loop is not None

        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(STOP_TIMEOUT_S)

    def reset_counters(self) -> None:
        self.call(lambda: self.server.engine.reset_counters() if self.server.engine else None)

    def set_foreign_load(self, n: int) -> None:
        self.call(lambda: self.server.engine.set_foreign_load(n) if self.server.engine else None)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(STOP_TIMEOUT_S)

    def __enter__(self) -> SimHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
