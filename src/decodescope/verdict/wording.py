"""The words of a verdict: the answer first, two or three lines of why, then the next step."""

from __future__ import annotations

import shlex

from decodescope.verdict import thresholds as th
from decodescope.verdict.advice import metrics_how, side_engine, spec_flags
from decodescope.verdict.imported import tool_of
from decodescope.verdict.rate_change import Decomposition, share
from decodescope.verdict.side import Side, windows_words
from decodescope.verdict.stats import Change, pct
from decodescope.verdict.types import Context, acceptance

# Built-in calibers that reproduce each MAL band's content, for "probe the same caliber".
CALIBER_FOR_BAND = {
    "code-like": "parity-code-32k",
    "ordinary text": "anchor-c1-out1280",
}


def _n(v: float | None, fmt: str = "{:.1f}") -> str:
    return "—" if v is None else fmt.format(v)


def _decode_key(ctx: Context, side: Side) -> str:
    if ctx.decode_source == "engine":
        return "engine_decode_rate"
    if ctx.decode_source.startswith("client"):
        return "decode_rate"
    return "engine_decode_rate" if side.values("engine_decode_rate") else "decode_rate"


def _arrow(ctx: Context, metric: str, fmt: str = "{:.1f}") -> str:
    """'a → b' from the same statistic as the change's percent (the geometric means of the
    per-unit values, Change.baseline / .current), so that the arrow and the percent agree;
    the side's median only when the change has no value on that side."""
    ch = ctx.changes.get(metric)
    if metric == "decode":
        b = ctx.baseline.median(_decode_key(ctx, ctx.baseline))
        c = ctx.current.median(_decode_key(ctx, ctx.current))
    else:
        b, c = ctx.baseline.median(metric), ctx.current.median(metric)
    if ch is not None:
        b = ch.baseline if ch.baseline is not None else b
        c = ch.current if ch.current is not None else c
    return f"{_n(b, fmt)} → {_n(c, fmt)}"


def _windows(ctx: Context) -> str:
    """What the window sides are: "log windows", "Prometheus windows", or both."""
    return windows_words(ctx.baseline, ctx.current)


def _where(ctx: Context) -> str:
    """How the caliber was established, for a REGRESSION / IMPROVEMENT headline."""
    b, c = ctx.baseline, ctx.current
    if ctx.caliber.same and (b.imported_from or c.imported_from):
        return (f"(the same recorded workload of {_windows(ctx)}; what they do not record "
                "assumed the same)")
    if not ctx.caliber.same:
        return f"(caliber unknown: {_windows(ctx)})"
    if b.caliber_identity and c.caliber_identity:
        return "at the same caliber"
    if b.caliber_asserted and c.caliber_asserted:
        return f"(caliber asserted with --assume-same-caliber; {_windows(ctx)})"
    return f"(same MAL band; {_windows(ctx)})"


def _dir(x: Change) -> str:
    return "down" if (x.rel or 0.0) < 0 else "up"


def _delta_of(dec: Decomposition) -> str:
    """Which log-delta a share is of: the headline's decode change, or — a split over the
    engine's pooled counts — the engine's pooled decode change, said with its numbers."""
    if dec.basis.startswith("pooled engine counts (engine decode"):
        return (f"engine's pooled log-delta, {dec.decode_baseline:.1f} → "
                f"{dec.decode_current:.1f} tok/s")
    return "log-delta"


