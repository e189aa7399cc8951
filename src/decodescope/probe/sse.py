"""A pure, incremental Server-Sent Events parser over bytes.

Feed it byte blocks as they arrive; it returns the complete events found so far. Only the
`data` field matters for OpenAI-compatible streams; comments (`:`) and other fields are skipped.

Linear in the bytes fed, however they are split: an unfinished line is kept as a list of pieces
and joined once, when its newline arrives. An event larger than `max_event_bytes` is a
MalformedSSEError (a server sending one endless line must not grow the buffer without bound).
"""

from __future__ import annotations

from decodescope.errors import MalformedSSEError

# One event is one JSON chunk of a completion stream: a few hundred bytes, a few KB with
# logprobs. Anything near this size is not a chunk.
MAX_EVENT_BYTES = 16 * 1024 * 1024


class SSEParser:
    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._pieces: list[bytes] = []  # the unfinished last line, in pieces
        self._pending = 0  # bytes in _pieces
        self._data: list[bytes] = []  # data lines of the event being read
        self._data_bytes = 0
        self.max_event_bytes = max_event_bytes

    def feed(self, block: bytes) -> list[str]:
        """Return the `data` payloads of the events completed by this block."""
        return [d.decode("utf-8", "replace") for d in self.feed_raw(block)]

    def feed_raw(self, block: bytes) -> list[bytes]:
        """`feed`, with the payloads as the bytes that came (a JSON parser takes them as they
        are). One whole `data: ...` event in a block of its own, the usual case of a streaming
        server, is sliced out without splitting the block into lines."""
        if (not self._pieces and not self._data and block[:6] == b"data: "
                and block[-2:] == b"\n\n" and block.count(b"\n") == 2
                and block[-3:-2] != b"\r" and len(block) <= self.max_event_bytes):
            return [block[6:-2]]
        if b"\n" not in block:
            if block:
                self._pieces.append(block)
                self._pending += len(block)
                if self._pending + self._data_bytes > self.max_event_bytes:
                    self._too_large()
            return []
        if self._pieces:
            self._pieces.append(block)
            buf = b"".join(self._pieces)
        else:
            buf = block
        lines = buf.split(b"\n")
        last = lines.pop()  # the unfinished last line (b"" after a newline)
        self._pieces = [last] if last else []
        self._pending = len(last)
        events: list[bytes] = []
        data, size = self._data, self._data_bytes
        for line in lines:
            if line[-1:] == b"\r":
                line = line[:-1]
            if not line:
                if data:
                    events.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data, size = [], 0
            elif line[:5] == b"data:":
                value = line[6:] if line[5:6] == b" " else line[5:]
                data.append(value)
                size += len(value) + 1
            elif line == b"data":
                data.append(b"")
            # comments (":...") and other fields (event, id, retry) do not matter here
        self._data, self._data_bytes = data, size
        if self._pending + size > self.max_event_bytes:
            self._too_large()
        return events

    def close(self) -> list[str]:
        """Flush a final event that was not followed by a blank line."""
        return [d.decode("utf-8", "replace") for d in self.close_raw()]

    def close_raw(self) -> list[bytes]:
        """`close`, with the payloads as bytes."""
        events = self.feed_raw(b"\n") if self._pieces else []
        if self._data:
            events.append(b"\n".join(self._data))
            self._data, self._data_bytes = [], 0
        return events

    @property
    def pending_bytes(self) -> int:
        return self._pending

    def _too_large(self) -> None:
        size = self._pending + self._data_bytes
        self._pieces, self._pending, self._data, self._data_bytes = [], 0, [], 0
        raise MalformedSSEError(
            f"an SSE event grew past {self.max_event_bytes // (1024 * 1024)} MiB without ending "
            f"({size} bytes)", remedy="The server or a proxy corrupts the stream; probe the server directly")
