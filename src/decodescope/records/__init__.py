"""Shared records: what every layer above passes around, and nothing that produces them.

A request trace (`trace`), its client-side numbers (`request_metrics`), an engine window
(`window`), the one summary type (`summary`), findings (`findings`), evidence rows
(`evidence`) and reported quantities (`quantity`). These modules import only the foundation modules (`errors`, `exitcodes`,
`redact`) and each other; docs/architecture.md has the layers.
"""
