"""The Hub's HTTP protocol as the real clients speak it: request parsing, answers, headers and error codes.

Shared by kernlock's Hub mirror (:mod:`kernlock.airgap.mirror`) and the test Hub (:mod:`kernlock.testing.server`), so
the two answer the same requests the same way (``/work/shared/reference/hub-api.md`` lists them):

- a raw path is split on ``/`` *before* percent-decoding (``refs%2Fheads%2Fv1`` is one revision);
- JSON answers; errors carry ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``), which
  huggingface_hub turns into ``RepositoryNotFoundError``, ``RevisionNotFoundError``, ``RemoteEntryNotFoundError``;
- tree entries (``oid``, ``size``, ``lfs``), ``Link: <...>; rel="next"`` pagination;
- file answers with ``X-Repo-Commit``, ``ETag`` / ``X-Linked-Etag`` / ``X-Linked-Size`` and ``Range`` (206/416).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, parse_qsl, quote, unquote, urlencode

__all__ = [
    "CHUNK",
    "COMMITS_PAGE",
    "COMMITS_PAGE_MAX",
    "LFS_HEADER",
    "MAX_BODY",
    "REF_KINDS",
    "Abort",
    "Call",
    "Entry",
    "Headers",
    "Lfs",
    "Response",
    "error",
    "fake_oid",
    "file_headers",
    "flag",
    "git_blob_id",
    "join",
    "json_response",
    "lfs_pointer",
    "listing",
    "numbered_page",
    "page",
    "parse_range",
    "ranged",
    "read_file",
    "send",
    "split_revision",
    "status_line",
]

_T = TypeVar("_T")
LFS_HEADER = b"version https://git-lfs.github.com/spec/v1\n"
REF_KINDS = ("heads", "tags", "pr", "convert")
CHUNK = 1024 * 1024
MAX_BODY = 16 * 1024 * 1024  # a paths-info request; far above what clients send
Headers = list[tuple[str, str]]


# -- tree entries ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Lfs:
    """The LFS part of a tree entry: the content's sha256, its size, and the size of the git pointer file."""

    oid: str
    size: int
    pointer_size: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One tree entry (a file or a folder) as the Hub lists it."""

    path: str
    kind: str  # "file" or "directory"
    oid: str
    size: int
    lfs: Lfs | None = None

    def to_json(self) -> dict[str, Any]:
        """The entry of a ``tree`` or ``paths-info`` answer."""
        if self.kind == "directory":
            return {"type": "directory", "oid": self.oid, "size": 0, "path": self.path}
        data: dict[str, Any] = {"type": "file", "oid": self.oid, "size": self.size, "path": self.path}
        if self.lfs is not None:
            data["lfs"] = {"oid": self.lfs.oid, "size": self.lfs.size, "pointerSize": self.lfs.pointer_size}
        return data

    def sibling(self) -> dict[str, Any]:
        """The entry of a repo info's ``siblings``."""
        data: dict[str, Any] = {"rfilename": self.path, "size": self.size, "blobId": self.oid}
        if self.lfs is not None:
            data["lfs"] = {"sha256": self.lfs.oid, "size": self.lfs.size, "pointerSize": self.lfs.pointer_size}
        return data


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The git-lfs pointer file that stands in git for a file of this sha256 and size."""
    return LFS_HEADER + f"oid sha256:{sha256}\nsize {size}\n".encode()


def git_blob_id(data: bytes) -> str:
    """The git blob id (sha1 of ``blob <len>\\0<data>``)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def listing(entries: Iterable[Entry], path: str, recursive: bool) -> list[Entry]:
    """The entries below folder ``path`` ("" = the root): all of them, or only its direct children."""
    prefix = f"{path}/" if path else ""
    found = [e for e in entries if e.path.startswith(prefix)]
    return found if recursive else [e for e in found if "/" not in e.path[len(prefix) :]]


