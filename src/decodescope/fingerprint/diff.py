"""Fingerprint diff → evidence rows, in the seed's terms.

`diff_fingerprints(a, b)` compares a baseline fingerprint `a` with a current one `b` and
answers the seed's questions one row each. A row is "unknown" whenever either side lacks the
item — no observation, no conclusion.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from decodescope.fingerprint.nvml import NO_LOAD_LABEL
from decodescope.fingerprint.stack import Fingerprint
from decodescope.records.evidence import EvidenceRow, EvidenceStatus

# Sampled SM clock medians within this fraction count as equal: a locked clock's median moves
# ≲1% between runs (seed: 1395 MHz under a 1400 lock); a lost offset or lock moves it ≥5%.
SM_CLOCK_TOLERANCE = 0.03
# Process start times are reported with 10 ms ticks; 1 s absorbs any float formatting.
START_TIME_TOLERANCE_S = 1.0
# Throttle reasons that say nothing about a lost tuning (an idle GPU reports gpu_idle).
IGNORED_REASONS = {"gpu_idle"}
MAX_SHOWN = 3  # changes named in the one-line result; the rest go to detail
# Options whose value is an address, not a property of the stack: two launches that differ only
# there are one stack (a restart on a free port, two identical servers side by side).
ADDRESS_OPTIONS = ("--port", "--host")


def _pair(a: Fingerprint, b: Fingerprint, section: str, name: str
          ) -> tuple[Any, Any] | str:
    ia, ib = a.item(section, name), b.item(section, name)
    if ia.collected and ib.collected:
        return ia.value, ib.value
    return "; ".join(f"{side}: {it.why}" for side, it in (("baseline", ia), ("current", ib))
                     if not it.collected)


def _unknown(check: str, why: str) -> EvidenceRow:
    return EvidenceRow(check, "unknown", "unknown", why)


def _when(iso: Any) -> str:
    return str(iso).replace("T", " ")[:16] if iso else "?"


def _summary(changes: list[str]) -> str:
    shown = "; ".join(changes[:MAX_SHOWN])
    more = len(changes) - MAX_SHOWN
    return shown + (f"; +{more} more" if more > 0 else "")


# --- host, restart, version, model -----------------------------------------------------------


def _host(a: Fingerprint, b: Fingerprint) -> EvidenceRow:
    check = "same host"
    p = _pair(a, b, "host", "hostname")
    if isinstance(p, str):
        return _unknown(check, p)
    changes = []
    for name in ("hostname", "kernel", "cpu_model", "os"):
        va, vb = a.value("host", name), b.value("host", name)
        if va is not None and vb is not None and va != vb:
            changes.append(f"{name} {va} → {vb}")
    if changes:
        return EvidenceRow(check, f"no: {_summary(changes)}", "changed", "\n".join(changes))
    return EvidenceRow(check, f"yes ({p[1]})", "same")


def _restart(a: Fingerprint, b: Fingerprint) -> EvidenceRow:
    check = "did the server restart?"
    p = _pair(a, b, "process", "create_time")
    if isinstance(p, str):
        return _unknown(check, p)
    ta, tb = p
    pid_a, pid_b = a.value("process", "pid"), b.value("process", "pid")
    if abs(float(ta["epoch"]) - float(tb["epoch"])) <= START_TIME_TOLERANCE_S and pid_a == pid_b:
        return EvidenceRow(check, f"no (pid {pid_b}, up since {_when(tb.get('iso'))})", "same")
    ea, eb = _address(a.url), _address(b.url)
    if ea is not None and eb is not None and ea != eb:
        # Another address: a second server (side by side, an A/B) or a restart elsewhere —
        # the fingerprints cannot tell which, so neither is claimed.
        return EvidenceRow(
            check, f"another server process: pid {pid_a} at {ea} → pid {pid_b} at {eb} "
                   f"(started {_when(ta.get('iso'))} → {_when(tb.get('iso'))})", "changed",
            _restart_detail(a, b, what="the other server"))
    return EvidenceRow(
        check, f"yes: started {_when(ta.get('iso'))} → {_when(tb.get('iso'))} "
               f"(pid {pid_a} → {pid_b})", "changed", _restart_detail(a, b))


def _address(url: str | None) -> str | None:
    """host:port of an endpoint URL (the port its scheme implies when none is given)."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    except ValueError:
        return None
    return f"{parts.hostname}:{port}" if parts.hostname else None


