"""A pure, incremental Server-Sent Events parser over bytes.

Feed it byte blocks as they arrive; it returns the complete events found so far. Only the
`data` field matters for OpenAI-compatible streams; comments (`:`) and other fields are skipped.
"""

from __future__ import annotations


class SSEParser:
    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []

    def feed(self, block: bytes) -> list[str]:
        """Return the `data` payloads of the events completed by this block."""
        self._buf += block
        events: list[str] = []
        while True:
            nl = self._buf.find(b"\n")
            if nl < 0:
                return events
            line = self._buf[:nl]
            self._buf = self._buf[nl + 1:]
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if self._data:
                    events.append(b"\n".join(self._data).decode("utf-8", "replace"))
                    self._data = []
                continue
            if line.startswith(b":"):
                continue
            name, _, value = line.partition(b":")
            if value.startswith(b" "):
                value = value[1:]
            if name == b"data":
                self._data.append(value)

    def close(self) -> list[str]:
        """Flush a final event that was not followed by a blank line."""
        events = self.feed(b"\n") if self._buf else []
        if self._data:
            events.append(b"\n".join(self._data).decode("utf-8", "replace"))
            self._data = []
        return events

    @property
    def pending_bytes(self) -> int:
        return len(self._buf)
