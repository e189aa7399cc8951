"""Watched repositories: their git HEAD, and whether the engine could load code from them.

The seed's check, as code: "Does the production stack reference the repo's code? No. The start
script sets no PYTHONPATH / repo path; `grep -rl Qwen-Flash-SM80` over the venv's installed
vllm package: zero hits." We look at the server's PYTHONPATH, its interpreter's sys.path,
`.pth` / `__editable__` files in its site-packages, whether its binary lives in the repo, and
grep the engine package directory for the repo's path and name (bounded in time and size).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from decodescope.fingerprint.packages import Interpreter
from decodescope.fingerprint.process import ServerProcess
from decodescope.fingerprint.stack import Item
from decodescope.redact import redact_text

GIT_TIMEOUT_S = 5.0
GREP_MAX_S = 5.0  # the seed's grep over a vLLM install takes ~1 s; more means a huge tree
GREP_MAX_FILE_BYTES = 64 * 1024 * 1024  # skip giant blobs (model weights, fat .so) beyond this
GREP_MAX_FILES = 100_000
MAX_HITS = 20


# A watched repository is not trusted: its .git/config can name programs that git runs while it
# only reads (core.fsmonitor on every status, a filter driver's clean / process command for a
# file whose stat changed, gpg.program under log.showSignature, hooks). Every git command here
# runs with those switched off, never writes (no optional locks: the index is not refreshed on
# disk), never prompts, pages or recurses into submodules, and sees no GIT_* variable of ours
# (GIT_DIR, GIT_CONFIG_PARAMETERS, GIT_EXTERNAL_DIFF ... would redirect or reconfigure it).
GIT_SAFE_CONFIG = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.untrackedCache=false",
    "log.showSignature=false",
    "diff.external=",
    "status.submoduleSummary=false",
    "protocol.allow=never",
)
GIT_SAFE_ENV = {"GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat",
                "PAGER": "cat", "GIT_ASKPASS": "", "SSH_ASKPASS": "", "LC_ALL": "C"}


def git_env() -> dict[str, str]:
    """The environment git runs in: ours without any GIT_* variable, plus GIT_SAFE_ENV."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_SAFE_ENV)
    return env


def _git_argv(repo: Path, args: tuple[str, ...], extra_config: list[str] = ()  # type: ignore[assignment]
              ) -> list[str]:
    argv = ["git", "--no-pager", "-C", str(repo)]
    for item in (*GIT_SAFE_CONFIG, *extra_config):
        argv += ["-c", item]
    return [*argv, *args]


def _run_git(repo: Path, args: tuple[str, ...], extra_config: list[str] = ()  # type: ignore[assignment]
             ) -> str:
    out = subprocess.run(_git_argv(repo, args, extra_config), capture_output=True, text=True,
                         timeout=GIT_TIMEOUT_S, check=True, env=git_env(),
                         stdin=subprocess.DEVNULL)
    return out.stdout.strip()


def _filters_off(repo: Path) -> list[str]:
    """`-c` settings that switch off every filter driver the repository's own config defines
    (a clean or process command runs when `git status` rehashes a file). Filters of the user's
    global and system config (git-lfs) are the user's programs and stay. Reading the config
    runs nothing."""
    try:
        names = _run_git(repo, ("config", "--local", "--includes", "--name-only", "--null",
                                "--get-regexp", r"^filter\."))
    except subprocess.CalledProcessError:  # exit 1: no filter defined
        return []
    drivers = {n.rsplit(".", 1)[0] for n in names.split("\0") if n.count(".") >= 2}
    return [f"{d}.{k}=" for d in sorted(drivers) for k in ("clean", "smudge", "process")] + \
        [f"{d}.required=false" for d in sorted(drivers)]


def _git(repo: Path, *args: str) -> str:
    return _run_git(repo, args)


def git_head(repo: Path) -> Item:
    if not repo.is_dir():
        return Item.missing(f"{repo} is not a directory")
    try:
        sha, subject, when = _git(repo, "log", "-1", "--no-show-signature",
                                  "--format=%h%x00%s%x00%cI").split("\x00")
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return Item.missing(f"git log in {repo} failed: {type(exc).__name__}")
    value: dict[str, Any] = {"sha": sha, "subject": redact_text(subject), "commit_time": when}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        value["describe"] = _git(repo, "describe", "--tags", "--always")
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        value["dirty_files"] = len(_run_git(
            repo, ("status", "--porcelain", "--untracked-files=no", "--ignore-submodules=all"),
            _filters_off(repo)).splitlines())
    return Item.ok(value)


