"""Which stored runs are of one stack, and which may join an estimate over them.

A stack is what a fingerprint says makes two runs comparable as repetitions: host, engine,
engine version, served models, launch command (its listen address left out) and the engine's
environment. Below run_spread.py, server_state.py and decide.py, which all group runs by it.
"""

from __future__ import annotations

from typing import Any

from decodescope.fingerprint.diff import strip_address
from decodescope.records.stored_run import StoredRun


# -- stacks ------------------------------------------------------------------------------------
def _item(fp: dict[str, Any], section: str, name: str) -> Any:
    it = ((fp.get("sections") or {}).get(section) or {}).get(name)
    if isinstance(it, dict) and it.get("status") == "collected":
        return it.get("value")
    return None


def stack_key(fp: dict[str, Any] | None) -> tuple[str, ...] | None:
    """What makes two runs "the same stack": host, engine, engine version, served models and
    launch command (its address left out); for a server on another machine, whose process
    cannot be inspected, its URL stands in for the launch command. None when the fingerprint
    is missing or names neither a launch command nor an engine version."""
    if not isinstance(fp, dict):
        return None
    host = _item(fp, "host", "hostname")
    engine = _item(fp, "endpoint", "engine")
    version = _item(fp, "endpoint", "engine_version")
    models = _item(fp, "endpoint", "models")
    cmd = _item(fp, "process", "cmdline")
    if host is None or (cmd is None and version is None):
        return None
    launch = (" ".join(strip_address([str(a) for a in cmd])) if isinstance(cmd, list)
              else f"url {fp.get('url')}")
    model = ",".join(sorted(map(str, models))) if isinstance(models, list) else str(models)
    env = engine_env(fp)
    return (str(host), str(engine), str(version), model, launch + (f" [env {env}]" if env
                                                                  else ""))


def engine_env(fp: dict[str, Any]) -> str:
    """The server process's engine-relevant environment (GGML_*, CUDA_*, VLLM_*, …: the
    fingerprint's `process.env`, already redacted: a secret reads "<redacted>" on both sides)
    as sorted `NAME=value` words; "" when none was collected. Two launches that differ there
    are two stacks (GGML_CUDA_DISABLE_GRAPHS=1 is not the same server)."""
    from decodescope.fingerprint.process import ENGINE_ENV_PREFIXES

    env = _item(fp, "process", "env")
    if not isinstance(env, dict):
        return ""
    return " ".join(f"{k}={v}" for k, v in sorted(env.items())
                    if str(k).startswith(ENGINE_ENV_PREFIXES))


def describe_stack(key: tuple[str, ...]) -> str:
    host, engine, version, model, launch = key
    short = launch if len(launch) <= 60 else launch[:57] + "..."
    return f"{engine} {version} on {host}, model {model}, `{short}`"


def ab_arm(run: StoredRun) -> bool:
    """A run that is one arm of an interleaved A/B (run/ab.py: label `ab=<session>`, meta
    "ab"): single trials taken alternately with another server, not an ordinary run."""
    return "ab" in (run.labels or {}) or "ab" in (run.meta or {})


def usable(run: StoredRun) -> bool:
    """A run that can join a spread estimate: an ordinary run (not an A/B arm), complete, its
    caliber met, no foreign load."""
    res = run.result or {}
    if ab_arm(run) or run.status != "complete" or res.get("caliber_status") == "missed":
        return False
    c = res.get("contamination")
    return not (isinstance(c, dict) and c.get("flagged"))