def _launch_changes(a: Fingerprint, b: Fingerprint) -> list[str] | None:
    """What differs between the two launches (command line, engine version, environment);
    None when neither side's launch is known."""
    known, out = False, []
    for section, name, what in (("process", "cmdline", "launch command line"),
                                ("endpoint", "engine_version", "engine version"),
                                ("process", "env", "engine environment")):
        p = _pair(a, b, section, name)
        if isinstance(p, str):
            continue
        known = True
        differs = (bool(cmdline_changes(list(p[0]), list(p[1]))) if name == "cmdline"
                   else p[0] != p[1])
        if differs:
            out.append(what)
    return out if known else None


def _restart_detail(a: Fingerprint, b: Fingerprint, *, what: str = "the restart") -> str:
    """A restart between two probes never touches their numbers (each run reads the engine's
    counters within itself); whether it is the change under test depends on the launch."""
    changed = _launch_changes(a, b)
    own = "each run reads the engine's counters within itself, so the reset does not touch them"
    if what != "the restart":
        own = "each run reads its own server's counters"
    if changed:
        return (f"{what} is part of the change under test ({', '.join(changed)} "
                f"differ{'s' if len(changed) == 1 else ''}); {own}")
    if changed is None:
        return f"whether the launch changed is unknown (no command line on a side); {own}"
    if what != "the restart":
        return ("same command line, engine version and environment: two servers of one stack; "
                f"what differs is the server itself (its start, caches, placement); {own}")
    return ("same command line, engine version and environment: the restart itself is the "
            "difference (cold caches, compiled graphs); to tell its effect from noise, probe "
            f"twice within one launch; {own}")


def _engine_version(a: Fingerprint, b: Fingerprint) -> EvidenceRow:
    check = "engine version"
    p = _pair(a, b, "endpoint", "engine_version")
    if isinstance(p, str):
        return _unknown(check, p)
    ka, kb = a.value("endpoint", "engine") or "", b.value("endpoint", "engine") or ""
    sa, sb = f"{ka} {p[0]}".strip(), f"{kb} {p[1]}".strip()
    if sa == sb:
        return EvidenceRow(check, f"same ({sb})", "same")
    return EvidenceRow(check, f"{sa} → {sb}", "changed")


def _served_model(a: Fingerprint, b: Fingerprint) -> EvidenceRow:
    check = "served model"
    p = _pair(a, b, "endpoint", "models")
    if isinstance(p, str):
        return _unknown(check, p)
    ma, mb = sorted(map(str, p[0])), sorted(map(str, p[1]))
    ca, cb = a.value("endpoint", "model_card"), b.value("endpoint", "model_card")
    if ma != mb:
        return EvidenceRow(check, f"{', '.join(ma) or 'none'} → {', '.join(mb) or 'none'}",
                           "changed")
    if ca is not None and cb is not None and ca != cb:
        keys = sorted(k for k in set(ca) | set(cb) if ca.get(k) != cb.get(k))
        detail = "\n".join(f"{k}: {ca.get(k)} → {cb.get(k)}" for k in keys)
        return EvidenceRow(check, f"same name, card differs: {', '.join(keys)}", "changed",
                           detail)
    return EvidenceRow(check, f"same ({', '.join(mb)})", "same")


# --- repos, package, cmdline, env, backend ---------------------------------------------------


def _ref_text(v: dict[str, Any]) -> str:
    parts = [f"PYTHONPATH {'yes' if v.get('pythonpath_entries') else 'no'}"]
    if "pth_hits" in v:
        parts.append(f".pth {'yes' if v.get('pth_hits') else 'no'}")
    grep = v.get("package_grep")
    if grep:
        cut = ", cut short" if grep.get("truncated") else ""
        parts.append(f"grep of engine package: {len(grep.get('hits', []))} hits in "
                     f"{grep.get('files_scanned')} files{cut}")
    if v.get("binary_inside_repo"):
        parts.append("engine binary is inside the repo")
    answer = {True: "yes", False: "no", None: "not determined"}[v.get("referenced")]
    return f"{answer} ({', '.join(parts)})"


