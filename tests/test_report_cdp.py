"""Headless Chromium over the DevTools protocol, with a small stdlib WebSocket client.

No test here: the browser tests import `open_page`. Chromium is Debian's `chromium` package
(`apt-get install -y chromium`); `find_chromium()` is None when it is absent and the tests
skip with that reason.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--remote-debugging-port=0", "--remote-allow-origins=*")
START_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 30.0
SKIP_REASON = "chromium not installed: `apt-get install -y chromium` (Debian package)"


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None


class WebSocket:
    """Just enough RFC 6455 for CDP: text frames, masking, 16/64-bit lengths, ping, close."""

    def __init__(self, url: str, timeout_s: float = CALL_TIMEOUT_S):
        u = urlsplit(url)
        self.sock = socket.create_connection((u.hostname or "127.0.0.1", u.port or 80), timeout_s)
        key = base64.b64encode(os.urandom(16)).decode()
        req = (f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
        self.sock.sendall(req.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            part = self.sock.recv(4096)
            if not part:
                raise ConnectionError("websocket handshake: connection closed")
            head += part
        head, self.buf = head.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"websocket handshake refused: {head[:200]!r}")

    def send(self, text: str) -> None:
        data = text.encode()
        n = len(data)
        if n < 126:
            header = struct.pack("!BB", 0x81, 0x80 | n)
        elif n < 1 << 16:
            header = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        else:
            header = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
        mask = os.urandom(4)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            part = self.sock.recv(max(65536, n - len(self.buf)))
            if not part:
                raise ConnectionError("websocket closed")
            self.buf += part
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self) -> str:
        message = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            payload = self._read(n)
            op = b0 & 0x0F
            if op == 0x9:  # ping
                self.sock.sendall(struct.pack("!BB", 0x8A, 0x80 | len(payload)) + b"\0" * 4 + payload)
                continue
            if op == 0x8:
                raise ConnectionError("websocket closed by the browser")
            message += payload
            if b0 & 0x80:
                return message.decode()

    def close(self) -> None:
        self.sock.close()


@dataclass
class Page:
    ws: WebSocket
    events: list[dict[str, Any]] = field(default_factory=list)
    _id: int = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                result: dict[str, Any] = msg.get("result", {})
                return result
            self._event(msg)

    def _event(self, msg: dict[str, Any]) -> None:
        self.events.append(msg)
        if msg.get("method") == "Page.javascriptDialogOpening":  # never leave a page blocked
            self._id += 1
            self.ws.send(json.dumps({"id": self._id, "method": "Page.handleJavaScriptDialog",
                                     "params": {"accept": True}}))

    def wait_event(self, method: str, timeout_s: float = CALL_TIMEOUT_S) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        for ev in self.events:
            if ev.get("method") == method:
                return ev
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            if "method" in msg:
                self._event(msg)
                if msg["method"] == method:
                    return msg
        raise TimeoutError(f"no {method} within {timeout_s} s")

    def evaluate(self, expression: str) -> Any:
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"evaluate failed: {res['exceptionDetails']}")
        return res["result"].get("value")

    def problems(self) -> list[str]:
        """Console errors/warnings, uncaught exceptions, log errors and dialogs seen so far."""
        out = []
        for ev in self.events:
            m, p = ev.get("method"), ev.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
                out.append(f"console.{p['type']}: {p.get('args')}")
            elif m == "Runtime.exceptionThrown":
                out.append(f"exception: {p.get('exceptionDetails')}")
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") in ("error", "warning"):
                out.append(f"log {p['entry']['level']}: {p['entry'].get('text')}")
            elif m == "Page.javascriptDialogOpening":
                out.append(f"dialog {p.get('type')}: {p.get('message')}")
        return out

    def screenshot(self, path: Path) -> Path:
        size = self.call("Page.getLayoutMetrics")["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                         clip=clip)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path


@contextmanager
def open_page(chromium: str, file: Path, *, width: int = 1200, height: int = 900) -> Iterator[Page]:
    """Start Chromium, load `file` in a fresh page, yield it once its load event has fired."""
    # Chromium's helper processes (crashpad, zygote) can still write into the profile after
    # the browser exits: a throwaway profile's removal must not fail the test (seen in CI:
    # "Directory not empty: 'Default'").
    with tempfile.TemporaryDirectory(prefix="ds-chromium-", ignore_cleanup_errors=True) as profile:
        proc = subprocess.Popen([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                                 "about:blank"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ws = None
        try:
            port = _devtools_port(Path(profile), proc)
            with httpx.Client(trust_env=False, timeout=CALL_TIMEOUT_S) as c:
                targets = c.get(f"http://127.0.0.1:{port}/json/list").json()
            page_ws = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
            ws = WebSocket(page_ws)
            page = Page(ws)
            for domain in ("Page", "Runtime", "Log"):
                page.call(f"{domain}.enable")
            page.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                      deviceScaleFactor=1, mobile=False)
            page.call("Page.navigate", url=file.resolve().as_uri())
            page.wait_event("Page.loadEventFired")
            yield page
        finally:
            if ws is not None:
                ws.close()
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def _devtools_port(profile: Path, proc: subprocess.Popen[bytes]) -> int:
    marker = profile / "DevToolsActivePort"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with {proc.returncode} before DevTools was up")
        if marker.exists():
            lines = marker.read_text().splitlines()
            if lines and lines[0].strip().isdigit():
                return int(lines[0])
        time.sleep(0.05)
    raise TimeoutError(f"chromium wrote no {marker} within {START_TIMEOUT_S} s")


# What the tests ask the page, in one round trip.
PAGE_STATE_JS = r"""
JSON.stringify({
  plots: [...document.querySelectorAll('figure.plot')].map(f => {
    const svg = f.querySelector('svg.plot-svg');
    const marks = [...f.querySelectorAll('svg.plot-svg .mark')];
    const drawn = marks.filter(m => { const b = m.getBBox(); return b.width > 0 || b.height > 0; });
    return {id: f.dataset.plot, state: f.dataset.state, caption: f.querySelector('figcaption').innerText,
            svgWidth: svg ? svg.getBoundingClientRect().width : 0, marks: marks.length,
            drawn: drawn.length, legend: f.querySelectorAll('.legend li').length,
            axisLabels: [...f.querySelectorAll('.axis-label')].map(t => t.textContent),
            noData: (f.querySelector('.no-data') || {}).innerText || null};
  }),
  scripts: document.querySelectorAll('script').length,
  title: document.title,
  verdicts: [...document.querySelectorAll('[data-verdict]')].map(v => v.dataset.verdict),
  evidenceRows: document.querySelectorAll('table.evidence tbody tr').length,
  runs: [...document.querySelectorAll('article.run')].map(a => a.id),
  simBanner: !!document.getElementById('simulated-banner'),
  text: document.body.innerText
})
"""


def page_state(page: Page) -> dict[str, Any]:
    state: dict[str, Any] = json.loads(page.evaluate(PAGE_STATE_JS))
    return state
