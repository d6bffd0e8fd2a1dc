"""The HTTP layer of kernlock's Hub client: one GET at a time through huggingface_hub's session, within a retry
and wait budget shared by the whole command, with Hub errors mapped to kernlock's.

Retry budget (huggingface_hub's own retry loops, ``http_backoff`` and ``http_get``, are not used, so nothing
retries beneath these numbers):

- a request is tried at most ``retries + 1`` times (``Hub()``: 4 attempts); it is retried after HTTP 408, 429,
  500, 502, 503 or 504, a refused, dropped or timed-out connection, or a truncated body; other answers are final;
- the wait before a retry is ``backoff * 2**n`` (``Hub()``: 0.5, 1, 2 s) or the answer's ``Retry-After``, at most
  10 s (``MAX_WAIT``);
- one Hub object (one command) retries at most 8 times (``COMMAND_RETRIES``) and waits at most 15 s in total
  (``WAIT_BUDGET``), over all its requests, parallel ones included; the time an attempt spent before it timed
  out (10 s to connect, ``HF_HUB_DOWNLOAD_TIMEOUT`` between bytes) counts as waiting;
- once a request has failed for good, every later request of the same Hub object fails at once with that
  error, and a failed refs or trust question is remembered too: a dead endpoint or a persistent fault costs one
  request's budget, never one per file or per task;
- a listing is one request per page: at most 100,000 entries (``MAX_LISTING``) over at most 1,000 pages; a JSON
  answer is at most 32 MiB; ``read_file`` (metadata.json) at most 1 MiB; ``download`` at most the locked size.

So a refused connection ends after 4 attempts and 3.5 s of waiting (a host that never answers: after 2 attempts,
about 20 s), and a persistent fault on any request ends after at most the requests already in flight + 8 retries
and at most 15 s of waiting.
"""

from __future__ import annotations

import importlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from huggingface_hub import constants, get_session
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

# Public helpers (huggingface_hub.utils documents them) that its lazy facade does not re-export for mypy --strict.
from huggingface_hub.utils import build_hf_headers, hf_raise_for_status  # type: ignore[attr-defined]

from kernlock._version import __version__
from kernlock.errors import HubError, KernlockError, NotFoundError, UnreachableError
from kernlock.hub.answers import MAX_JSON, MAX_LISTING, MAX_PAGES, show
from kernlock.util import interrupt, names
from kernlock.util.wording import count

if TYPE_CHECKING:
    from httpx2 import Response, Timeout

__all__ = [
    "COMMAND_RETRIES",
    "DEFAULT_RETRIES",
    "MAX_WAIT",
    "RETRY_STATUSES",
    "WAIT_BUDGET",
    "HubSession",
    "Retry",
    "content_length",
    "httpx",
    "timeout",
]


def _http_client() -> ModuleType:
    """The HTTP package huggingface_hub's session is made of: httpx2 for huggingface_hub 2.x, httpx for 1.x (the
    same API under two names; both may be installed, so ask the installed huggingface_hub)."""
    import huggingface_hub

    major = int(huggingface_hub.__version__.split(".")[0])
    return importlib.import_module("httpx2" if major >= 2 else "httpx")


httpx: Any = _http_client()

T = TypeVar("T")
RETRY_STATUSES = {408, 429, 500, 502, 503, 504}
DEFAULT_RETRIES = 3  # 4 attempts per request
COMMAND_RETRIES = 8  # retries per Hub object (one command), all requests together
WAIT_BUDGET = 15.0  # seconds of backoff waiting per Hub object, all requests together
MAX_WAIT = 10.0  # one wait, Retry-After included
_FIX = "check HF_ENDPOINT (a mirror or proxy may be broken)"


class Retry(Exception):
    """A fault of the transfer that is worth a retry (a body shorter than announced, a resume the Hub refused)."""


_NETWORK_FAULTS = (httpx.TransportError, ConnectionError, TimeoutError, Retry)


