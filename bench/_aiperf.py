"""AIPerf as a peer client: run `aiperf profile` against the simulator and read back, per
request, its own decode rate and ITL and the receipt time of every token-carrying chunk.

AIPerf lives in its own virtual environment (heavy pinned dependencies); pass its `aiperf`
executable. It needs a tokenizer even with --use-server-token-count; a local one is written
here (the simulator's token rule as a Hugging Face `tokenizers` pre-tokenizer), so nothing is
downloaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

# The simulator's tokenizer rule (docs/simulator.md), as a WordLevel tokenizer with one token
# per pre-token: AIPerf counts prompt tokens exactly as the simulator does.
_TOKENIZER_SCRIPT = r"""
import json, sys
from tokenizers import Regex, Tokenizer, models, pre_tokenizers
out = sys.argv[1]
tok = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"\s*\w+|\s*[^\w\s]|\s+"), behavior="isolated")
tok.save(out + "/tokenizer.json")
json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]",
           "model_max_length": 131072}, open(out + "/tokenizer_config.json", "w"))
"""


def find_aiperf(explicit: str | None) -> str | None:
    candidates = [explicit] if explicit else [
        str(Path(__file__).parent / ".venv-aiperf" / "bin" / "aiperf"), "/tmp/aiperf-venv/bin/aiperf"]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


class AIPerf:
    def __init__(self, exe: str, workdir: Path):
        self.exe = exe
        self.workdir = workdir
        self.tokenizer = workdir / "tokenizer"
        self.tokenizer.mkdir(parents=True, exist_ok=True)
        python = str(Path(exe).with_name("python"))
        subprocess.run([python, "-c", _TOKENIZER_SCRIPT, str(self.tokenizer)], check=True)
        self.version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip()
        self._runs = 0

    def command(self, url: str, model: str, prompt: str, max_tokens: int, concurrency: int,
                requests: int, extra: dict[str, Any], outdir: Path) -> list[str]:
        dataset = outdir / "prompt.jsonl"
        dataset.write_text(json.dumps({"text": prompt}) + "\n")
        cmd = [self.exe, "profile", "--model", model, "--url", url, "--endpoint-type", "chat",
               "--streaming", "--concurrency", str(concurrency), "--request-count", str(requests),
               "--input-file", str(dataset), "--custom-dataset-type", "single_turn",
               "--osl", str(max_tokens), "--tokenizer", str(self.tokenizer),
               "--use-server-token-count", "--per-chunk-usage", "--export-level", "raw",
               "--no-server-metrics", "--no-gpu-telemetry", "--ui", "none",
               "--artifact-dir", str(outdir)]
        for key, value in extra.items():
            cmd += ["--extra-inputs", json.dumps({key: value})]
        return cmd

    def new_outdir(self) -> Path:
        self._runs += 1
        d = self.workdir / f"run{self._runs:02d}"
        d.mkdir(parents=True, exist_ok=True)
        return d


def read_results(outdir: Path) -> list[dict[str, Any]]:
    """Per request: request_id, t_recv_s of token-carrying chunks (perf_counter = monotonic),
    AIPerf's own decode rate (output_token_throughput_per_user) and ITL."""
    metrics: dict[str, dict[str, Any]] = {}
    with open(outdir / "profile_export.jsonl") as f:
        for line in f:
            rec = json.loads(line)
            metrics[rec["metadata"]["x_request_id"]] = rec["metrics"]
    out = []
    with open(outdir / "profile_export_raw.jsonl") as f:
        for line in f:
            raw = json.loads(line)
            rid = raw["metadata"]["x_request_id"]
            m = metrics.get(rid, {})
            recv = [r["perf_ns"] / 1e9 for r in raw.get("responses", []) if _carries_tokens(r)]
            itl = m.get("inter_token_latency", {}).get("value")
            rate = m.get("output_token_throughput_per_user", {}).get("value")
            out.append({"request_id": rid, "t_recv_s": recv,
                        "tokens": m.get("output_sequence_length", {}).get("value"),
                        "decode_rate_tps": rate, "itl_mean_s": itl / 1000 if itl else None,
                        "error": raw.get("error")})
    return out


def _carries_tokens(response: dict[str, Any]) -> bool:
    for p in response.get("packets", []):
        if p.get("name") != "data" or p.get("value", "").startswith("[DONE]"):
            continue
        try:
            obj = json.loads(p["value"])
        except ValueError:
            continue
        for ch in obj.get("choices") or []:
            d = ch.get("delta") or {}
            if d.get("content") or d.get("reasoning_content") or d.get("reasoning") or ch.get("text"):
                return True
    return False


def tempdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="bench-aiperf-"))