# -- answers -----------------------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class Response:
    """An answer: a body in memory, a generated stream, or ``length`` bytes of ``file`` from ``offset``."""

    status: int
    headers: Headers = field(default_factory=list)
    body: bytes = b""
    stream: Callable[[], Iterator[bytes]] | None = None
    length: int | None = None
    file: Path | None = None
    offset: int = 0

    @property
    def content_length(self) -> int:
        streamed = self.stream is not None or self.file is not None
        return self.length if streamed and self.length is not None else len(self.body)

    def chunks(self) -> Iterator[bytes]:
        """The body, at most ``CHUNK`` bytes at a time for a file or a stream."""
        if self.file is not None:
            yield from read_file(self.file, self.offset, self.content_length)
        elif self.stream is not None:
            yield from self.stream()
        elif self.body:
            yield self.body

    def truncated(self) -> Iterator[bytes]:
        """The first half of the body."""
        left = self.content_length // 2
        for chunk in self.chunks():
            if left <= 0:
                break
            yield chunk[:left]
            left -= len(chunk)

    def wsgi_body(self, environ: dict[str, Any]) -> Iterable[bytes]:
        """The body for a WSGI server: a file through ``wsgi.file_wrapper`` (gunicorn sends it with ``sendfile``,
        stopping at Content-Length), anything else in chunks. Memory stays flat whatever the file's size."""
        wrapper = environ.get("wsgi.file_wrapper")
        if self.file is None or wrapper is None:
            return self.chunks()
        handle = open(self.file, "rb")  # noqa: SIM115 (closed by the server through the wrapper)
        handle.seek(self.offset)
        body: Iterable[bytes] = wrapper(handle, CHUNK)  # PEP 3333: an iterable of bytes
        return body


class Abort(Exception):
    """Raised with the answer to send instead of the normal one."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


def json_response(data: Any, status: int = 200, headers: Iterable[tuple[str, str]] = ()) -> Response:
    """A compact JSON answer."""
    body = json.dumps(data, separators=(",", ":")).encode()
    return Response(status=status, headers=[("Content-Type", "application/json; charset=utf-8"), *headers], body=body)


def error(status: int, message: str, code: str | None = None, headers: Iterable[tuple[str, str]] = ()) -> Response:
    """An error as the Hub sends it: JSON ``{"error"}``, ``X-Error-Message`` and ``X-Error-Code`` when given."""
    text = " ".join(message.split())
    header = "".join(c if " " <= c <= "~" else c.encode("unicode_escape").decode() for c in text)  # no NUL/CR
    extra = [("X-Error-Message", header)]
    if code:
        extra.append(("X-Error-Code", code))
    return json_response({"error": message}, status, [*extra, *headers])


def status_line(status: int) -> str:
    """``200 OK``."""
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Unknown"


def read_file(path: Path, start: int, length: int) -> Iterator[bytes]:
    """``length`` bytes of ``path`` from ``start``, in chunks."""
    with path.open("rb") as handle:
        handle.seek(start)
        while length > 0:
            chunk = handle.read(min(CHUNK, length))
            if not chunk:
                return
            length -= len(chunk)
            yield chunk


# -- request parts -----------------------------------------------------------------------------------------


def flag(value: str | None) -> bool:
    """A query or form flag: ``1``, ``true``, ``yes``, ``on``."""
    return value is not None and value.strip().lower() in ("1", "true", "yes", "on")


def split_revision(segments: list[str]) -> tuple[str, list[str]]:
    """First raw segment(s) -> revision; an unencoded ``refs/<kind>/<name>`` spans three segments."""
    first = unquote(segments[0])
    if first == "refs" and len(segments) >= 3 and unquote(segments[1]) in REF_KINDS:
        return f"refs/{unquote(segments[1])}/{unquote(segments[2])}", segments[3:]
    return first, segments[1:]


def join(segments: list[str]) -> str:
    """Raw path segments -> the decoded path they name."""
    return "/".join(unquote(s) for s in segments).strip("/")


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``Range`` -> inclusive (start, end), None to answer in full; raises 416 when unsatisfiable."""
    match = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", header or "")
    if match is None or match.groups() == ("", ""):
        return None
    first, last = match.groups()
    if first == "":
        start, end = max(0, size - int(last)), size - 1
        if int(last) == 0:
            start = size
    else:
        start, end = int(first), min(int(last), size - 1) if last else size - 1
        if last and int(last) < start:
            return None
    if start >= size or start > end:
        raise Abort(error(416, "Range Not Satisfiable", headers=[("Content-Range", f"bytes */{size}")]))
    return start, end