class HubSession:
    """An endpoint and the budget of one command's requests to it; thread-safe.

    ``retries`` retries per request and ``backoff`` (seconds, doubled per retry) shape one request's attempts;
    the budget of the whole object is fixed (module docstring).
    """

    def __init__(
        self,
        endpoint: str | None = None,
        token: str | None = None,
        retries: int = DEFAULT_RETRIES,
        backoff: float = 0.5,
    ) -> None:
        self.endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
        self.token = token
        self.retries = max(0, retries)
        self.backoff = max(0.0, backoff)
        self._key_locks: dict[tuple[int, str], threading.Lock] = {}
        self._lock = threading.Lock()
        self._retries_used = 0
        self._waited = 0.0
        self._failed: KernlockError | None = None

    # -- requests --

    def headers(self) -> dict[str, str]:
        """huggingface_hub's headers (user agent, token) for kernlock's requests."""
        return build_hf_headers(token=self.token, library_name="kernlock", library_version=__version__)

    def get(self, url: str, limit: int, what: str, params: dict[str, str] | None = None) -> bytes:
        """One GET, its body read up to ``limit`` bytes (a larger answer is a HubError naming the URL)."""
        return self.get_response(url, limit, what, params)[0]

    def get_response(
        self, url: str, limit: int, what: str, params: dict[str, str] | None = None
    ) -> tuple[bytes, Response]:
        """:meth:`get`, with the answer (for its headers)."""
        with get_session().stream("GET", url, params=params, headers=self.headers(), timeout=timeout()) as response:
            hf_raise_for_status(response)
            declared = content_length(response)
            if declared is not None and declared > limit:
                raise self.too_large(what, url, limit)
            body = bytearray()
            for chunk in response.iter_bytes():
                interrupt.check()
                body += chunk
                if len(body) > limit:
                    raise self.too_large(what, url, limit)
            return bytes(body), response

    def get_json(self, url: str, what: str) -> Any:
        """One GET of a JSON answer (at most MAX_JSON bytes)."""
        return self.parse_json(self.get(url, MAX_JSON, what), url)

    def parse_json(self, body: bytes, url: str) -> Any:
        """``body`` as JSON, else a HubError naming the URL."""
        try:
            return json.loads(body)
        except (ValueError, RecursionError):  # RecursionError: nested too deeply for the parser
            raise self.invalid("an answer that is not JSON", url) from None

    def paginate(
        self, what: str, url: str, params: dict[str, str], label: str, missing_ok: bool = False
    ) -> Iterator[Any]:
        """The entries of a paginated listing (``Link: <next>; rel="next"``), one request (and budget) per page;
        at most MAX_LISTING entries and MAX_PAGES pages; a next page must be on the endpoint's host."""
        origin = httpx.URL(self.endpoint)
        page_url = url
        count = 0
        for pages in range(MAX_PAGES + 1):
            if pages == MAX_PAGES:
                raise self.invalid(f"more than {MAX_PAGES} pages for {what}", url)

            def page(page_url: str = page_url, first: bool = pages == 0) -> tuple[Any, str | None]:
                try:
                    body, response = self.get_response(page_url, MAX_JSON, label, params if first else None)
                except EntryNotFoundError:
                    if missing_ok and first:
                        return [], None
                    raise
                return self.parse_json(body, page_url), response.links.get("next", {}).get("url")

            items, link = self.call(what, page, label)
            if not isinstance(items, list):
                raise self.invalid(f"a listing that is not a list for {what}", page_url)
            count += len(items)
            if count > MAX_LISTING:
                raise self.invalid(f"a listing of more than {MAX_LISTING} entries for {what}", url)
            yield from items
            if not link:
                return
            following = httpx.URL(page_url).join(link)
            if (following.scheme, following.host, following.port) != (origin.scheme, origin.host, origin.port):
                raise self.invalid(f"a next page on another host ({show(str(following))}) for {what}", url)
            page_url = str(following)

    # -- answers that are no use --

    def commit_from(self, value: object, repo: str, url: str) -> str:
        """A commit id from an answer; HubError naming the endpoint when it is not 40 hex digits."""
        try:
            return names.check_commit(value)
        except ValueError:
            raise HubError(
                f"the Hub at {self.endpoint} answered an invalid commit id {show(value)} for {repo} ({url})", fix=_FIX
            ) from None

    def invalid(self, what: str, url: str) -> HubError:
        """The error for an answer kernlock cannot use."""
        return HubError(f"the Hub at {self.endpoint} answered {what} ({url})", fix=_FIX)

    def too_large(self, what: str, url: str, limit: int) -> HubError:
        """The error for an answer larger than ``limit`` bytes."""
        return HubError(f"the Hub at {self.endpoint} answered more than {limit} bytes for {what} ({url})", fix=_FIX)

    # -- retries and error mapping --

    def call(self, what: str, fn: Callable[[], T], label: str | None = None) -> T:
        """Run ``fn`` (one request) within the retry budget; map Hub errors to kernlock errors (``what`` names the
        repo or file in not-found errors, ``label`` the request in fault messages; default: ``what``)."""
        attempt = 0
        while True:
            self._raise_if_failed()
            attempt += 1
            response: Response | None = None
            started = time.monotonic()
            try:
                return fn()
            except RepositoryNotFoundError as err:
                raise NotFoundError(
                    f"{what} was not found on {self.endpoint} (or it is private and no token is set)",
                    fix="check the name, e.g. kernels-community/activation",
                ) from err
            except RevisionNotFoundError as err:
                raise NotFoundError(f"{what}: revision not found on {self.endpoint}.") from err
            except HfHubHTTPError as err:
                response = err.response
                status = response.status_code if response is not None else 0
                if status == 404:
                    raise NotFoundError(f"{what} was not found on {self.endpoint}.") from err
                if status in (401, 403):
                    raise HubError(
                        f"the Hub at {self.endpoint} refused access to {what} (HTTP {status})",
                        fix="check HF_TOKEN (`hf auth login`) and that it may read this repo",
                    ) from err
                if status not in RETRY_STATUSES:
                    raise HubError(f"the Hub at {self.endpoint} answered HTTP {status} for {what}", fix=_FIX) from err
                fault: BaseException = err
            except OfflineModeIsEnabled as err:
                raise HubError(
                    f"{what}: the Hub is needed but HF_HUB_OFFLINE is set",
                    fix="run this once online, or `kernlock sync` before going offline",
                ) from err
            except httpx.UnsupportedProtocol as err:
                raise HubError(
                    f"cannot reach the Hub at {self.endpoint} ({_one_line(err)})", fix="check HF_ENDPOINT"
                ) from err
            except _NETWORK_FAULTS as err:
                fault = err
            if isinstance(fault, httpx.TimeoutException):  # a silent Hub costs the budget the time it took
                with self._lock:
                    self._waited += time.monotonic() - started
            delay, spent = self._next_wait(attempt, response)
            if delay is None:
                raise self._give_up(label or what, fault, attempt, spent) from fault
            interrupt.sleep(delay)

    def _next_wait(self, attempt: int, response: Response | None) -> tuple[float | None, str]:
        """Seconds to wait before the next attempt, or None to give up, and why it gives up in words ("" when
        this request's own attempts are used up)."""
        if attempt > self.retries:
            return None, ""
        delay = self.backoff * 2 ** (attempt - 1)
        retry_after = _retry_after(response)
        if retry_after is not None:
            delay = retry_after
        delay = min(max(delay, 0.0), MAX_WAIT)
        with self._lock:
            if self._failed is not None:
                return None, ""
            if self._retries_used >= COMMAND_RETRIES:
                return None, f"this command has used all {COMMAND_RETRIES} retries it allows, over all its requests"
            if self._waited + delay > WAIT_BUDGET:
                return None, (
                    f"the next wait of {delay:.1f} s would take this command past the {WAIT_BUDGET:.0f} s of waiting "
                    f"it allows ({self._waited:.1f} s used, over all its requests, timeouts included)"
                )
            self._retries_used += 1
            self._waited += delay
        return delay, ""

    def _give_up(self, what: str, fault: BaseException, attempts: int, spent: str) -> KernlockError:
        """The final error of a request; the first one is remembered so later requests fail at once with it."""
        with self._lock:
            if self._failed is not None:
                return _copy(self._failed)
        tried = f"after {count(attempts, 'attempt')}" + (f" ({spent})" if spent else "")
        if isinstance(fault, HfHubHTTPError):
            status = fault.response.status_code if fault.response is not None else 0
            limited = status == 429
            error: KernlockError = HubError(
                f"the Hub at {self.endpoint} answered HTTP {status} for {what} {tried}",
                why="rate limited" if limited else "the Hub (or a proxy in between) is failing",
                fix="set HF_TOKEN (`hf auth login`) or wait, then try again later"
                if limited
                else "try again later, or check HF_ENDPOINT",
            )
        elif isinstance(fault, (httpx.ConnectError, httpx.ConnectTimeout)):
            error = UnreachableError(
                f"cannot reach the Hub at {self.endpoint} ({type(fault).__name__}: {_one_line(fault)}) {tried}",
                fix="check the network or HF_ENDPOINT",
            )
        else:
            error = HubError(
                f"the connection to the Hub at {self.endpoint} failed while fetching {what} ({type(fault).__name__}: "
                f"{_one_line(fault)}) {tried}",
                fix="check the network or HF_ENDPOINT, then try again",
            )
        with self._lock:
            if self._failed is None:
                self._failed = error
        return error

    def _raise_if_failed(self) -> None:
        with self._lock:
            failed = self._failed
        if failed is not None:
            raise _copy(failed) from failed

    def once(self, table: dict[str, tuple[bool, Any]], key: str, fetch: Callable[[], T]) -> T:
        """``fetch()`` once per key and Hub object, even when threads ask at the same time; a failure is
        remembered too, and raised again to every later asker (no second round of requests)."""
        with self._lock:
            key_lock = self._key_locks.setdefault((id(table), key), threading.Lock())
        with key_lock:
            if key not in table:
                try:
                    table[key] = (True, fetch())
                except KernlockError as err:
                    table[key] = (False, err)
                    raise
            ok, value = table[key]
        if ok:
            return value  # type: ignore[no-any-return]  # the table holds what ``fetch`` returned for this key
        raise _copy(value) from value