def _repos(a: Fingerprint, b: Fingerprint) -> list[EvidenceRow]:
    check = "does the stack reference the watched repo?"
    keys = [k for k in b.section("repos") if k.startswith("referenced:")]
    keys += [k for k in a.section("repos") if k.startswith("referenced:") and k not in keys]
    if not keys:
        return [_unknown(check, "no repo watched (--watch-repo PATH)")]
    rows = []
    for key in keys:
        path = key.split(":", 1)[1]
        name = path.rstrip("/").rsplit("/", 1)[-1]
        ia, ib = a.item("repos", key), b.item("repos", key)
        heads = [a.value("repos", f"git:{path}"), b.value("repos", f"git:{path}")]
        detail = None
        if heads[0] and heads[1] and heads[0].get("sha") != heads[1].get("sha"):
            detail = (f"repo HEAD moved {heads[0]['sha']} → {heads[1]['sha']} "
                      f"({heads[1].get('describe') or heads[1].get('subject')})")
        if not (ia.collected and ib.collected):
            current = f"{name}: {_ref_text(ib.value)}" if ib.collected else f"{name}: unknown"
            why = "; ".join(f"{s}: {it.why}" for s, it in (("baseline", ia), ("current", ib))
                            if not it.collected)
            rows.append(EvidenceRow(check, current, "unknown", why if not detail
                                    else f"{why}\n{detail}"))
            continue
        ra, rb = ia.value.get("referenced"), ib.value.get("referenced")
        status: EvidenceStatus = ("unknown" if ra is None or rb is None
                                  else "same" if ra == rb else "changed")
        rows.append(EvidenceRow(check, f"{name}: {_ref_text(ib.value)}", status, detail))
    return rows


def _package(a: Fingerprint, b: Fingerprint) -> EvidenceRow:
    check = "was the engine package modified?"
    p = _pair(a, b, "packages", "engine_package")
    if isinstance(p, str):
        q = _pair(a, b, "packages", "engine_binary")
        if isinstance(q, str):
            return _unknown(check, p)
        ba, bb = q
        if (ba["path"], ba["size_bytes"], ba["mtime"]) == (bb["path"], bb["size_bytes"], bb["mtime"]):
            return EvidenceRow(check, f"no ({bb['path']}, unchanged since "
                                      f"{_when(bb.get('mtime_iso'))})", "same")
        return EvidenceRow(check, f"yes: {ba['path']} {_when(ba.get('mtime_iso'))} → "
                                  f"{bb['path']} {_when(bb.get('mtime_iso'))}", "changed")
    pa, pb = p
    changes = []
    if (pa.get("name"), pa.get("version")) != (pb.get("name"), pb.get("version")):
        changes.append(f"{pa.get('name')} {pa.get('version')} → {pb.get('name')} {pb.get('version')}")
    if pa.get("location") != pb.get("location"):
        changes.append(f"location {pa.get('location')} → {pb.get('location')}")
    ma, mb = pa.get("newest_mtime"), pb.get("newest_mtime")
    if ma is not None and mb is not None and ma != mb:
        changes.append(f"newest file {_when(pa.get('newest_mtime_iso'))} → "
                       f"{_when(pb.get('newest_mtime_iso'))} ({pb.get('newest_file')})")
    if changes:
        return EvidenceRow(check, f"yes: {_summary(changes)}", "changed", "\n".join(changes))
    if ma is None or mb is None or pa.get("truncated") or pb.get("truncated"):
        return EvidenceRow(check, f"version same ({pb.get('name')} {pb.get('version')}); "
                                  f"file times not fully scanned", "unknown")
    return EvidenceRow(check, f"no ({pb.get('name')} {pb.get('version')}, files unchanged since "
                              f"{_when(pb.get('newest_mtime_iso'))})", "same")


def parse_cmdline(argv: list[str]) -> tuple[list[str], dict[str, list[str | None]]]:
    """(positionals, {option: [values]}); `--opt=v` and `--opt v` read the same."""
    positionals: list[str] = []
    opts: dict[str, list[str | None]] = {}

    def is_opt(s: str) -> bool:
        if not s.startswith("-") or s == "-":
            return False
        try:
            float(s)
        except ValueError:
            return True
        return False

    i = 0
    while i < len(argv):
        arg = argv[i]
        if is_opt(arg):
            if arg.startswith("--") and "=" in arg:
                name, value = arg.split("=", 1)
                opts.setdefault(name, []).append(value)
            else:
                nxt = argv[i + 1] if i + 1 < len(argv) else None
                if nxt is not None and not is_opt(nxt):
                    opts.setdefault(arg, []).append(nxt)
                    i += 1
                else:
                    opts.setdefault(arg, []).append(None)
        else:
            positionals.append(arg)
        i += 1
    return positionals, opts


