"""The test Hub's HTTP layer: an HTTP/1.1 keep-alive adapter from ``http.server`` to a WSGI app that keeps the
raw request path (:class:`Handler`), on a threaded server that can close kept-alive connections (:class:`Server`)."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BytesIO
from typing import Any
from urllib.parse import unquote

from kernlock.testing.server.faults import ConnectionDropped

__all__ = ["Handler", "Server"]


class Handler(BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive adapter from ``http.server`` to a WSGI app, keeping the raw request path."""

    protocol_version = "HTTP/1.1"
    server_version = "kernlock-hub"
    sys_version = ""
    timeout = 120
    server: Server

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: requests are recorded by the app's RequestLog."""

    def _serve(self) -> None:
        body = self._read_body()
        state: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            state["status"], state["headers"] = status, headers
            return lambda data: None

        try:
            result = self.server.app(self._environ(body), start_response)
        except ConnectionDropped:
            self.close_connection = True
            return
        try:
            self._send(result, state)
        except OSError:
            self.close_connection = True
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _serve

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline().strip():
                pass
            return b"".join(parts)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _environ(self, body: bytes) -> dict[str, Any]:
        path, _, query = self.path.partition("?")
        host, port = self.server.server_address[:2]
        environ: dict[str, Any] = {
            "REQUEST_METHOD": self.command,
            "SCRIPT_NAME": "",
            "PATH_INFO": unquote(path, encoding="latin-1"),
            "QUERY_STRING": query,
            "RAW_URI": self.path,
            "REQUEST_URI": self.path,
            "SERVER_NAME": str(host),
            "SERVER_PORT": str(port),
            "SERVER_PROTOCOL": self.request_version,
            "REMOTE_ADDR": self.client_address[0],
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "http",
            "wsgi.input": BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        for key, value in self.headers.items():
            name = "HTTP_" + key.upper().replace("-", "_")
            if name not in ("HTTP_CONTENT_TYPE", "HTTP_CONTENT_LENGTH"):
                environ[name] = f"{environ[name]},{value}" if name in environ else value
        return environ

    def _send(self, result: Iterable[bytes], state: dict[str, Any]) -> None:
        chunks = iter(result)
        first = next((c for c in chunks if c), b"")
        status = int(state["status"].split()[0])
        headers = state["headers"]
        length = next((v.strip() for k, v in headers if k.lower() == "content-length"), None)
        declared = int(length) if length is not None and length.isdigit() else None
        bodyless = self.command == "HEAD" or status in (204, 304) or status < 200
        if declared is None and not bodyless:
            self.close_connection = True
        asked_close = any(k.lower() == "connection" and v.lower() == "close" for k, v in headers)
        if asked_close:  # e.g. a rewritten answer whose Content-Length differs from its body
            self.close_connection = True
        head = [f"HTTP/1.1 {state['status']}", f"Server: {self.server_version}"]
        head += [f"Date: {self.date_time_string()}", *(f"{k}: {v}" for k, v in headers)]
        if self.close_connection and not asked_close:
            head.append("Connection: close")
        payload = b"" if bodyless else first
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload)
        sent = len(payload)
        for chunk in chunks:
            if chunk and not bodyless:
                self.wfile.write(chunk)
                sent += len(chunk)
        if not bodyless and declared is not None and sent != declared:
            self.close_connection = True


class Server(ThreadingHTTPServer):
    """Threaded server that tracks open connections so that ``stop`` can close kept-alive ones."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 512
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (Ctrl-C, a timeout, a closed pool) is no error of the server: nothing is printed.
        Anything else is one line on stderr (the traceback with ``KERNLOCK_DEBUG=1``)."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            return
        if os.environ.get("KERNLOCK_DEBUG", "").strip() not in ("", "0"):
            super().handle_error(request, client_address)
            return
        sys.stderr.write(f"kernlock-hub: error answering {client_address[0]}: {error!r}\n")

    def close_connections(self) -> None:
        with self._open_lock:
            conns = list(self._open)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
