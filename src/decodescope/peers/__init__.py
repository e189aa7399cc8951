"""Peers' result formats: one module per tool (issue 35 adds GuideLLM and the llm-d benchmark report)."""