def strip_address(argv: Sequence[str]) -> list[str]:
    """A launch command without its listen address (`--port 8081`, `--port=8081`, `--host`)."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in ADDRESS_OPTIONS:
            skip = True
            continue
        if any(a.startswith(o + "=") for o in ADDRESS_OPTIONS):
            continue
        out.append(a)
    return out


def _opt_text(name: str, values: list[str | None]) -> str:
    return "; ".join(name if v is None else f"{name} {v}" for v in values)


def cmdline_changes(argv_a: list[str], argv_b: list[str]) -> list[str]:
    """What differs between two launch commands, option by option; the listen address
    (ADDRESS_OPTIONS) is not part of the stack and is left out."""
    pos_a, opt_a = parse_cmdline(strip_address(argv_a))
    pos_b, opt_b = parse_cmdline(strip_address(argv_b))
    changes = []
    if pos_a != pos_b:
        changes.append(f"arguments {' '.join(pos_a)} → {' '.join(pos_b)}")
    for name in list(opt_a) + [n for n in opt_b if n not in opt_a]:
        va, vb = opt_a.get(name), opt_b.get(name)
        if va == vb:
            continue
        if va is None and vb is not None:
            changes.append(f"+ {_opt_text(name, vb)}")
        elif vb is None and va is not None:
            changes.append(f"- {_opt_text(name, va)}")
        elif va is not None and vb is not None:
            changes.append(f"{_opt_text(name, va)} → {_opt_text(name, vb)}")
    return changes


def _cmdline(a: Fingerprint, b: Fingerprint) -> EvidenceRow:
    check = "same launch cmdline?"
    p = _pair(a, b, "process", "cmdline")
    if isinstance(p, str):
        return _unknown(check, p)
    changes = cmdline_changes(list(p[0]), list(p[1]))
    if not changes:
        moved = [str(x) for x in p[0]] != [str(x) for x in p[1]]
        return EvidenceRow(check, "yes (identical arguments apart from the listen address)"
                           if moved else "yes (identical arguments)", "same")
    return EvidenceRow(check, f"no: {_summary(changes)}", "changed", "\n".join(changes))


def _env(a: Fingerprint, b: Fingerprint) -> EvidenceRow:
    check = "same engine environment?"
    p = _pair(a, b, "process", "env")
    if isinstance(p, str):
        return _unknown(check, p)
    ea, eb = p
    changes = []
    for k in sorted(set(ea) | set(eb)):
        if k not in ea:
            changes.append(f"+ {k}={eb[k]}")
        elif k not in eb:
            changes.append(f"- {k}={ea[k]}")
        elif ea[k] != eb[k]:
            changes.append(f"{k}={ea[k]} → {k}={eb[k]}")
    if not changes:
        return EvidenceRow(check, f"yes ({len(eb)} engine variables)", "same")
    return EvidenceRow(check, f"no: {_summary(changes)}", "changed", "\n".join(changes))


def _backend(a: Fingerprint, b: Fingerprint) -> EvidenceRow:
    check = "same backend selection?"
    p = _pair(a, b, "backend", "lines")
    if isinstance(p, str):
        return _unknown(check, p)
    la, lb = list(p[0]), list(p[1])
    if not la and not lb:
        return _unknown(check, "no backend selection lines in either log")
    if set(la) == set(lb):
        return EvidenceRow(check, f"yes ({_lines(len(lb), 'selection line')} identical)",
                           "same", "\n".join(lb))
    removed = [f"- {x}" for x in la if x not in lb]
    added = [f"+ {x}" for x in lb if x not in la]
    return EvidenceRow(check, f"no: {_lines(len(removed), 'line')} gone, {len(added)} new",
                       "changed", "\n".join(removed + added))


def _lines(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


# --- GPU -------------------------------------------------------------------------------------


def _gpu_indices(fp: Fingerprint) -> set[int]:
    out = set()
    for key in fp.section("gpu"):
        head = key.split(".", 1)[0]
        if head.startswith("gpu") and head[3:].isdigit():
            out.add(int(head[3:]))
    return out


def _reasons(fp: Fingerprint, i: int) -> set[str] | None:
    """Throttle reasons seen while the clocks were sampled (else the instantaneous read)."""
    value = fp.value("gpu", f"gpu{i}.throttle_reasons_sampled")
    if value is None:
        value = fp.value("gpu", f"gpu{i}.throttle_reasons")
    return None if value is None else set(value) - IGNORED_REASONS


def _load_label(fp: Fingerprint, i: int) -> str | None:
    """The load the SM clock was sampled under, or None if not under a probe's load."""
    sampled = fp.value("gpu", f"gpu{i}.sm_clock_sampled_mhz")
    if not isinstance(sampled, dict) or sampled.get("median") is None:
        return None
    label = sampled.get("during")
    return None if label == NO_LOAD_LABEL else str(label)


