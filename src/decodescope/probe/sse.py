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
        buf = self._buf + block if self._buf else block
        if b"\n" not in buf:
            self._buf = buf
            return []
        lines = buf.split(b"\n")
        self._buf = lines.pop()  # the unfinished last line (b"" after a newline)
        events: list[str] = []
        data = self._data
        for line in lines:
            if line[-1:] == b"\r":
                line = line[:-1]
            if not line:
                if data:
                    events.append((data[0] if len(data) == 1 else b"\n".join(data))
                                  .decode("utf-8", "replace"))
                    data = []
            elif line[:5] == b"data:":
                data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif line == b"data":
                data.append(b"")
            # comments (":...") and other fields (event, id, retry) do not matter here
        self._data = data
        return events

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
