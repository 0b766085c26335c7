"""A TCP relay on loopback in front of PostgreSQL, so that a test can take the database away for real."""

from __future__ import annotations

import socket
import threading
from contextlib import suppress
from urllib.parse import urlsplit, urlunsplit

from tests.helpers.http_harness import free_port


class Relay:
    """A TCP relay on loopback in front of PostgreSQL, so that a test can take the database away for real.

    `close()` drops every connection and refuses new ones; `hold()` keeps them open but stops passing bytes,
    as a database that no longer answers; `open()` and `release()` undo them.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self.flowing = threading.Event()
        self.flowing.set()
        self._sockets: list[socket.socket] = []
        self._guard = threading.Lock()
        self._listener: socket.socket | None = None
        self.open()

    def open(self) -> None:
        listener = socket.create_server(("127.0.0.1", self.port))
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self.cut()

    def cut(self) -> None:
        """End every relayed connection at once."""
        with self._guard:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def hold(self) -> None:
        self.flowing.clear()

    def release(self) -> None:
        self.flowing.set()

    def url(self, url: str) -> str:
        parts = urlsplit(url)
        user = parts.netloc.rpartition("@")[0]
        return urlunsplit(parts._replace(netloc=f"{user}@127.0.0.1:{self.port}" if user else f"127.0.0.1:{self.port}"))

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self._guard:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with suppress(OSError):
            while data := source.recv(65536):
                self.flowing.wait()
                sink.sendall(data)
        with suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
