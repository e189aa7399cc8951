"""The simulator's HTTP server: routes and connections (handle.py runs it in a thread).

    with SimServer(SimConfig(time_scale=0.1)).start_in_thread() as sim:
        httpx.post(f"{sim.url}/v1/chat/completions", json=...)
        sim.truth[response_id].decode_rate_real_tps
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST

from decodescope.errors import DecodescopeError, UsageError
from decodescope.sim import http
from decodescope.sim.completions import (
    ApiError,
    CollectEmitter,
    ParsedRequest,
    StreamEmitter,
    parse_completion,
)
from decodescope.sim.config import FaultSpec, SimConfig
from decodescope.sim.metrics import SimCollector, render_metrics
from decodescope.sim.openai import HTML_PAGE, Formatter, error_body
from decodescope.sim.runtime import ActiveRequest, Engine
from decodescope.sim.tokenizer import chat_token_ids, token_ids, tokenize
from decodescope.sim.truth import RequestTruth, Truth
from decodescope.sim.vlog import VllmLogWriter

Handler = Callable[[http.HttpRequest, asyncio.StreamWriter], Awaitable[bool]]


class SimServer:
    def __init__(self, config: SimConfig | None = None):
        self.config = config or SimConfig()
        self.truth = Truth(self.config.max_truth_requests)
        self.port: int | None = None
        self.engine: Engine | None = None
        self._server: asyncio.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._conns: set[asyncio.Task[Any]] = set()
        # Each connection's writer from the moment it is accepted (its task may not have run
        # a step yet when the server stops): stop() closes what is left, so no socket is lost.
        self._writers: set[asyncio.StreamWriter] = set()
        self._stopping = False
        self._log: VllmLogWriter | None = None
        self._created = int(time.time())
        self._routes: dict[tuple[str, str], Handler] = {
            ("GET", "/health"): self._health,
            ("GET", "/version"): self._version,
            ("GET", "/v1/models"): self._models,
            ("GET", "/metrics"): self._metrics,
            ("POST", "/tokenize"): self._tokenize,
            ("POST", "/v1/chat/completions"): self._chat,
            ("POST", "/v1/completions"): self._completions,
            ("GET", "/sim/truth"): self._truth_all,
            ("POST", "/sim/counter_reset"): self._counter_reset,
        }

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    # ---- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        cfg = self.config
        self.engine = Engine(cfg)
        self._collector = SimCollector(self.engine, cfg.model)
        try:
            self._server = await asyncio.start_server(
                self._accept, cfg.host, cfg.port, limit=http.MAX_HEADER_BYTES)
        except OSError as exc:
            raise UsageError(f"cannot listen on {cfg.host}:{cfg.port}: {exc.strerror}",
                             where="decodescope sim", remedy="pick another --port") from exc
        self.port = self._server.sockets[0].getsockname()[1]
        self._tasks.append(asyncio.create_task(self.engine.run()))
        if cfg.log_path:
            self._log = VllmLogWriter(self.engine, cfg, cfg.log_path, self.url)
            self._tasks.append(asyncio.create_task(self._log.run()))

    async def stop(self) -> None:
        self._stopping = True
        if self._server is not None:
            # Stop accepting, then let the accepts already made (asyncio accepts a backlog at
            # once and makes each transport in a task of its own) end before close(): one
            # that ends after it fails in Server._attach (Python 3.11) and leaves its socket
            # open. _accept closes each of them at once.
            loop = asyncio.get_running_loop()
            for sock in self._server.sockets:
                loop.remove_reader(sock.fileno())
            for _ in range(ACCEPT_TURNS):
                await asyncio.sleep(0)
            self._server.close()
        for task in [*self._conns, *self._tasks]:
            task.cancel()
        await asyncio.gather(*self._conns, *self._tasks, return_exceptions=True)
        # A connection accepted just before close() whose task never ran a step: its
        # coroutine's `finally` never runs, so its writer is closed here.
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()
        self._conns.clear()
        await asyncio.sleep(0)  # the transports' connection_lost: their sockets close
        if self._server is not None:
            await self._server.wait_closed()
        if self._log is not None:
            self._log.close()

    async def serve(self, stop: asyncio.Event) -> None:
        await self.start()
        try:
            await stop.wait()
        finally:
            await self.stop()

    def start_in_thread(self) -> SimHandle:
        """Serve from a daemon thread with its own event loop; returns when it listens."""
        return SimHandle(self)

    # ---- connections --------------------------------------------------------------------
    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Called by asyncio as the connection is made (not a coroutine, so the writer is
        known before any task step): one task serves it; after stop() it is closed at once."""
        if self._stopping:
            writer.close()
            return
        self._writers.add(writer)
        self._conns.add(asyncio.get_running_loop().create_task(
            self._on_connection(reader, writer)))

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        try:
            while True:
                try:
                    req = await http.read_request(reader, writer)
                except (http.HttpParseError, ValueError) as exc:
                    writer.write(http.json_response(400, error_body(400, str(exc)), False))
                    break
                if req is None:
                    break
                if not await self._dispatch(req, writer) or not req.keep_alive:
                    break
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass  # server stop; end normally (asyncio's stream callback logs cancelled tasks)
        finally:
            if task is not None:
                self._conns.discard(task)
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _dispatch(self, req: http.HttpRequest, writer: asyncio.StreamWriter) -> bool:
        handler = self._routes.get((req.method, req.path))
        if handler is None and req.method == "GET" and req.path.startswith("/sim/truth/"):
            handler = self._truth_one
        if handler is None:
            known = any(path == req.path for _, path in self._routes)
            status, detail = (405, "Method Not Allowed") if known else (404, "Not Found")
            writer.write(http.json_response(status, {"detail": detail}, req.keep_alive))
            return True
        if self.config.api_key and req.path.startswith("/v1/"):
            auth = req.headers.get("authorization", "")
            if auth != f"Bearer {self.config.api_key}":
                writer.write(http.json_response(401, {"error": "Unauthorized"}, req.keep_alive))
                return True
        return await handler(req, writer)

    def _json(self, writer: asyncio.StreamWriter, req: http.HttpRequest, obj: Any,
              status: int = 200) -> bool:
        writer.write(http.json_response(status, obj, req.keep_alive))
        return True

    # ---- simple endpoints ---------------------------------------------------------------
    async def _health(self, req: http.HttpRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(http.response(200, b"", "application/json", req.keep_alive))
        return True

    async def _version(self, req: http.HttpRequest, writer: asyncio.StreamWriter) -> bool:
        return self._json(writer, req, {"version": self.config.version, "simulated": True})

    async def _models(self, req: http.HttpRequest, writer: asyncio.StreamWriter) -> bool:
        m = self.config.model
        card = {"id": m, "object": "model", "created": self._created, "owned_by": "vllm",
                "root": m, "parent": None, "max_model_len": self.config.max_model_len,
                "permission": [], "simulated": True}
        return self._json(writer, req, {"object": "list", "data": [card]})

    async def _metrics(self, req: http.HttpRequest, writer: asyncio.StreamWriter) -> bool:
        body = render_metrics(self._collector)
        writer.write(http.response(200, body, CONTENT_TYPE_LATEST, req.keep_alive))
        return True

    async def _tokenize(self, req: http.HttpRequest, writer: asyncio.StreamWriter) -> bool:
        try:
            body = req.json()
            if "messages" in body:
                ids = chat_token_ids(body["messages"], bool(body.get("add_generation_prompt", True)))
            elif isinstance(body.get("prompt"), str):
                ids = token_ids(tokenize(body["prompt"]))
            else:
                raise ValueError("give `prompt` (a string) or `messages`")
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            return self._json(writer, req, error_body(400, f"bad tokenize request: {exc}"), 400)
        return self._json(writer, req, {"count": len(ids), "max_model_len": self.config.max_model_len,
                                        "tokens": ids, "token_strs": None})

    async def _truth_all(self, req: http.HttpRequest, writer: asyncio.StreamWriter) -> bool:
        reqs = [r.summary() for r in self.truth.requests()]
        return self._json(writer, req, {"simulated": True, "requests": reqs})

    async def _truth_one(self, req: http.HttpRequest, writer: asyncio.StreamWriter) -> bool:
        rec = self.truth.get(req.path.removeprefix("/sim/truth/"))
        if rec is None:
            return self._json(writer, req, {"detail": "Not Found"}, 404)
        return self._json(writer, req, rec.to_dict())

    async def _counter_reset(self, req: http.HttpRequest, writer: asyncio.StreamWriter) -> bool:
        assert self.engine is not None
        self.engine.reset_counters()
        return self._json(writer, req, {"reset": True})

    # ---- completions --------------------------------------------------------------------
    async def _chat(self, req: http.HttpRequest, writer: asyncio.StreamWriter) -> bool:
        return await self._complete(req, writer, "chat")

    async def _completions(self, req: http.HttpRequest, writer: asyncio.StreamWriter) -> bool:
        return await self._complete(req, writer, "completions")

    async def _complete(self, req: http.HttpRequest, writer: asyncio.StreamWriter, endpoint: str) -> bool:
        cfg, engine = self.config, self.engine
        assert engine is not None
        keep = req.keep_alive
        try:
            faults = cfg.faults.merged(FaultSpec.parse(req.headers.get("x-sim-fault", "")))
        except DecodescopeError as exc:
            return self._json(writer, req, error_body(400, exc.one_line()), 400)
        if faults.counter_reset:
            engine.reset_counters()
        if faults.html:
            writer.write(http.response(200, HTML_PAGE, "text/html; charset=utf-8", keep))
            return True
        if faults.status:
            extra = {"retry-after": "1"} if faults.status == 429 else None
            msg = f"simulated fault: HTTP {faults.status}"
            writer.write(http.json_response(faults.status, error_body(faults.status, msg), keep, extra))
            return True
        try:
            parsed = parse_completion(cfg, endpoint, req.json(), req.headers)
        except ApiError as exc:
            return self._json(writer, req, error_body(exc.status, exc.message), exc.status)
        except (ValueError, UnicodeDecodeError) as exc:
            return self._json(writer, req, error_body(400, f"invalid JSON body: {exc}"), 400)
        return await self._run(req, writer, endpoint, parsed, faults)

    async def _run(self, req: http.HttpRequest, writer: asyncio.StreamWriter, endpoint: str,
                   parsed: ParsedRequest, faults: FaultSpec) -> bool:
        cfg, engine = self.config, self.engine
        assert engine is not None
        xid = req.headers.get("x-request-id") or None
        prefix = "chatcmpl-" if endpoint == "chat" else "cmpl-"
        response_id = prefix + (xid or uuid.uuid4().hex)
        rec = RequestTruth(response_id, xid, endpoint, parsed.spec.content_class,
                           parsed.spec.thinking, parsed.stream, cfg.time_scale,
                           parsed.spec.prompt_tokens, parsed.spec.max_tokens, faults.describe(),
                           time.monotonic())
        self.truth.add(rec)
        fmt = Formatter(endpoint, response_id, cfg.model, int(time.time()), cfg.reasoning_field,
                        parsed.spec.prompt_tokens, cfg.report_reasoning_tokens)
        emitter: StreamEmitter | CollectEmitter
        if parsed.stream:
            emitter = StreamEmitter(cfg, writer, fmt, parsed, faults, rec)
            headers = {"content-type": "text/event-stream; charset=utf-8",
                       "x-request-id": xid or response_id, "server": "decodescope-sim"}
            if emitter.chunked:
                headers.update({"transfer-encoding": "chunked",
                                "connection": "keep-alive" if req.keep_alive else "close"})
            else:
                headers["connection"] = "close"
            writer.write(http.head(200, headers))
        else:
            emitter = CollectEmitter(faults, rec, cfg)
        active = ActiveRequest(cfg, parsed.spec, rec, emitter, foreign_extra=faults.foreign_load)
        engine.submit(active)
        try:
            await active.done
        finally:
            if not active.done.done():
                engine.abort(active)
        if isinstance(emitter, StreamEmitter):
            return emitter.chunked and not rec.aborted
        if rec.aborted:
            return False
        usage = None if faults.no_usage else fmt.usage(emitter.sent, len(emitter.reasoning))
        obj = fmt.full("".join(emitter.reasoning), "".join(emitter.content), rec.finish_reason, usage)
        body = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
        if faults.malformed_after_tokens is not None:
            body = body[: len(body) // 2]
        extra = {"x-request-id": xid or response_id}
        writer.write(http.response(200, body, "application/json", req.keep_alive, extra))
        return True

STOP_TIMEOUT_S = 5.0
STOP_DRAIN_S = 1.0  # a stopped handle lets pending tasks (accepts in flight) end this long
ACCEPT_TURNS = 4  # loop turns stop() gives accepts in flight to make their transports


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
            # A task still pending (an accept in flight as the server closed) runs to its end,
            # which closes its socket (cancelled before its first step, it would leave the
            # socket open); what is still pending after STOP_DRAIN_S is cancelled.
            left = asyncio.all_tasks(loop)
            if left:
                loop.run_until_complete(asyncio.wait(left, timeout=STOP_DRAIN_S))
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            if left:
                loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
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