def _gpu_compare(a: Fingerprint, b: Fingerprint, i: int) -> tuple[list[str], list[str], list[str]]:
    """(changes, sames, notes) for GPU i."""
    changes: list[str] = []
    sames: list[str] = []
    notes: list[str] = []
    g = f"GPU{i}"
    for key, label in (("gpc_clock_offset_mhz", "SM clock offset"),
                       ("mem_clock_offset_mhz", "memory clock offset")):
        p = _pair(a, b, "gpu", f"gpu{i}.{key}")
        if isinstance(p, str):
            continue
        oa, ob = int(p[0]), int(p[1])
        if oa != ob:
            changes.append(f"{g} {label} {oa:+d} → {ob:+d} MHz")
        else:
            sames.append(f"{g} {label} {ob:+d} MHz")
    for key, label in (("applications_clocks_mhz", "applications clocks"),
                       ("enforced_power_limit_w", "enforced power limit")):
        p = _pair(a, b, "gpu", f"gpu{i}.{key}")
        if not isinstance(p, str) and p[0] != p[1]:
            changes.append(f"{g} {label} {p[0]} → {p[1]}")
    la, lb = _load_label(a, i), _load_label(b, i)
    if la is None or lb is None:
        side = " and ".join(s for s, lab in (("baseline", la), ("current", lb)) if lab is None)
        notes.append(f"{g} SM clock and throttle reasons not compared: no clocks sampled under "
                     f"probe load on the {side} side")
        return changes, sames, notes
    sa = a.value("gpu", f"gpu{i}.sm_clock_sampled_mhz")
    sb = b.value("gpu", f"gpu{i}.sm_clock_sampled_mhz")
    ma, mb = float(sa["median"]), float(sb["median"])
    if ma > 0 and abs(mb - ma) / ma > SM_CLOCK_TOLERANCE:
        changes.append(f"{g} SM clock median under load {ma:.0f} → {mb:.0f} MHz "
                       f"(beyond ±{SM_CLOCK_TOLERANCE:.0%})")
    else:
        sames.append(f"{g} SM clock median under load {mb:.0f} MHz")
    ra, rb = _reasons(a, i), _reasons(b, i)
    if ra is not None and rb is not None:
        new = sorted(rb - ra)
        if new:
            changes.append(f"{g} new throttle reasons under load: {', '.join(new)}")
        else:
            sames.append(f"{g} no new throttle reasons")
    return changes, sames, notes


def _gpu(a: Fingerprint, b: Fingerprint) -> EvidenceRow:
    check = "GPU clocks and offsets in place?"
    ia, ib = _gpu_indices(a), _gpu_indices(b)
    if not ia or not ib:
        why = "; ".join(f"{s}: {fp.item('gpu', 'nvml').why or 'no GPU items'}"
                        for s, fp, idx in (("baseline", a, ia), ("current", b, ib)) if not idx)
        return _unknown(check, why)
    changes: list[str] = []
    sames: list[str] = []
    notes: list[str] = []
    for i in sorted(ia & ib):
        c, s, n = _gpu_compare(a, b, i)
        changes += c
        sames += s
        notes += n
    if ia != ib:
        changes.append(f"GPU count {len(ia)} → {len(ib)}")
    if changes:
        return EvidenceRow(check, f"no: {_summary(changes)}", "changed",
                           "\n".join(changes + notes))
    if not sames:
        return _unknown(check, "\n".join(notes) or "no comparable clock, offset or "
                                                   "throttle items on both sides")
    return EvidenceRow(check, f"yes ({_summary(sames)})", "same", "\n".join(sames + notes))


def diff_fingerprints(a: Fingerprint, b: Fingerprint) -> list[EvidenceRow]:
    """Evidence rows comparing baseline `a` with current `b`."""
    return [
        _host(a, b),
        _restart(a, b),
        _engine_version(a, b),
        _served_model(a, b),
        *_repos(a, b),
        _package(a, b),
        _cmdline(a, b),
        _env(a, b),
        _backend(a, b),
        _gpu(a, b),
    ]


__all__ = ["ADDRESS_OPTIONS", "SM_CLOCK_TOLERANCE", "cmdline_changes", "diff_fingerprints",
           "parse_cmdline", "strip_address"]