@dataclass(slots=True, kw_only=True)
class Call:
    """The parts of a WSGI request the apps read."""

    environ: dict[str, Any]
    method: str
    raw_path: str
    query: str

    @classmethod
    def from_environ(cls, environ: dict[str, Any]) -> Call:
        """The request, from the raw URI when the server gives it (gunicorn: ``RAW_URI``)."""
        raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
        if not raw:
            path = environ.get("PATH_INFO", "").encode("latin-1").decode("utf-8", "replace")
            raw = quote(path, safe="/:@!$&'()*+,;=-._~")
            raw += f"?{environ['QUERY_STRING']}" if environ.get("QUERY_STRING") else ""
        if "://" in raw.split("?", 1)[0]:
            raw = "/" + raw.split("://", 1)[1].partition("/")[2]
        path, _, query = raw.partition("?")
        return cls(environ=environ, method=environ.get("REQUEST_METHOD", "GET").upper(), raw_path=path, query=query)

    @property
    def full_path(self) -> str:
        return f"{self.raw_path}?{self.query}" if self.query else self.raw_path

    @property
    def segments(self) -> list[str]:
        return [s for s in self.raw_path.split("/") if s]

    def param(self, name: str) -> str | None:
        """The last value of a query parameter."""
        values = [v for k, v in parse_qsl(self.query, keep_blank_values=True) if k == name]
        return values[-1] if values else None

    @property
    def base_url(self) -> str:
        env = self.environ
        host = env.get("HTTP_HOST") or f"{env.get('SERVER_NAME', '127.0.0.1')}:{env.get('SERVER_PORT', '80')}"
        return f"{env.get('wsgi.url_scheme', 'http')}://{host}"

    def body(self) -> bytes:
        length = int(self.environ.get("CONTENT_LENGTH") or 0)
        if length > MAX_BODY:  # refused before reading: a client cannot make the server hold gigabytes
            raise Abort(error(413, f"Request body of {length} bytes is larger than {MAX_BODY}"))
        return self.environ["wsgi.input"].read(length) if length > 0 else b""

    def form(self) -> dict[str, list[str]]:
        """Form (or JSON object) fields of the body, each as a list of strings."""
        raw = self.body()
        try:
            if "json" not in self.environ.get("CONTENT_TYPE", ""):
                return parse_qs(raw.decode("utf-8"), keep_blank_values=True)
            data = json.loads(raw or b"{}")
            return {k: [str(x) for x in v] if isinstance(v, list) else [str(v)] for k, v in data.items()}
        except (ValueError, AttributeError, RecursionError) as err:  # bad UTF-8 or JSON, or not a JSON object
            raise Abort(error(400, f"Invalid request body: {err}")) from err

    def require(self, *methods: str) -> None:
        """405 unless the method is one of ``methods`` (HEAD goes with GET)."""
        allowed = {*methods, "HEAD"} if "GET" in methods else set(methods)
        if self.method not in allowed:
            allow = [("Allow", ", ".join(sorted(allowed)))]
            raise Abort(error(405, f"Method {self.method} not allowed", headers=allow))


def page(call: Call, items: list[_T], size: int) -> tuple[list[_T], Headers]:
    """One page of ``items`` from the ``cursor`` parameter, and a ``Link: rel="next"`` header when more follow."""
    cursor = call.param("cursor") or "0"
    if not cursor.isdigit():
        raise Abort(error(400, f"Invalid cursor: {cursor}"))
    start = int(cursor)
    if start + size >= len(items):
        return items[start:], []
    return items[start : start + size], _next(call, "cursor", start + size)