def headline(ctx: Context) -> tuple[str, list[str]]:
    d, m, s = ctx.changes["decode"], ctx.changes["mal"], ctx.changes["step_rate"]
    dec = ctx.decomposition
    lines: list[str] = []
    drop = "drop" if (d.rel or 0.0) < 0 else "rise"
    step_line = f"step rate {_arrow(ctx, 'step_rate')} steps/s: {s.describe()}."
    if s.status == "no_data":  # the side table's numbers, and why no change is tested
        known = [x.typical("step_rate") for x in (ctx.baseline, ctx.current)]
        step_line = (f"step rate {_arrow(ctx, 'step_rate')} steps/s, not tested: {s.describe()}."
                     if all(v is not None for v in known) else
                     "step rate unknown: needs the engine's step counts on both sides.")
    if ctx.kind == "CALIBER_MISMATCH":
        if s.changed:
            head = (f"CALIBER MISMATCH — not like-for-like, and step rate is also {_dir(s)} "
                    f"{pct(abs(s.rel or 0.0)).lstrip('+')}: probe the same caliber before calling it.")
        elif s.status == "no_data":
            head = "CALIBER MISMATCH — not like-for-like; the numbers cannot be compared."
        else:
            head = "NOT A REGRESSION — caliber mismatch." if (d.rel or 0) < 0 else \
                "NOT AN IMPROVEMENT — caliber mismatch."
        if not d.changed and d.status != "no_data":
            # the acceptance factor the split reads (tokens per step when not every step drafts)
            name = dec.acceptance_metric if dec else "MAL"
            key = "tokens_per_step" if name == "tokens per step" else "mal"
            lines.append(f"Decode {_arrow(ctx, 'decode')} tok/s: {d.describe()}; {name} "
                         f"{_arrow(ctx, key, '{:.2f}')}.")
        elif dec and dec.share_mal is not None:
            # The acceptance factor of the split (MAL, or tokens per step when not every step
            # drafts) is named as the split names it, and "carried by" only when it carries
            # the change (rate_change.carrier: largest share and significant).
            name = dec.acceptance_metric
            key = "tokens_per_step" if name == "tokens per step" else "mal"
            against = s.changed and (dec.share_step or 0.0) < 0
            if dec.share_mal <= 0:
                carried, other = f"not carried by {name}", f"; {name} moved the other way"
            elif dec.carried_by != name:
                carried, other = f"not carried by {name} beyond noise", ""
            else:
                carried = (f"more than carried by {name}" if against and dec.share_mal > 1.0
                           else f"carried by {name}" if dec.share_mal >= th.MAL_CARRIES_SHARE
                           else f"only partly carried by {name}")
                other = "; step rate moved the other way" if against else ""
            lines.append(f"The {_arrow(ctx, 'decode')} tok/s {drop} ({pct(d.rel or 0.0)}) is "
                         f"{carried} ({_arrow(ctx, key, '{:.2f}')}, {share(dec.share_mal)} of the "
                         f"{_delta_of(dec)}{other});")
        elif m.status != "no_data" or ctx.baseline.median("mal") is not None:
            name = dec.acceptance_metric if dec else "MAL"
            key = "tokens_per_step" if name == "tokens per step" else "mal"
            lines.append(f"Decode {_arrow(ctx, 'decode')} tok/s ({pct(d.rel or 0.0)}); {name} "
                         f"{_arrow(ctx, key, '{:.2f}')}.")
        else:
            lines.append(f"Decode {_arrow(ctx, 'decode')} tok/s ({pct(d.rel or 0.0)}); the "
                         "split into step rate × MAL is unknown without engine numbers.")
        lines.append(step_line)
        lines.append(f"Calibers: {ctx.caliber.text}.")
    elif ctx.kind in ("REGRESSION", "IMPROVEMENT"):
        word = ctx.kind
        where = _where(ctx)
        if ctx.cause and ctx.cause.startswith("speculative decoding"):
            state = "off on the current side" if ctx.cause.endswith("off") else \
                "on on the current side only"
            head = (f"{word} — speculative decoding {state}: decode {_arrow(ctx, 'decode')} "
                    f"tok/s ({pct(d.rel or 0.0)}) {where}; without drafts MAL is 1 by definition "
                    f"(tokens per step {_arrow(ctx, 'tokens_per_step', '{:.2f}')}).")
        elif ctx.cause == "stalls":
            head = (f"{word} — stalls: the server paused inside the outputs "
                    f"({_stall_text(ctx.baseline)} → {_stall_text(ctx.current)}) {where}; "
                    "between stalls the decode rate did not move. Not a step-rate change.")
        elif ctx.cause == "step rate" and s.status == "no_data":  # by the identity
            head = (f"{word} — decode rate {_dir(d)} {pct(abs(d.rel or 0.0)).lstrip('+')} {where}"
                    f", MAL unchanged: the step rate carries it (decode = step rate × MAL; the "
                    f"step rate itself is not measured) (engine / hardware side).")
        elif ctx.cause == "step rate":
            head = (f"{word} — step rate {_dir(s)} {pct(abs(s.rel or 0.0)).lstrip('+')} {where} "
                    f"(engine / hardware side).")
        elif ctx.cause == "acceptance":
            acc = acceptance(ctx.changes, ctx.baseline, ctx.current)
            if acc is not m:
                head = (f"{word} — acceptance: tokens per step {_dir(acc)} "
                        f"{pct(abs(acc.rel or 0.0)).lstrip('+')} {where} (MAL "
                        f"{_arrow(ctx, 'mal', '{:.2f}')}).")
            else:
                head = f"{word} — acceptance: MAL {_dir(m)} {pct(abs(m.rel or 0.0)).lstrip('+')} {where}."
        else:
            head = (f"{word} — decode rate {_dir(d)} {pct(abs(d.rel or 0.0)).lstrip('+')} {where}; "
                    f"the split into step rate × MAL is "
                    f"{'unknown' if not (dec and dec.split_known) else 'within noise on each part'}.")
        lines.append(f"Decode {_arrow(ctx, 'decode')} tok/s: {d.describe()}.")
        # the acceptance factor the split uses: MAL, or tokens per step where a side's steps
        # do not all draft (a side without drafts prints MAL 1 in its log: not the factor)
        acc_f = acceptance(ctx.changes, ctx.baseline, ctx.current)
        if acc_f.status != "no_data":
            name, key = ("MAL", "mal") if acc_f is m else ("tokens per step", "tokens_per_step")
            lines.append(f"{name} {_arrow(ctx, key, '{:.2f}')}: {acc_f.describe()}; {step_line}")
        if dec and dec.split_known and dec.share_mal is not None:
            lines.append(dec.describe() + ".")
        if ctx.caliber.same is None:
            lines.append(f"Calibers: {ctx.caliber.text}.")
    elif ctx.kind == "NO_CHANGE":
        if d.status == "below_min_effect":
            head = (f"NO CHANGE — decode {_arrow(ctx, 'decode')} tok/s, {d.describe()}.")
        else:
            head = f"NO CHANGE — decode {_arrow(ctx, 'decode')} tok/s, {pct(d.rel or 0.0)}: not significant."
        if d.ci_lo is not None and d.ci_hi is not None:
            bound = max(abs(d.ci_lo), abs(d.ci_hi))
            lines.append(f"95% CI {pct(d.ci_lo)} … {pct(d.ci_hi)}: a change larger than "
                         f"{bound:.1%} is ruled out; smaller ones are not.")
        if m.status != "no_data":
            lines.append(f"MAL {_arrow(ctx, 'mal', '{:.2f}')}: {m.describe()}; {step_line}")
        if ctx.caliber.same is None:
            lines.append(f"Calibers: {ctx.caliber.text}.")
    elif ctx.kind == "CONTAMINATED":
        why = ctx.baseline.contamination or ctx.current.contamination
        head = f"CONTAMINATED — foreign load: {why}."
        lines.append("Another client's requests shared the engine: step rate and decode rate are "
                     "not those of the probe alone, so no comparison is made.")
    else:  # INCONCLUSIVE
        if ctx.cause == "caliber missed":
            head = "INCONCLUSIVE — a run missed its caliber: its numbers are not the caliber's."
            lines.append("A run marked 'missed' (prompt or output too short, no reasoning, ...) "
                         "never gets a regular verdict; see `decodescope runs show` for why.")
        elif ctx.cause == "caliber unknown":
            head = (f"INCONCLUSIVE — caliber not established: the {_windows(ctx)} do not show that "
                    f"both sides were measured under one caliber (decode {pct(d.rel or 0.0)}).")
            lines.append(f"Calibers: {ctx.caliber.text}.")
        elif ctx.cause == "server warm-up":
            ci = (f" (95% CI {pct(d.ci_lo)} … {pct(d.ci_hi)})"
                  if d.ci_lo is not None and d.ci_hi is not None else "")
            slow = ctx.current if (d.rel or 0.0) < 0 else ctx.baseline
            head = (f"INCONCLUSIVE — server warm-up: decode {pct(d.rel or 0.0)}{ci}, but "
                    f"{slow.name} ran on a server still warming up after its start.")
            lines.append("Both sides are one stack: a change of the server's state, not of the "
                         "stack, so no REGRESSION or IMPROVEMENT is claimed (the notes say "
                         "which run and why).")
        elif ctx.cause == "stalls within noise":
            head = ("INCONCLUSIVE — the server paused inside the outputs on one side, but not "
                    f"beyond noise (stalls: {_stall_text(ctx.baseline)} → "
                    f"{_stall_text(ctx.current)}).")
        elif d.status == "no_data":
            few = [f"{x.name} has {n} {x.unit_name}{'' if n == 1 else 's'}"
                   for x, n in ((ctx.baseline, d.n_baseline), (ctx.current, d.n_current))
                   if n < th.MIN_UNITS]
            head = (f"INCONCLUSIVE — {'; '.join(few)} with a decode rate: ≥ {th.MIN_UNITS} per side "
                    f"are needed ({th.RECOMMENDED_TRIALS} recommended).")
            lines.append("Without a spread on each side no confidence interval can be computed, "
                         "and an interval that cannot be computed is never called significant.")
        else:
            ci = (f" (95% CI {pct(d.ci_lo)} … {pct(d.ci_hi)})"
                  if d.ci_lo is not None and d.ci_hi is not None else "")
            head = f"INCONCLUSIVE — noise too high to decide: decode {pct(d.rel or 0.0)}{ci}."
            if ctx.trials_needed:
                lines.append(f"What would decide it: ≥ {ctx.trials_needed} "
                             f"{ctx.baseline.unit_name}s per side (from the observed variance) "
                             f"to narrow the 95% CI to ±{th.MAX_CI_HALF_WIDTH:.0%}, or a quieter "
                             "server.")
            else:
                lines.append(f"What would decide it: more runs per side, or a quieter server — "
                             f"no number of {ctx.baseline.unit_name}s in one run (at most "
                             f"{th.MAX_TRIALS_SUGGESTED} counted) narrows the 95% CI to "
                             f"±{th.MAX_CI_HALF_WIDTH:.0%} given the observed spread and the "
                             "between-run spread (the notes say how many runs per side, or "
                             "interleaved A/B pairs, would).")
        if ctx.caliber.same is False:
            lines.append(f"Note: the calibers differ too ({ctx.caliber.text}).")
    return head, lines