# -- helpers -------------------------------------------------------------------------------------------------


def _copy(error: KernlockError) -> KernlockError:
    """A new exception of the same type, message and parts (one object is never raised in two threads)."""
    import copy

    try:
        return copy.copy(error)  # as pickling rebuilds it: the message, then the parts
    except TypeError:  # an error type whose constructor wants more: its message as a HubError
        return HubError(str(error))


def content_length(response: Response) -> int | None:
    """The body's length as announced (None when unknown or the body is encoded)."""
    value = response.headers.get("Content-Length")
    if value is None or not value.strip().isdigit():
        return None
    if response.headers.get("Content-Encoding", "identity").lower() not in ("", "identity"):
        return None
    return int(value)


def _retry_after(response: Response | None) -> float | None:
    """``Retry-After`` in seconds (a number or an HTTP date), None when absent or unreadable."""
    value = response.headers.get("Retry-After") if response is not None else None
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:  # not a number of seconds: an HTTP date, or nothing kernlock can read
        return _seconds_until(value)
    return max(0.0, seconds)


def _seconds_until(date: str) -> float | None:
    """Seconds from now until the HTTP date ``date``; None when it is no date (the backoff applies)."""
    try:
        return max(0.0, (parsedate_to_datetime(date) - datetime.now(timezone.utc)).total_seconds())
    except (TypeError, ValueError):
        return None


def timeout() -> Timeout:
    """huggingface_hub's download timeout (``HF_HUB_DOWNLOAD_TIMEOUT``) between bytes; 10 s to connect."""
    return httpx.Timeout(float(constants.HF_HUB_DOWNLOAD_TIMEOUT), connect=10.0)  # type: ignore[no-any-return]


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 200 else text[:197] + "..."
