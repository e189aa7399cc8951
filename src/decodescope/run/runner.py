"""Run a probe: trials x concurrency streaming requests under one caliber, each trial committed
to the store as soon as it completes; Ctrl-C keeps completed trials and marks the run
interrupted."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from decodescope.analysis.run_result import analyze_run
from decodescope.caliber.conformance import check_request
from decodescope.caliber.spec import Caliber
from decodescope.edge import MODELS, side_request
from decodescope.errors import DecodescopeError, ModelNotServedError, UnreachableError
from decodescope.probe import client as cl
from decodescope.probe.load_shape import RequestBodies, load_period
from decodescope.probe.prompt import RealizedPrompt, realize, server_tokenizer
from decodescope.probe.request import base_url, build_body, endpoint_path
from decodescope.records.findings import Finding
from decodescope.records.request_metrics import compute
from decodescope.records.trace import Chunk, RequestTrace
from decodescope.run.observer_protocol import Observer
from decodescope.store import runs as store_runs
from decodescope.store.db import Store
from decodescope.telemetry.detect import EngineInfo, detect_engine


@dataclass
class ProbeSettings:
    url: str
    caliber: Caliber
    trials: int = 3
    labels: dict[str, str] = field(default_factory=dict)
    model: str | None = None
    api_key: str | None = None
    proxy: str | None = None
    # Requests sent before the first trial and not counted: n-gram / suffix speculators learn
    # from earlier outputs, and caches warm up; the first counted trial then looks like the rest.
    warmup: int = 1
    caliber_path: str | None = None  # the caliber's .toml file, when it came from one

    def __post_init__(self) -> None:
        self.url = base_url(self.url)  # ".../v1" works as OpenAI clients take it


@dataclass
class ProbeOutcome:
    run_id: int
    status: str
    engine: EngineInfo
    model: str | None
    prompt: RealizedPrompt
    result: dict[str, Any]
    findings: list[Finding]


ProgressFn = Callable[[int, int, int], None]  # (trial index, tokens so far, tokens expected)
Hook = Callable[..., Any]


def prepare(settings: ProbeSettings) -> tuple[EngineInfo, str | None, RealizedPrompt]:
    """Detect the engine, check the model is served, realize the prompt. Raises before any run
    is created when the server cannot be used."""
    headers = cl.auth_headers(settings.api_key)
    with httpx.Client(trust_env=False, proxy=settings.proxy, timeout=30.0, headers=headers) as c:
        try:
            side_request(c, "GET", settings.url, MODELS)
        except httpx.HTTPError as exc:
            raise UnreachableError(f"cannot reach the server: {exc or type(exc).__name__}",
                                   where=settings.url,
                                   remedy="Is it running? Check host:port; `decodescope doctor URL` explains proxies") from None
        info = detect_engine(settings.url, client=c)
        model = settings.model
        if model is None and info.models:
            model = info.models[0]
        elif model is not None and info.models and model not in info.models:
            raise ModelNotServedError(f"model {model!r} is not served",
                                      where=settings.url,
                                      remedy=f"Served: {', '.join(info.models)}; pass one with --model")
        prompt = realize(settings.caliber, server_tokenizer(c, settings.url, model))
    return info, model, prompt


def run_probe(settings: ProbeSettings, store: Store, *, observers: list[Observer] = (),  # type: ignore[assignment]
              progress: ProgressFn | None = None, fingerprint: dict[str, Any] | None = None,
              prepared: tuple[EngineInfo, str | None, RealizedPrompt] | None = None,
              on_created: Callable[[int], None] | None = None) -> ProbeOutcome:
    """`on_created(run_id)` is called once the run exists (the CLI names it on Ctrl-C)."""
    info, model, prompt = prepared or prepare(settings)
    cal = settings.caliber
    run_id = store_runs.create_run(
        store, url=_safe_url(settings.url), model=model, engine=info.kind, caliber=cal.to_dict(),
        caliber_ref=cal.ref, caliber_identity=cal.identity, labels=settings.labels,
        simulated=info.simulated, fingerprint=fingerprint,
        meta={"engine_info": info.to_dict(), "prompt": prompt.to_dict(), "trials": settings.trials,
              "concurrency": cal.concurrency, "warmup": settings.warmup,
              "seed_schedule": seed_schedule(cal),
              **({"caliber_path": settings.caliber_path} if settings.caliber_path else {}),
              **({"load": dataclasses.asdict(cal.load)} if not cal.load.classic else {}),
              **({"dataset_path": cal.dataset.path} if cal.dataset else {})},
    )
    if on_created is not None:
        on_created(run_id)
    findings: list[Finding] = []
    status = "running"
    stop: dict[str, Any] | None = None  # what ended the run early (meta.stop)
    for ob in observers:
        ob.start()
    # Move what exists now out of the collector's reach: full collections during a trial cost
    # ~13 ms pauses that show up as receipt-time outliers (docs/performance.md).
    gc.collect()
    gc.freeze()
    try:
        asyncio.run(_trials(settings, store, run_id, model, prompt, observers, progress, findings))
        status = "complete"
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (signals.Terminated)
        status = "interrupted"
        stop = {"signal": getattr(exc, "signal_name", "SIGINT")}
        raise
    except BaseException as exc:
        status = "failed"
        stop = _stop_cause(exc)
        raise
    finally:
        gc.unfreeze()
        _finish(store, run_id, status, observers, findings, stop)
    run = store_runs.get_run(store, run_id)
    return ProbeOutcome(run_id, status, info, model, prompt, run.result or {}, findings)


async def _trials(settings: ProbeSettings, store: Store, run_id: int, model: str | None,
                  prompt: RealizedPrompt, observers: list[Observer], progress: ProgressFn | None,
                  findings: list[Finding]) -> None:
    cal = settings.caliber
    bodies = RequestBodies(cal, build_body(cal, model, prompt.text), model)
    path = endpoint_path(cal)
    per_trial = cal.concurrency if cal.load.classic else (cal.load.num_requests or cal.concurrency)
    expected = cal.output.max_tokens * per_trial
    sent = 0  # requests of the counted trials so far: request j's seed and dataset entry
    async with cl.make_client(settings.proxy, max_connections=max(8, cal.concurrency)) as client:
        expected_s = None
        for w in range(settings.warmup):
            warm = await cl.stream_request(client, settings.url, path, bodies.warmup(w),
                                           api_key=settings.api_key)
            if not warm.ok:
                break  # the first trial meets the same fault, and is stored with its trace
            expected_s = _steady_seconds([warm], cal.output.steady_state_start) or expected_s
        for idx in range(settings.trials):
            for ob in observers:
                plan = getattr(ob, "plan", None)
                if plan is not None:
                    plan(idx, expected_s)
            started = time.time()
            anchor = time.time() - time.perf_counter()
            t0 = time.perf_counter()
            for ob in observers:
                ob.mark(f"trial_start:{idx}", t0)
            counter = [0]

            def on_chunk(ch: Chunk, idx: int = idx, counter: list[int] = counter) -> None:
                counter[0] += ch.tokens if ch.tokens is not None else int(bool(ch.content or ch.reasoning))
                if progress:
                    progress(idx, counter[0], expected)

            def send(j: int, first: int = sent, on_chunk: Callable[[Chunk], None] = on_chunk
                     ) -> Any:
                return cl.stream_request(client, settings.url, path, bodies.body(first + j),
                                         api_key=settings.api_key, on_chunk=on_chunk)

            traces: list[RequestTrace]
            if cal.load.classic:  # every stream's one request at once
                traces = list(await asyncio.gather(*[send(j) for j in range(cal.concurrency)]))
            else:  # one load period: its requests are the trial's members
                traces = await load_period(cal, send, seed=idx)
            sent += len(traces)
            for ob in observers:
                ob.mark(f"trial_end:{idx}", time.perf_counter())
            traces = count_tokens(traces, settings, model)
            try:
                per_req = [compute(t, cal.output.steady_state_start) for t in traces]
            except Exception:  # a bug: the trial's traces are stored all the same
                store_runs.add_trial(store, run_id, idx, status="failed", started_at=started,
                                     wall_anchor_s=anchor, result=None, requests=traces)
                raise
            expected_s = _steady_seconds(traces, cal.output.steady_state_start) or expected_s
            failed = next((t for t in traces if not t.ok), None)
            trial_findings: list[Finding] = []
            for i, m in enumerate(per_req):
                if traces[i].ok:
                    trial_findings += check_request(cal, m, f"trial {idx + 1}, request {i + 1}")
            findings.extend(trial_findings)
            store_runs.add_trial(
                store, run_id, idx, status="failed" if failed else "ok", started_at=started,
                wall_anchor_s=anchor,
                result={"requests": [m.to_dict() for m in per_req],
                        "findings": [f.to_dict() for f in trial_findings]},
                requests=traces)
            if failed is not None:
                cl.raise_for_trace(failed)


def seed_schedule(cal: Caliber) -> str | None:
    """The caliber's seed schedule (part of its identity), with its base seed."""
    sched = cal.seed_schedule
    return f"{sched} (from {cal.sampling.seed})" if sched else None