def _stall_text(side: Side) -> str:
    st = getattr(side, "stalls", None)
    if not st or not st.get("count"):
        return "none"
    return (f"{st['count']} stall{'s' if st['count'] != 1 else ''} in {st['requests']} "
            f"requests, {st['min_s']:.2f}–{st['max_s']:.2f} s, {st['time_share']:.0%} of the time")


def _url(ctx: Context) -> str:
    return ctx.current.url or ctx.baseline.url or "URL"


def _ref(ctx: Context) -> str | None:
    """The --caliber argument of a runnable probe command: a built-in's name@version, the
    file of a file caliber (its name@version is not something --caliber can find), a built-in
    that reproduces the MAL band's content; None when there is nothing runnable to name."""
    for side in (ctx.baseline, ctx.current):
        ref = side.caliber_ref
        if not ref:
            continue
        if side.caliber_path:
            return shlex.quote(side.caliber_path)
        if _is_builtin(ref):
            return ref
        return None  # a file caliber whose file is not known: say so (_caliber_hint)
    band = ctx.bands[0] or ctx.bands[1]
    return CALIBER_FOR_BAND.get(band.name) if band else None


def _is_builtin(ref: str) -> bool:
    from decodescope.caliber.resolve import builtin_calibers

    return ref in builtin_calibers()


