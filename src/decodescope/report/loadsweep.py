"""A load sweep as data (pure): one point per load (concurrency or request rate), each a stored
run, with the throughput–latency numbers the peers plot, and its table, CSV and plots.

Per point: decode rate **per request** (the verdict's statistic: median over trials, engine
when it decides), output and request throughput of **all requests** (median over trials),
TTFT / ITL / TPOT / e2e percentiles over the point's requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from decodescope.markup import html as escape
from decodescope.markup import md_cell
from decodescope.records.stored_run import StoredRun
from decodescope.report.plotdata import Plot, Series
from decodescope.report.runs_table import run_row, to_csv
from decodescope.report.text_table import text_table

LOAD_AXES = {"concurrency": "concurrency (requests in flight)",
             "request_rate": "request rate (requests / s)"}


@dataclass(frozen=True)
class LoadPoint:
    axis: str  # "concurrency" | "request_rate"
    value: float
    row: dict[str, Any]  # report.runs_table.run_row of the point's run

    @property
    def run_id(self) -> int:
        return int(self.row["run_id"])


@dataclass(frozen=True)
class LoadSweep:
    axis: str
    caliber: str | None
    points: tuple[LoadPoint, ...]
    simulated: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "decodescope.load_sweep", "axis": self.axis, "caliber": self.caliber,
                "simulated": self.simulated, "notes": list(self.notes),
                "points": [{"load": p.value, **p.row} for p in self.points]}


def load_sweep(axis: str, values: Sequence[float], runs: Sequence[StoredRun]) -> LoadSweep:
    points = tuple(LoadPoint(axis, v, run_row(r)) for v, r in zip(values, runs, strict=True))
    return LoadSweep(axis, runs[0].caliber_ref if runs else None, points,
                     simulated=any(r.simulated for r in runs), notes=queue_notes(axis, values, runs))


def queue_notes(axis: str, values: Sequence[float], runs: Sequence[StoredRun]) -> tuple[str, ...]:
    """One line per point whose offered load queued at the server (analysis.queueing, stored
    with the run's result): its TTFT includes the wait."""
    name = "concurrency" if axis == "concurrency" else "request rate"
    out = []
    for v, r in zip(values, runs, strict=True):
        q = (r.result or {}).get("queueing")
        if isinstance(q, dict) and q.get("text"):
            out.append(f"{name} {v:g}: {q['text']}")
    return tuple(out)


def _ms(v: Any) -> str:
    return "—" if v is None else f"{v:.1f}"


def _num(v: Any, fmt: str = "{:.1f}") -> str:
    return "—" if v is None else fmt.format(v)


def render_text(s: LoadSweep) -> str:
    head = "concurrency" if s.axis == "concurrency" else "req/s"
    rows = [[_num(p.value, "{:g}"), str(p.run_id),
             _num(p.row["decode_rate_tok_s"]), p.row["decode_rate_source"] or "—",
             _num(p.row["output_throughput_all_tok_s"]),
             _num(p.row["request_throughput_all_req_s"], "{:.2f}"),
             _ms(p.row["ttft_p50_ms"]), _ms(p.row["ttft_p90_ms"]), _ms(p.row["ttft_p99_ms"]),
             _ms(p.row["itl_p50_ms"]), _ms(p.row["itl_p90_ms"]), _ms(p.row["itl_p99_ms"]),
             _ms(p.row["tpot_p50_ms"]), _ms(p.row["e2e_p50_ms"])] for p in s.points]
    sim = " [SIMULATED]" if s.simulated else ""
    lines = [f"load sweep of {s.caliber} over {LOAD_AXES[s.axis]}{sim}",
             text_table([head, "run", "decode tok/s", "source", "output tok/s", "req/s",
                         "TTFT p50", "p90", "p99", "ITL p50", "p90", "p99", "TPOT p50",
                         "e2e p50"], rows, right=(0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13)),
             "decode tok/s: per request (median over trials; the verdict's number); output "
             "tok/s and req/s: all requests (median over trials); latencies in ms over all "
             "requests of the point"]
    lines += list(s.notes)
    return "\n".join(lines)


def render_csv(s: LoadSweep) -> str:
    return to_csv([{"load_axis": s.axis, "load": p.value, **p.row} for p in s.points])


def render_md(s: LoadSweep) -> str:
    head = "| load | run | decode tok/s (per request) | source | output tok/s (all requests) | TTFT p50 / p99 ms | ITL p50 / p99 ms |"
    lines = [head, "|---:|---:|---:|---|---:|---:|---:|"]
    for p in s.points:
        r = p.row
        lines.append(f"| {p.value:g} | {p.run_id} | {_num(r['decode_rate_tok_s'])} | "
                     f"{md_cell(r['decode_rate_source'] or '—')} | {_num(r['output_throughput_all_tok_s'])} | "
                     f"{_ms(r['ttft_p50_ms'])} / {_ms(r['ttft_p99_ms'])} | "
                     f"{_ms(r['itl_p50_ms'])} / {_ms(r['itl_p99_ms'])} |")
    if s.notes:
        lines.append("")
        lines += [f"- {md_cell(n)}" for n in s.notes]
    return "\n".join(lines)


def _series(s: LoadSweep, key: str, name: str, color: int, x_key: str | None = None
            ) -> Series:
    pts = tuple(((p.row[x_key] if x_key else p.value), p.row.get(key)) for p in s.points
                if (p.row[x_key] if x_key else p.value) is not None)
    return Series(name, None, color, "client", tuple(sorted(pts, key=lambda q: q[0])))


def plots(s: LoadSweep) -> tuple[Plot, ...]:
    x = LOAD_AXES[s.axis]
    out = [
        Plot("decode-vs-load", "Decode rate per request against load", "line", x,
             "decode rate (tok/s per request)",
             (_series(s, "decode_rate_tok_s", "per request (median over trials)", 0),)),
        Plot("throughput-vs-load", "Output throughput of all requests against load", "line", x,
             "output throughput (tok/s, all requests)",
             (_series(s, "output_throughput_all_tok_s", "all requests (median over trials)", 1),)),
        Plot("ttft-vs-load", "TTFT percentiles against load", "line", x, "TTFT (ms)",
             tuple(_series(s, f"ttft_{q}_ms", q, i) for i, q in enumerate(("p50", "p90", "p99")))),
        Plot("itl-vs-load", "ITL percentiles against load", "line", x, "ITL (ms)",
             tuple(_series(s, f"itl_{q}_ms", q, i) for i, q in enumerate(("p50", "p90", "p99")))),
        Plot("latency-vs-throughput", "Throughput–latency curve", "line",
             "output throughput (tok/s, all requests)", "TTFT / ITL p50 (ms)",
             (_series(s, "ttft_p50_ms", "TTFT p50", 0, "output_throughput_all_tok_s"),
              _series(s, "itl_p50_ms", "ITL p50", 1, "output_throughput_all_tok_s"))),
    ]
    return tuple(p if any(se.has_data for se in p.series) else
                 Plot(p.id, p.title, p.kind, p.x_label, p.y_label, (),
                      no_data="no point of the sweep has this number") for p in out)


def render_html(s: LoadSweep) -> str:
    """A self-contained page: the table and the plots (inline SVG, no script)."""
    from decodescope.report.report_html import CSP, _css, _plots
    from decodescope.report.report_html import _table as table

    title = f"decodescope load sweep: {s.caliber}" + (" [SIMULATED]" if s.simulated else "")
    rows = [(f"{p.value:g}", str(p.run_id), _num(p.row["decode_rate_tok_s"]),
             p.row["decode_rate_source"] or "—", _num(p.row["output_throughput_all_tok_s"]),
             f"{_ms(p.row['ttft_p50_ms'])} / {_ms(p.row['ttft_p99_ms'])}",
             f"{_ms(p.row['itl_p50_ms'])} / {_ms(p.row['itl_p99_ms'])}") for p in s.points]
    return "\n".join([
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        f"<title>{escape(title)}</title><style>{_css()}</style></head><body><main>",
        f"<header><h1>{escape(title)}</h1></header>",
        '<section id="points"><h2>Points</h2>',
        table(("load", "run", "decode tok/s (per request)", "source",
               "output tok/s (all requests)", "TTFT p50 / p99 ms", "ITL p50 / p99 ms"), rows,
              "numbers"),
        *([f'<ul class="notes">{"".join(f"<li>{escape(n)}</li>" for n in s.notes)}</ul>']
          if s.notes else []),
        "</section>", _plots(plots(s)), "</main></body></html>"]) + "\n"