#: A commit listing as the Hub pages it: page ``p`` (from 0) of ``limit`` commits (at most 1000, 50 when the client
#: names none, as huggingface_hub's ``list_repo_commits`` does not).
COMMITS_PAGE = 50
COMMITS_PAGE_MAX = 1000


def numbered_page(call: Call, items: list[_T], size: int = COMMITS_PAGE) -> tuple[list[_T], Headers]:
    """Page ``p`` (from 0) of ``items``, ``limit`` a page (``size`` when the client names none, at most
    COMMITS_PAGE_MAX), and a ``Link: rel="next"`` header naming page ``p + 1`` when more follow."""
    number, limit = call.param("p") or "0", call.param("limit") or str(size)
    if not number.isdigit() or not limit.isdigit() or int(limit) < 1:
        raise Abort(error(400, f"Invalid page: p={number}, limit={limit}"))
    size = min(int(limit), COMMITS_PAGE_MAX)
    start = int(number) * size
    if start + size >= len(items):
        return items[start:], []
    return items[start : start + size], _next(call, "p", int(number) + 1)


def _next(call: Call, name: str, value: int) -> Headers:
    """The ``Link: rel="next"`` header of ``call``'s URL with query parameter ``name`` set to ``value``."""
    query = [(k, v) for k, v in parse_qsl(call.query, keep_blank_values=True) if k != name]
    query.append((name, str(value)))
    return [("Link", f'<{call.base_url}{call.raw_path}?{urlencode(query)}>; rel="next"')]


def file_headers(commit: str, entry: Entry) -> Headers:
    """What a ``resolve`` answer carries: the commit, ``ETag`` (git blob id, or sha256 and ``X-Linked-*`` for an
    LFS file). Never an Xet header: that would switch the client to the Xet protocol."""
    headers = [("X-Repo-Commit", commit), ("Accept-Ranges", "bytes"), ("Content-Type", "application/octet-stream")]
    if entry.lfs is None:
        return [*headers, ("ETag", f'"{entry.oid}"')]
    etag = f'"{entry.lfs.oid}"'
    return [*headers, ("ETag", etag), ("X-Linked-Etag", etag), ("X-Linked-Size", str(entry.lfs.size))]


def ranged(call: Call, data: bytes | None, file: Path | None, size: int, headers: Headers, offset: int = 0) -> Response:
    """The whole content (200) or the ``Range`` asked for (206 with ``Content-Range``), from ``data`` in memory or
    from ``size`` bytes of ``file`` starting at ``offset`` (e.g. a member of an uncompressed tar)."""
    span = parse_range(call.environ.get("HTTP_RANGE"), size)
    start, end = span if span is not None else (0, size - 1)
    status = 200 if span is None else 206
    if span is not None:
        headers = [*headers, ("Content-Range", f"bytes {start}-{end}/{size}")]
    length = max(0, end - start + 1)
    if data is not None:
        return Response(status=status, headers=headers, body=data[start : end + 1])
    assert file is not None
    return Response(status=status, headers=headers, length=length, file=file, offset=offset + start)


def send(call: Call, response: Response, start_response: Callable[..., Any]) -> Iterable[bytes]:
    """Start the WSGI answer (adding Content-Length) and return its body (none for HEAD)."""
    headers = list(response.headers)
    if not any(k.lower() == "content-length" for k, _ in headers):
        headers.append(("Content-Length", str(response.content_length)))
    start_response(status_line(response.status), headers)
    return [] if call.method == "HEAD" else response.wsgi_body(call.environ)


def fake_oid(*parts: str) -> str:
    """A stable 40-hex id for an entry whose git id is not known (a folder of a partial tree)."""
    return hashlib.sha1("\0".join(parts).encode()).hexdigest()