def _caliber_hint(ctx: Context) -> str | None:
    """For a file caliber whose file is unknown: which file the user must pass."""
    for side in (ctx.baseline, ctx.current):
        if side.imported_from:  # no caliber file: the other tool's command is the workload
            continue
        if side.caliber_ref and not side.caliber_path and not _is_builtin(side.caliber_ref):
            return (f"--caliber takes the .toml file that defined {side.caliber_ref} (identity "
                    f"{side.caliber_identity}); its path was not stored with the run")
    return None


def _fp_advice(ctx: Context) -> str:
    """What would show the stack difference, without advising a flag that was never used."""
    b, c = ctx.baseline, ctx.current
    if b.fingerprint and c.fingerprint:
        return ("The fingerprint diff above lists what changed (launch cmdline, engine version, "
                "packages, backend lines, GPU clocks).")
    if b.kind == "log" or c.kind == "log":
        return ("Log windows carry no fingerprint: compare the two launches' command lines and "
                "the backend selection lines (`Using ... backend`) in the logs, or probe both "
                "stacks (a probe stores a fingerprint).")
    if b.imported_from or c.imported_from:
        kinds = _windows(ctx)
        return (f"{kinds[0].upper() + kinds[1:]} carry no fingerprint: compare the two launches' "
                "command lines, or probe both stacks (a probe stores a fingerprint).")
    missing = ", ".join(x.name for x in (b, c) if not x.fingerprint)
    return (f"No fingerprint stored for {missing}: probe again with the fingerprint on (the "
            "default) to see what changed (launch cmdline, engine version, packages, GPU clocks).")