def _inside(path: str, repo: Path) -> bool:
    try:
        p = Path(path).resolve()
    except (OSError, RuntimeError):
        return False
    return p == repo or repo in p.parents


def grep_tree(root: Path, needles: list[bytes], *, max_s: float = GREP_MAX_S,
              max_files: int = GREP_MAX_FILES) -> dict[str, Any]:
    """`grep -rl` for any needle under root, bounded. Returns hits, files scanned, truncated."""
    t0 = time.monotonic()
    hits: list[str] = []
    scanned = 0
    truncated = False
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if time.monotonic() - t0 > max_s or scanned >= max_files:
                truncated = True
                break
            path = os.path.join(dirpath, name)
            try:
                if os.path.getsize(path) > GREP_MAX_FILE_BYTES:
                    continue
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            scanned += 1
            if any(n in data for n in needles):
                hits.append(os.path.relpath(path, root))
                if len(hits) >= MAX_HITS:
                    break
        if truncated or len(hits) >= MAX_HITS:
            break
    return {"hits": hits, "files_scanned": scanned, "truncated": truncated,
            "seconds": round(time.monotonic() - t0, 3)}


def _pth_hits(interp: Interpreter, needles: list[str]) -> list[dict[str, str]]:
    hits: list[dict[str, str]] = []
    for entry in interp.sys_path:
        if not entry.endswith(("site-packages", "dist-packages")) or not os.path.isdir(entry):
            continue
        for name in sorted(os.listdir(entry)):
            if not (name.endswith(".pth") or name.startswith("__editable__")):
                continue
            try:
                text = Path(entry, name).read_text(errors="replace")
            except OSError:
                continue
            for line in text.splitlines():
                if any(n in line for n in needles):
                    hits.append({"file": os.path.join(entry, name), "line": redact_text(line[:300])})
    return hits


def references(repo: Path, server: ServerProcess | None, interp: Interpreter | None,
               package_dir: Path | None) -> Item:
    """Could the engine load code from `repo`? value["referenced"]: True / False / None
    (None: some check could not be completed and nothing was found)."""
    if server is None:
        return Item.missing("no local server process: cannot tell what the engine loads")
    real = repo.resolve()
    needles = [str(real), real.name] if real.name else [str(real)]
    value: dict[str, Any] = {
        "pythonpath_entries": [p for p in server.pythonpath if _inside(p, real)],
        "binary_inside_repo": bool(server.exe and _inside(server.exe, real)),
    }
    complete = True
    if interp is not None:
        value["sys_path_entries"] = [p for p in interp.sys_path if _inside(p, real)]
        value["pth_hits"] = _pth_hits(interp, needles)
    if package_dir is not None:
        grep = grep_tree(package_dir, [n.encode() for n in needles])
        value["package_grep"] = {"dir": str(package_dir), "needles": needles, **grep}
        complete = not grep["truncated"]
    elif interp is not None:
        complete = False
        value["package_grep"] = None
    found = bool(value["pythonpath_entries"] or value["binary_inside_repo"]
                 or value.get("sys_path_entries") or value.get("pth_hits")
                 or (value.get("package_grep") or {}).get("hits"))
    value["referenced"] = True if found else (False if complete else None)
    return Item.ok(value)


def collect_repos(repos: tuple[str, ...], server: ServerProcess | None,
                  interp: Interpreter | None, package_dir: Path | None) -> dict[str, Item]:
    if not repos:
        return {"watched": Item.missing("no repo watched (--watch-repo PATH)")}
    items: dict[str, Item] = {}
    for raw in repos:
        repo = Path(raw).expanduser()
        key = str(repo.resolve()) if repo.exists() else str(repo)
        items[f"git:{key}"] = git_head(repo)
        items[f"referenced:{key}"] = (references(repo, server, interp, package_dir)
                                      if repo.exists() else Item.missing(f"{repo} does not exist"))
    return items