def _steady_seconds(traces: list[RequestTrace], steady_start: int) -> float | None:
    """The longest steady-state duration among these requests (plans the scrape interval)."""
    spans = [m.steady_t_end_s - m.steady_t_start_s for m in (compute(t, steady_start)
                                                              for t in traces if t.ok)
             if m.steady_t_start_s is not None and m.steady_t_end_s is not None]
    return max(spans) if spans else None


# Tokenizing a stream without usage costs one request per chunk; beyond this many chunks the
# count stays unknown rather than holding the probe.
MAX_TOKENIZE_CHUNKS = 20_000


def count_tokens(traces: list[RequestTrace], settings: ProbeSettings, model: str | None
                 ) -> list[RequestTrace]:
    """Streams that carried no usage at all: count each chunk's tokens with the server's
    tokenize endpoint (vLLM, llama.cpp) into `extra["chunk_tokens"]`. Without one the token
    count stays unknown (records/request_metrics.py withholds the decode rate). Never raises:
    a tokenize answer that breaks the protocol (an absurd count, past its size limit or its
    deadline) fails that trace with the error, its chunks kept, and the rest stay uncounted."""
    todo = [i for i, t in enumerate(traces)
            if t.ok and t.completion_tokens is None and not all(c.tokens is not None
                                                                 for c in t.chunks)]
    if not todo:
        return traces
    out = list(traces)
    headers = cl.auth_headers(settings.api_key)
    with httpx.Client(trust_env=False, proxy=settings.proxy, timeout=10.0,
                      headers=headers) as c:
        count = server_tokenizer(c, settings.url, model)
        for i in todo:
            tr = traces[i]
            if len(tr.chunks) > MAX_TOKENIZE_CHUNKS:
                continue
            counts: list[int | None] = []
            for ch in tr.chunks:
                text = ch.reasoning + ch.content
                try:
                    n = count(text) if text else 0
                except DecodescopeError as exc:
                    out[i] = dataclasses.replace(tr, error=exc.one_line(),
                                                 error_kind=type(exc).__name__)
                    return out
                if n is None:  # no tokenize endpoint: stays unknown
                    return out
                counts.append(n)
            out[i] = dataclasses.replace(tr, extra={**tr.extra, "chunk_tokens": counts})
    return out


