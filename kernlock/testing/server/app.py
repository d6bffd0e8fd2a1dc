"""The test Hub's WSGI application: each request gets its real answer (:mod:`~kernlock.testing.server.routes`) or
the fault a rule injects in its place, and is recorded in the request log."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kernlock.hub.wire import Abort as _Abort
from kernlock.hub.wire import Call as _Call
from kernlock.hub.wire import Response as _Response
from kernlock.hub.wire import error as _error
from kernlock.hub.wire import status_line as _status_line
from kernlock.testing.server.faults import ConnectionDropped, Faults, Rule
from kernlock.testing.server.git import GitError, Store
from kernlock.testing.server.log import Request, RequestLog
from kernlock.testing.server.routes import Routes

__all__ = ["HubApp", "make_app"]


class HubApp:
    """The WSGI application: routing, git answers, fault injection and request logging."""

    def __init__(self, root: Path, log: RequestLog, faults: Faults, page_size: int) -> None:
        self.store = Store(Path(root))
        self.log = log
        self.faults = faults
        self.page_size = max(1, page_size)
        self.routes = Routes(self.store, self.page_size)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        call = _Call.from_environ(environ)
        started = time.time()
        delay = self.faults.delay_for(call.full_path)
        if delay > 0:
            time.sleep(delay)
        rule = self.faults.take(call.full_path)
        if rule is not None and rule.kind == "drop":
            self.log.add(Request(method=call.method, path=call.full_path, status=0, started=started))
            raise ConnectionDropped(call.full_path)
        response = self._fault_response(rule) if rule and rule.kind == "status" else self.answer(call)
        if rule is not None and rule.kind == "rewrite":
            response = self._rewritten(rule, response)
        self.log.add(Request(method=call.method, path=call.full_path, status=response.status, started=started))
        headers = list(response.headers)
        if not any(k.lower() == "content-length" for k, _ in headers):
            headers.append(("Content-Length", str(response.content_length)))
        start_response(_status_line(response.status), headers)
        if call.method == "HEAD":
            return []
        return response.truncated() if rule is not None and rule.kind == "truncate" else response.chunks()

    @staticmethod
    def _rewritten(rule: Rule, response: _Response) -> _Response:
        """The answer as ``rule.transform`` rewrites it; a Content-Length of its own that does not match the body
        closes the connection after the answer."""
        assert rule.transform is not None
        status, headers, body = rule.transform(response.status, list(response.headers), b"".join(response.chunks()))
        if not isinstance(status, int) or not isinstance(body, (bytes, bytearray)):
            raise TypeError("a rewrite transform must return (int status, [(name, value)] headers, bytes body)")
        headers = [(str(k), str(v)) for k, v in headers]
        declared = [v for k, v in headers if k.lower() == "content-length"]
        if declared and declared[0].strip() != str(len(body)):
            headers = [(k, v) for k, v in headers if k.lower() != "connection"] + [("Connection", "close")]
        return _Response(status=status, headers=headers, body=bytes(body))

    @staticmethod
    def _fault_response(rule: Rule) -> _Response:
        headers = [] if rule.retry_after is None else [("Retry-After", str(math.ceil(rule.retry_after)))]
        return _error(rule.code, f"Injected fault: HTTP {rule.code}", headers=headers)

    def answer(self, call: _Call) -> _Response:
        """The real answer to one request."""
        try:
            return self.routes.route(call)
        except _Abort as abort:
            return abort.response
        except (GitError, OSError, ValueError) as err:
            return _error(500, f"{type(err).__name__}: {err}")


def make_app(
    root: Path | str, *, log: RequestLog | None = None, faults: Faults | None = None, page_size: int = 1000
) -> HubApp:
    """A plain WSGI app serving the repositories under ``root``."""
    return HubApp(Path(root), log if log is not None else RequestLog(), faults or Faults(), page_size)
