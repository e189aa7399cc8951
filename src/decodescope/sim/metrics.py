"""GET /metrics: the engine's live counters under vLLM V1 names, rendered by prometheus_client.

Labels as vLLM V1: model_name and engine="0"; per-position adds position="0".."k-1".
A counter reset (fault) starts every counter from 0 and moves its `_created` time.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from decodescope.sim.counters import ITERATION_BUCKETS
from decodescope.sim.runtime import Engine

LABELS = ["model_name", "engine"]


class SimCollector(Collector):
    def __init__(self, engine: Engine, model: str):
        self.engine = engine
        self.labels = [model, "0"]

    def _counter(self, name: str, doc: str, value: float) -> CounterMetricFamily:
        fam = CounterMetricFamily(name, doc, labels=LABELS)
        fam.add_metric(self.labels, value, created=self.engine.metrics_created_wall_s)
        return fam

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        fam = GaugeMetricFamily(name, doc, labels=LABELS)
        fam.add_metric(self.labels, value)
        return fam

    def collect(self) -> Iterator[Metric]:
        e, c = self.engine, self.engine.counters
        yield self._gauge("vllm:num_requests_running", "Number of requests in model execution batches.", e.num_running)
        yield self._gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", e.num_waiting)
        yield self._gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", e.kv_usage)
        yield self._counter("vllm:prompt_tokens", "Number of prefill tokens processed.", c.prompt_tokens)
        yield self._counter("vllm:generation_tokens", "Number of generation tokens processed.", c.generation_tokens)
        if e.cfg.k > 0:  # like vLLM: no spec-decode series without --speculative-config
            yield self._counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", c.drafts)
            yield self._counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", c.draft_tokens)
            yield self._counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", c.accepted_tokens)
            per_pos = CounterMetricFamily(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                labels=[*LABELS, "position"],
            )
            for i, n in enumerate(c.accepted_per_pos):
                per_pos.add_metric([*self.labels, str(i)], n, created=e.metrics_created_wall_s)
            yield per_pos
        success = CounterMetricFamily(
            "vllm:request_success", "Count of successfully processed requests.",
            labels=[*LABELS, "finished_reason"],
        )
        for reason in ("stop", "length", "abort"):
            success.add_metric([*self.labels, reason], c.request_success.get(reason, 0),
                               created=e.metrics_created_wall_s)
        yield success
        cumulative, buckets = 0, []
        for bound, n in zip([*(str(float(b)) for b in ITERATION_BUCKETS), "+Inf"], c.iteration_buckets, strict=True):
            cumulative += n
            buckets.append((bound, float(cumulative)))
        hist = HistogramMetricFamily(
            "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
            labels=LABELS,
        )
        hist.add_metric(self.labels, buckets, sum_value=c.iteration_sum)
        yield hist


def render_metrics(collector: SimCollector) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry)