def _stop_cause(exc: BaseException) -> dict[str, Any]:
    """A failure's one line, as the CLI prints it (stored redacted, like every column)."""
    one_line = getattr(exc, "one_line", None)
    text = one_line() if callable(one_line) else " ".join(str(exc).split())[:300]
    return {"error": text or type(exc).__name__, "error_kind": type(exc).__name__}


def _finish(store: Store, run_id: int, status: str, observers: list[Observer],
            findings: list[Finding], stop: dict[str, Any] | None = None) -> None:
    store_observed(store, run_id, observers, findings)
    run = store_runs.get_run(store, run_id)
    try:
        result = analyze_run(run, extra_findings=findings)
    except Exception as exc:  # a bug: the run is still closed with its status, never left
        # "running"; it raises unless the run already ends with its own error
        store_runs.update_run(store, run_id, status="failed" if status == "complete" else status,
                              meta={**run.meta, "stop": stop or _stop_cause(exc)})
        if status == "complete":
            raise
        return
    store_runs.update_run(store, run_id, status=status, result=result,
                          warnings=result.get("findings", []),
                          **({"meta": {**run.meta, "stop": stop}} if stop else {}))


def store_observed(store: Store, run_id: int, observers: list[Observer],
                   findings: list[Finding]) -> None:
    """Stop the observers and store what they saw in the run (windows, series, fingerprint
    parts); their findings join `findings`. A failing observer is a finding, never a lost
    run."""
    for ob in observers:
        try:
            res = ob.stop()
        except Exception as exc:  # an observer must never lose the measured trials
            findings.append(Finding("observer.failed", f"{ob.name} failed: {exc}",
                                    "Rerun with --debug to see why", severity="warning"))
            continue
        if res.windows:
            store_runs.add_windows(store, run_id, res.windows)
        for name, data in res.series.items():
            store_runs.add_series(store, run_id, name, data)
        findings.extend(res.findings)
        if res.fingerprint:
            run = store_runs.get_run(store, run_id, with_traces=False)
            fp = dict(run.fingerprint or {})
            fp.update(res.fingerprint)
            store_runs.update_run(store, run_id, fingerprint=fp)


def _safe_url(url: str) -> str:
    try:
        from decodescope.redact import redact_url
    except ImportError:  # pragma: no cover - redact ships with the package
        u = httpx.URL(url)
        return str(u.copy_with(username=None, password=None))
    return str(redact_url(url))