def _flags_where(ctx: Context) -> str:
    """Where the speculative-decoding options of the two launches can be compared: the
    fingerprint diff's launch cmdline row only when both sides carry a fingerprint."""
    b, c = ctx.baseline, ctx.current
    if b.fingerprint and c.fingerprint:
        return "the launch cmdline row of the evidence shows how they changed"
    if b.kind == "log" or c.kind == "log":
        return (f"{_windows(ctx)} carry no fingerprint: compare the two launches' command "
                "lines")
    missing = ", ".join(x.name for x in (b, c) if not x.fingerprint)
    return (f"no fingerprint stored for {missing}: compare the two launch command lines, or probe "
            "again with the fingerprint on (the default) to see them side by side")


def _spec_options(ctx: Context) -> str:
    return spec_flags(side_engine(x) for x in (ctx.baseline, ctx.current))


def next_steps(ctx: Context) -> list[str]:
    out = _next_steps(ctx)
    hint = _caliber_hint(ctx)
    if hint and any("--caliber FILE.toml" in line for line in out):
        out.append(f"  ({hint})")
    return out


def _next_steps(ctx: Context) -> list[str]:
    url, ref = _url(ctx), _ref(ctx)
    cal = ref or ("FILE.toml" if _caliber_hint(ctx) else "NAME")
    probe = f"decodescope probe {url} --caliber {cal}"
    sel_b = ctx.baseline.name.removeprefix("run ") if ctx.baseline.kind == "run" else ctx.baseline.name
    if ctx.kind == "CALIBER_MISMATCH":
        tool = tool_of(ctx.baseline) or tool_of(ctx.current)
        if tool:
            return [f"To compare like-for-like, run `{tool}` on the current stack with the "
                    "baseline's workload (the elements that differ above), then import its "
                    "files and triage again:",
                    "  decodescope import FILE...",
                    f"  decodescope triage last --baseline {sel_b}"]
        if ctx.baseline.caliber_ref:
            return ["To compare with the baseline's number, probe its caliber on the current stack "
                    "and triage again:",
                    f"  {probe} --trials {th.RECOMMENDED_TRIALS}",
                    f"  decodescope triage last --baseline {sel_b}"]
        return [f"To compare like-for-like, probe one fixed caliber on both stacks "
                f"({'matching the baseline: ' + cal if ref else 'see decodescope calibers list'}):",
                f"  {probe} --trials {th.RECOMMENDED_TRIALS}"]
    if ctx.kind == "INCONCLUSIVE" and ctx.cause == "caliber unknown":
        n = th.RECOMMENDED_TRIALS
        cur = shlex.quote(ctx.current.selector or ctx.current.name)
        base = shlex.quote(ctx.baseline.selector or ctx.baseline.name)
        return ["Probe both stacks under one caliber (same prompt, sampling, output length and "
                "concurrency), then triage the two runs:",
                f"  {probe} --trials {n} --label side=baseline   # on the baseline stack",
                f"  {probe} --trials {n} --label side=current    # on the current stack",
                "  decodescope triage side=current --baseline side=baseline",
                "If you know both sides served the same workload, say so:",
                f"  decodescope triage {cur} --baseline {base} --assume-same-caliber"]
    if ctx.kind == "INCONCLUSIVE" and ctx.cause == "caliber missed":
        return ["Re-run the probe so that it meets its caliber (see the run's findings):",
                f"  {probe} --trials {th.RECOMMENDED_TRIALS}"]
    if ctx.cause == "server warm-up":
        return ["Measure after the warm-up: warm the server up inside the run, or add runs "
                "until `spread` says the trend is over, then triage a late run:",
                f"  {probe} --trials {th.RECOMMENDED_TRIALS} --warmup 8",
                f"  decodescope spread {url} --caliber {cal}"]
    if ctx.cause in ("stalls", "stalls within noise"):
        return ["The server paused inside outputs: look for preemption, swapping, long prefills "
                "of other requests or host contention in the engine log at those times.",
                f"  {probe} --trials {th.RECOMMENDED_TRIALS}   # re-measure to confirm"]
    if ctx.cause and ctx.cause.startswith("speculative decoding"):
        return [f"One side ran without speculative decoding: compare {_spec_options(ctx)} in "
                f"the two launches; {_flags_where(ctx)}."]
    if ctx.kind == "REGRESSION" and ctx.cause == "step rate":
        fp = _fp_advice(ctx)
        return ["The step rate fell at the same caliber: an engine, launch or hardware change.", fp,
                f"  {probe} --trials {th.RECOMMENDED_TRIALS}   # re-measure to confirm"]
    if ctx.kind == "REGRESSION" and ctx.cause == "acceptance":
        return [f"MAL fell at the same caliber: compare {_spec_options(ctx)} and the sampling "
                f"defaults of the two launches; {_flags_where(ctx)}.",
                f"  {probe} --trials {th.RECOMMENDED_TRIALS}   # re-measure to confirm"]
    if ctx.kind in ("REGRESSION", "IMPROVEMENT") and ctx.cause == "decode rate" \
            and ctx.decomposition is not None and ctx.decomposition.split_known:
        return ["Step rate and MAL are known on both sides and neither moved beyond noise on "
                "its own: more trials per side would show which one carries the change:",
                f"  {probe} --trials {2 * th.RECOMMENDED_TRIALS}"]
    if ctx.kind in ("REGRESSION", "IMPROVEMENT") and ctx.cause == "decode rate":
        how = metrics_how(side_engine(x) for x in (ctx.baseline, ctx.current))
        return ["Engine numbers would split this into step rate × MAL: probe with /metrics "
                f"reachable{f' ({how})' if how else ''} (or --log ENGINE_LOG) on both sides:",
                f"  {probe} --trials {th.RECOMMENDED_TRIALS}"]
    if ctx.kind == "IMPROVEMENT":
        runs = ",".join(map(str, ctx.current.run_ids)) or "RUNS"
        return ["If the change is intended, make it the new anchor:",
                f"  decodescope baseline set NAME --caliber {cal} --from-runs {runs}"]
    if ctx.kind == "NO_CHANGE":
        d = ctx.changes["decode"]
        out = ["Nothing to do: the two numbers agree within noise."]
        if d.half_width is not None and d.half_width > ctx.min_effect and d.trials_for_min_effect:
            out.append(f"To resolve a ±{ctx.min_effect:.0%} change, run ≥ {d.trials_for_min_effect} "
                       f"trials per side:")
            out.append(f"  {probe} --trials {d.trials_for_min_effect}")
        return out
    if ctx.kind == "CONTAMINATED":
        return ["Re-measure while no other client uses the engine (running requests in /metrics "
                "should equal the probe's concurrency):",
                f"  {probe} --trials {th.RECOMMENDED_TRIALS}"]
    if ctx.kind == "INCONCLUSIVE" and ctx.cause == "noise" and not ctx.trials_needed:
        n = th.RECOMMENDED_TRIALS
        return ["More trials of one run cannot decide it: compare the two live stacks "
                "interleaved (decodescope ab URL_A URL_B --caliber C), or probe each side "
                "again; learn this stack's between-run spread with decodescope spread:",
                f"  {probe} --trials {n}"]
    n = ctx.trials_needed or th.RECOMMENDED_TRIALS
    return [f"Measure {n} or more trials on each side:", f"  {probe} --trials {n}"]
