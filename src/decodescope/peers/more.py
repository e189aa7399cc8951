"""Dispatch of the formats issue 35 added (GuideLLM, the llm-d benchmark report) and the audit
of what a file claims: importing this module registers them with store.peer_import, whose
read_peer_file tries them before the older formats (the store layer does not import peers;
`decodescope import` imports this module)."""

from __future__ import annotations

from typing import Any

from decodescope.peers.audit import audit
from decodescope.store import peer_import
from decodescope.store.peer_import import Parsed


def parse(raw: bytes, doc: Any, path: str, benchmark: int | None = None) -> Parsed | None:
    from decodescope.peers import guidellm, llmd_report

    if doc is None and raw.lstrip()[:1] not in (b"{", b"["):
        doc = _yaml(raw)
    if guidellm.is_guidellm(doc):
        return guidellm.parse(doc, path, benchmark)
    if llmd_report.is_report(doc):
        return llmd_report.parse(doc, path)
    return None


def _yaml(raw: bytes) -> Any:
    """A YAML document (the llm-d report's usual form), or None."""
    import yaml

    try:
        doc = yaml.safe_load(raw.decode("utf-8", "replace"))
    except yaml.YAMLError:
        return None
    return doc if isinstance(doc, dict) else None


if parse not in peer_import.EXTRA_PARSERS:
    peer_import.EXTRA_PARSERS.append(parse)
if audit not in peer_import.FILE_AUDITS:
    peer_import.FILE_AUDITS.append(audit)
