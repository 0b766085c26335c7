"""A webhook receiver on loopback (http.server in a thread) that records every POST whole and answers 200.

For the notification formats whose requests carry no Standard Webhooks signature (a Slack-style message) as well
as for those that do: the tests read the headers and the body as they came.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio


@dataclass(frozen=True)
class Posted:
    path: str
    headers: dict[str, str]
    """By lower-case name."""
    body: bytes

    @property
    def json(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.body)
        return loaded


class Receiver:
    """Records each POST to any path; its `url` has a path and a token in it, as an incoming webhook's has."""

    def __init__(self) -> None:
        self._posted: list[Posted] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                headers = {name.lower(): value for name, value in self.headers.items()}
                receiver.record(Posted(self.path, headers, body))
                self.send_response(200)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/services/T0/B0/tok"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def record(self, posted: Posted) -> None:
        with self._lock:
            self._posted.append(posted)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def posted(self) -> list[Posted]:
        with self._lock:
            return list(self._posted)

    def by_event(self) -> dict[str, Posted]:
        """Each request by the event type of its `webhook-id` (`decision.waiting:<id>` gives `decision.waiting`)."""
        return {posted.headers["webhook-id"].split(":")[0]: posted for posted in self.posted()}

    async def until(self, count: int, seconds: float = 30) -> list[Posted]:
        """The requests, once at least `count` have come."""
        with anyio.fail_after(seconds):
            while len(posted := self.posted()) < count:
                await anyio.sleep(0.05)
        return posted
