"""The only module that talks to the Hub, through huggingface_hub's HTTP session (``get_session()``).

Every answer is validated where it arrives, because a Hub, a mirror or a proxy may be broken or hostile: commit
ids are 40-hex, ref names are safe (others are ignored), file paths inside a variant are plain relative paths,
sizes are integers from 0 to 1 TiB, blob ids and LFS sha256 are hex of the right length; ``build/<name>/``
folders whose name is not a variant are skipped, as the loader skips them. An invalid answer is a HubError that
names the endpoint and the repo. Answers addressed by a commit (the build tree, a file's bytes) are immutable and
cached on disk at paths built with :func:`kernlock.names.under` from validated parts; what is read back from
that cache is validated again (a poisoned entry is fetched anew). Refs are always asked fresh.

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
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, BinaryIO, TypeVar
from urllib.parse import quote

from huggingface_hub import HfApi, constants, get_session, hf_hub_url
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

from kernlock import __version__, interrupt, names
from kernlock.atomic import write_bytes_atomic
from kernlock.errors import HubError, IntegrityError, KernlockError, NotFoundError, SpecError, UnknownRevisionError
from kernlock.hfenv import cache_root as cache_root  # here too: where it always was
from kernlock.lockmodel import LockedFile
from kernlock.variants import check_variant_name


def _http_client() -> Any:
    """The HTTP package huggingface_hub's session is made of: httpx2 for huggingface_hub 2.x, httpx for 1.x (the
    same API under two names; both may be installed, so ask the installed huggingface_hub)."""
    import huggingface_hub

    major = int(huggingface_hub.__version__.split(".")[0])
    return importlib.import_module("httpx2" if major >= 2 else "httpx")


httpx = _http_client()


T = TypeVar("T")
REPO_TYPE = "kernel"
RETRY_STATUSES = {408, 429, 500, 502, 503, 504}
DEFAULT_RETRIES = 3  # 4 attempts per request
COMMAND_RETRIES = 8  # retries per Hub object (one command), all requests together
WAIT_BUDGET = 15.0  # seconds of backoff waiting per Hub object, all requests together
MAX_WAIT = 10.0  # one wait, Retry-After included
MAX_LISTING = 100_000  # entries of one paginated listing
MAX_PAGES = 1_000  # pages of one paginated listing
MAX_JSON = 32 * 1024 * 1024  # bytes of one JSON answer
MAX_READ = 1024 * 1024  # bytes of one read_file answer (metadata.json)
_HEX = re.compile(r"^[0-9a-f]{4,40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_BLOB = re.compile(r"^[0-9a-f]{40}$")
_FIX = "check HF_ENDPOINT (a mirror or proxy may be broken)"


@dataclass(frozen=True)
class Refs:
    """Branches and tags of a repo, each name -> commit."""

    branches: dict[str, str]
    tags: dict[str, str]

    def versions(self) -> dict[int, str]:
        """Version branches ``vN`` -> commit."""
        found = {}
        for name, commit in self.branches.items():
            if re.fullmatch(r"v\d+", name):
                found[int(name[1:])] = commit
        return found


class _Retry(Exception):
    """A fault of the transfer that is worth a retry (a body shorter than announced, a resume the Hub refused)."""


_NETWORK_FAULTS = (httpx.TransportError, ConnectionError, TimeoutError, _Retry)


class Hub:
    """A Hub endpoint as kernlock needs it; thread-safe, so kernels are resolved in parallel.

    ``retries`` retries per request and ``backoff`` (seconds, doubled per retry) shape one request's attempts;
    the budget of the whole object is fixed (module docstring).
    """

    def __init__(
        self,
        endpoint: str | None = None,
        token: str | None = None,
        cache_dir: Path | None = None,
        retries: int = DEFAULT_RETRIES,
        backoff: float = 0.5,
    ) -> None:
        self.endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
        self.api = HfApi(endpoint=self.endpoint, token=token, library_name="kernlock", library_version=__version__)
        self.token = token
        self.cache_dir = cache_dir or cache_root() / "hub"
        self.retries = max(0, retries)
        self.backoff = max(0.0, backoff)
        self._trust: dict[str, tuple[bool, Any]] = {}
        self._refs: dict[str, tuple[bool, Any]] = {}
        self._blobs: dict[str, tuple[bool, Any]] = {}
        self._key_locks: dict[tuple[int, str], threading.Lock] = {}
        self._lock = threading.Lock()
        self._retries_used = 0
        self._waited = 0.0
        self._failed: KernlockError | None = None

    # -- mutable answers (never cached across runs) --

    def refs(self, repo: str) -> Refs:
        """Branches and tags of ``repo``: one request, remembered (answer or failure) for the life of this Hub
        object, so that one command sees one consistent state of the repo."""
        repo = _checked_repo(repo)

        def fetch() -> Refs:
            url = f"{self.endpoint}/api/kernels/{repo}/refs"
            label = f"the branches and tags of {repo}"
            data = self._call(repo, lambda: self._get_json(url, label), label)
            if not isinstance(data, dict) or not isinstance(data.get("branches"), list):
                raise self._invalid(f"a refs answer without a list of branches for {repo}", url)
            found: dict[str, dict[str, str]] = {"branches": {}, "tags": {}}
            for kind, table in found.items():
                items = data.get(kind) or []
                if not isinstance(items, list) or len(items) > MAX_LISTING:
                    raise self._invalid(f"a refs answer whose {kind} are not a list for {repo}", url)
                for item in items:
                    if not isinstance(item, dict):
                        raise self._invalid(f"a refs answer with a {kind[:-1]} that is not an object for {repo}", url)
                    try:
                        name = names.check_ref(item.get("name"))
                    except ValueError:
                        continue  # a name kernlock cannot use as a path (nor the loader as a version): ignored
                    table[name] = self._commit_from(item.get("targetCommit"), repo, url)
            return Refs(found["branches"], found["tags"])

        return self._once(self._refs, repo, fetch)

    def is_trusted(self, org: str) -> bool:
        """Whether the Hub marks ``org`` as a trusted kernel publisher (asked once per org and Hub object)."""
        org = _checked_repo(f"{org}/kernel").split("/")[0]

        def fetch() -> bool:
            url = f"{self.endpoint}/api/organizations/{org}/overview"
            try:
                label = f"the publisher overview of {org}"
                data = self._call(org, lambda: self._get_json(url, label), label)
            except NotFoundError:
                return False
            if not isinstance(data, dict):
                raise self._invalid(f"an organization overview that is not an object for {org}", url)
            return data.get("trustedKernelPublisher") is True

        return self._once(self._trust, org, fetch)

    def commits(self, repo: str, branch: str) -> list[str]:
        """Commit ids reachable from ``branch``, newest first (every id checked)."""
        return [commit for commit, _ in self.history(repo, branch)]

    def history(self, repo: str, rev: str, until: str | None = None) -> list[tuple[str, str]]:
        """(commit id, date) reachable from ``rev``, newest first; with ``until``, no page after the one that
        holds that commit is fetched. Dates are the Hub's ISO 8601 strings ("" when it gave none)."""
        repo = _checked_repo(repo)
        url = f"{self.endpoint}/api/kernels/{repo}/commits/{_quote(rev)}"
        found = []
        for item in self._paginate(repo, url, {}, f"the commit history of {repo}@{rev}"):
            if not isinstance(item, dict):
                raise self._invalid(f"a commit listing with an entry that is not an object for {repo}", url)
            date = item.get("date")
            found.append((self._commit_from(item.get("id"), repo, url), date[:40] if isinstance(date, str) else ""))
            if found[-1][0] == until:
                break
        return found

    def resolve_revision(self, repo: str, rev: str, refs: Refs | None = None) -> tuple[str, str]:
        """``rev`` (branch, tag, full or short sha) -> (ref it was resolved through, commit)."""
        refs = refs or self.refs(repo)
        name = rev.removeprefix("refs/heads/").removeprefix("refs/tags/")
        if name in refs.branches and not rev.startswith("refs/tags/"):
            return name, refs.branches[name]
        if name in refs.tags:
            return name, refs.tags[name]
        if _HEX.match(rev):
            if len(rev) == 40:
                return rev, rev
            matches = {c for branch in refs.branches for c in self.commits(repo, branch) if c.startswith(rev)}
            matches |= {c for c in refs.tags.values() if c.startswith(rev)}
            if len(matches) == 1:
                commit = matches.pop()
                return commit, commit
            if len(matches) > 1:
                raise NotFoundError(
                    f"revision '{rev}' of {repo} is ambiguous: it matches "
                    f"{', '.join(sorted(c[:12] for c in matches))}; use more characters of the commit sha."
                )
        versions = ", ".join(f"v{n}" for n in sorted(refs.versions())) or "none"
        others = sorted(set(refs.branches) - {f"v{n}" for n in refs.versions()}) + sorted(refs.tags)
        raise UnknownRevisionError(
            f"{repo} has no revision '{rev}'; version branches: {versions}"
            + (f"; other branches and tags: {', '.join(others)}" if others else "")
            + f". Pick one, e.g. `kernlock add {repo}@v{max(refs.versions(), default=1)}`."
        )

    # -- immutable answers (cached on disk by commit) --

    def build_tree(self, repo: str, commit: str) -> dict[str, tuple[LockedFile, ...]]:
        """Variant name -> its files at ``commit``, from one recursive listing of ``build/`` (cached)."""
        repo, commit = _checked_repo(repo), _checked_commit(commit)
        path = self._cache_path(repo, commit, "build-tree.json")
        cached = _tree_from_cache(path) if path is not None else None
        if cached is not None:
            return cached
        url = f"{self.endpoint}/api/kernels/{repo}/tree/{commit}/build"
        data = self._list_build(repo, commit, url)
        try:
            tree = _tree(data)
        except (ValueError, TypeError) as err:  # LockedFile's own checks, stricter than the ones above
            raise self._invalid(f"a build tree kernlock cannot lock for {repo} at {commit[:12]} ({err})", url) from None
        if path is not None:
            self._write_cache(path, json.dumps(data, sort_keys=True).encode())
        return tree

    def _list_build(self, repo: str, commit: str, url: str) -> dict[str, list[list[Any]]]:
        """The validated files of every variant folder under ``build/``: name -> sorted [path, size, hash]."""
        variants: dict[str, dict[str, list[list[Any]]]] = {}
        label = f"the build tree of {repo}@{commit[:12]}"
        for entry in self._paginate(repo, url, {"recursive": "true", "expand": "false"}, label, missing_ok=True):
            if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
                raise self._invalid(f"a tree entry without a path for {repo}", url)
            parts = entry["path"].split("/")
            if parts[0] != "build" or len(parts) < 2:
                raise self._invalid(f"a tree entry outside build/ ({_show(entry['path'])}) for {repo}", url)
            if entry.get("type") != "file" or len(parts) < 3 or not _is_variant(parts[1]):
                continue  # folders, files directly in build/, folders that are no variant (the loader skips them)
            name, rel = parts[1], "/".join(parts[2:])
            try:
                names.check_path(rel)
                size, digest = _size_and_hash(entry)
            except ValueError as err:
                raise self._invalid(f"build/{name}/{_show(rel, 60)} of {repo}: {err}", url) from None
            variants.setdefault(name, {}).setdefault(rel.casefold(), []).append([rel, size, digest])
        result = {}
        for name, found in variants.items():
            files = sorted(f for same in found.values() for f in same)
            try:
                _check_file_set(files)
            except ValueError as err:
                raise self._invalid(f"a build/{name}/ listing of {repo} that {err}", url) from None
            result[name] = files
        return result

    def read_file(self, repo: str, commit: str, path: str) -> bytes:
        """The bytes of ``path`` at ``commit`` (one GET, at most 1 MiB; cached on disk)."""
        repo, commit, path = _checked_repo(repo), _checked_commit(commit), _checked_path(path)
        cached = self._cache_path(repo, commit, "files", *path.split("/"))
        data = _file_from_cache(cached) if cached is not None else None
        if data is not None:
            return data
        url = hf_hub_url(repo, path, repo_type=REPO_TYPE, revision=commit, endpoint=self.endpoint)
        data = self._call(f"{repo}@{commit[:12]} {path}", lambda: self._get(url, MAX_READ, f"{path} of {repo}"))
        if cached is not None:
            self._write_cache(cached, data)
        return data

    def read_blob(self, repo: str, commit: str, path: str, blob: str) -> bytes:
        """:meth:`read_file` for a file the build tree names by its blob id (its ``hash``): fetched once per
        distinct blob of ``repo`` and Hub object, so the variants and commits of one lock that share a file (the
        same ``metadata.json``) cost one request."""
        return self._once(self._blobs, f"{repo}\0{blob}", lambda: self.read_file(repo, commit, path))

    def download(
        self, repo: str, commit: str, path: str, dest: Path, size: int | None = None, tqdm_class: type | None = None
    ) -> None:
        """Stream ``path`` at ``commit`` into ``dest`` (one GET per attempt, no HEAD), resuming from the bytes
        ``dest`` already holds with ``Range: bytes=N-``.

        A Hub that serves another size than ``size`` (the locked size) is an IntegrityError at once, and ``dest``
        is removed; a dropped or short transfer is retried (and resumed) within the request's budget.
        """
        repo, commit, path = _checked_repo(repo), _checked_commit(commit), _checked_path(path)
        if size is not None:
            size = names.check_size(size)
        url = hf_hub_url(repo, path, repo_type=REPO_TYPE, revision=commit, endpoint=self.endpoint)
        what = f"{repo}@{commit[:12]} {path}"
        label = f"{repo.split('/')[-1]}/{path.rsplit('/', 1)[-1]}"
        try:
            self._call(what, lambda: self._fetch_into(url, what, dest, size, tqdm_class, label))
        except IntegrityError:
            dest.unlink(missing_ok=True)  # a file of the wrong size never stays, even as a partial download
            raise

    def _fetch_into(
        self, url: str, what: str, dest: Path, size: int | None, tqdm_class: type | None, label: str
    ) -> None:
        """One attempt of :meth:`download`."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest, "ab") as handle:
            have = handle.tell()
            if size is not None and have > size:
                handle.truncate(0)
                have = 0
            if size is not None and have == size:
                return  # complete: the caller verifies the hash
            headers = {**self._headers(), "Accept-Encoding": "identity"}
            if have:
                headers["Range"] = f"bytes={have}-"
            with get_session().stream("GET", url, headers=headers, timeout=_timeout()) as response:
                if response.status_code == 416 and have:
                    handle.truncate(0)  # the Hub's file is shorter than what we hold: start over
                    raise _Retry(f"the Hub refused to resume {what} at byte {have}")
                hf_raise_for_status(response)
                if have and response.status_code != 206:
                    handle.truncate(0)  # the Hub ignored the Range header and sends the whole file
                    have = 0
                elif have:
                    self._check_resume(response, what, url, have, size, handle)
                expected = None if size is None else size - have
                declared = _content_length(response)
                if expected is not None and declared is not None and declared != expected:
                    raise self._size_error(what, url, f"{have + declared} bytes", size)
                self._stream(response, handle, have, size, expected, what, url, tqdm_class, label)

    def _check_resume(
        self, response: httpx.Response, what: str, url: str, have: int, size: int | None, handle: BinaryIO
    ) -> None:
        """A 206 answer must continue at byte ``have`` of a file of ``size`` bytes."""
        match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+|\*)", response.headers.get("Content-Range", "").strip())
        if match is None or int(match.group(1)) != have:
            handle.truncate(0)
            raise _Retry(f"the Hub resumed {what} at another byte than {have}")
        if size is not None and match.group(3) != "*" and int(match.group(3)) != size:
            raise self._size_error(what, url, f"{match.group(3)} bytes", size)

    def _stream(
        self,
        response: httpx.Response,
        handle: BinaryIO,
        have: int,
        size: int | None,
        expected: int | None,
        what: str,
        url: str,
        tqdm_class: type | None,
        label: str,
    ) -> None:
        """Write the body to ``handle``, never more than ``expected`` bytes; checks for cancellation per chunk."""
        bar = tqdm_class(total=size, initial=have, unit="B", unit_scale=True, desc=label) if tqdm_class else None
        written = 0
        try:
            for chunk in response.iter_bytes():
                interrupt.check()
                written += len(chunk)
                if expected is not None and written > expected:
                    raise self._size_error(what, url, f"more than {size} bytes", size)
                handle.write(chunk)
                if bar is not None:
                    bar.update(len(chunk))
        finally:
            if bar is not None:
                bar.close()
        if expected is not None and written < expected:
            raise _Retry(f"the body of {what} ended after {have + written} of {size} bytes")

    def _size_error(self, what: str, url: str, served: str, size: int | None) -> IntegrityError:
        return IntegrityError(
            f"{self.endpoint} served {what} with {served}, but kernels.lock records {size} bytes ({url}); nothing "
            "was installed. Retry `kernlock sync`; if it persists the endpoint serves other content than the lock "
            "was made from (check HF_ENDPOINT)."
        )

    # -- the disk cache of immutable answers --

    def _cache_path(self, repo: str, commit: str, *parts: str) -> Path | None:
        """``{cache}/{org}--{name}/{commit}/{parts}`` from validated parts, proven to stay under the cache; None
        when it would not (a symlink planted in the cache): the answer is then fetched and not cached."""
        try:
            return names.under(self.cache_dir, repo.replace("/", "--"), commit, *parts)
        except ValueError:
            return None

    @staticmethod
    def _write_cache(path: Path, data: bytes) -> None:
        """Cache ``data`` at ``path`` (never through a symlink); a cache that cannot be written only loses time."""
        try:
            if path.is_symlink():
                path.unlink()
            write_bytes_atomic(path, data)
        except OSError:
            pass

    # -- requests --

    def _headers(self) -> dict[str, str]:
        return build_hf_headers(token=self.token, library_name="kernlock", library_version=__version__)

    def _get(self, url: str, limit: int, what: str, params: dict[str, str] | None = None) -> bytes:
        """One GET, its body read up to ``limit`` bytes (a larger answer is a HubError naming the URL)."""
        return self._get_response(url, limit, what, params)[0]

    def _get_response(
        self, url: str, limit: int, what: str, params: dict[str, str] | None = None
    ) -> tuple[bytes, httpx.Response]:
        with get_session().stream("GET", url, params=params, headers=self._headers(), timeout=_timeout()) as response:
            hf_raise_for_status(response)
            declared = _content_length(response)
            if declared is not None and declared > limit:
                raise self._too_large(what, url, limit)
            body = bytearray()
            for chunk in response.iter_bytes():
                interrupt.check()
                body += chunk
                if len(body) > limit:
                    raise self._too_large(what, url, limit)
            return bytes(body), response

    def _get_json(self, url: str, what: str) -> Any:
        return self._parse_json(self._get(url, MAX_JSON, what), url)

    def _parse_json(self, body: bytes, url: str) -> Any:
        try:
            return json.loads(body)
        except (ValueError, RecursionError):  # RecursionError: nested too deeply for the parser
            raise self._invalid("an answer that is not JSON", url) from None

    def _paginate(
        self, what: str, url: str, params: dict[str, str], label: str, missing_ok: bool = False
    ) -> Iterator[Any]:
        """The entries of a paginated listing (``Link: <next>; rel="next"``), one request (and budget) per page;
        at most MAX_LISTING entries and MAX_PAGES pages; a next page must be on the endpoint's host."""
        origin = httpx.URL(self.endpoint)
        page_url = url
        count = 0
        for pages in range(MAX_PAGES + 1):
            if pages == MAX_PAGES:
                raise self._invalid(f"more than {MAX_PAGES} pages for {what}", url)

            def page(page_url: str = page_url, first: bool = pages == 0) -> Any:
                try:
                    body, response = self._get_response(page_url, MAX_JSON, label, params if first else None)
                except EntryNotFoundError:
                    if missing_ok and first:
                        return [], None
                    raise
                return self._parse_json(body, page_url), response.links.get("next", {}).get("url")

            items, link = self._call(what, page, label)
            if not isinstance(items, list):
                raise self._invalid(f"a listing that is not a list for {what}", page_url)
            count += len(items)
            if count > MAX_LISTING:
                raise self._invalid(f"a listing of more than {MAX_LISTING} entries for {what}", url)
            yield from items
            if not link:
                return
            following = httpx.URL(page_url).join(link)
            if (following.scheme, following.host, following.port) != (origin.scheme, origin.host, origin.port):
                raise self._invalid(f"a next page on another host ({_show(str(following))}) for {what}", url)
            page_url = str(following)

    def _commit_from(self, value: object, repo: str, url: str) -> str:
        try:
            return names.check_commit(value)
        except ValueError:
            raise HubError(
                f"the Hub at {self.endpoint} answered an invalid commit id {_show(value)} for {repo} ({url}); {_FIX}."
            ) from None

    def _invalid(self, what: str, url: str) -> HubError:
        return HubError(f"the Hub at {self.endpoint} answered {what} ({url}); {_FIX}.")

    def _too_large(self, what: str, url: str, limit: int) -> HubError:
        return HubError(f"the Hub at {self.endpoint} answered more than {limit} bytes for {what} ({url}); {_FIX}.")

    # -- retries and error mapping --

    def _call(self, what: str, fn: Callable[[], T], label: str | None = None) -> T:
        """Run ``fn`` (one request) within the retry budget; map Hub errors to kernlock errors (``what`` names the
        repo or file in not-found errors, ``label`` the request in fault messages; default: ``what``)."""
        attempt = 0
        while True:
            self._raise_if_failed()
            attempt += 1
            response: httpx.Response | None = None
            started = time.monotonic()
            try:
                return fn()
            except RepositoryNotFoundError as err:
                raise NotFoundError(
                    f"{what} was not found on {self.endpoint} (or it is private and no token is set); "
                    "check the name, e.g. kernels-community/activation."
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
                        f"the Hub at {self.endpoint} refused access to {what} (HTTP {status}); check HF_TOKEN "
                        "(`hf auth login`) and that it may read this repo."
                    ) from err
                if status not in RETRY_STATUSES:
                    raise HubError(f"the Hub at {self.endpoint} answered HTTP {status} for {what}; {_FIX}.") from err
                fault: BaseException = err
            except OfflineModeIsEnabled as err:
                raise HubError(
                    f"{what}: the Hub is needed but HF_HUB_OFFLINE is set; run this once online, "
                    "or `kernlock sync` before going offline."
                ) from err
            except httpx.UnsupportedProtocol as err:
                raise HubError(
                    f"cannot reach the Hub at {self.endpoint} ({_one_line(err)}); check HF_ENDPOINT."
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

    def _next_wait(self, attempt: int, response: httpx.Response | None) -> tuple[float | None, bool]:
        """Seconds to wait before the next attempt, or None to give up (and whether the command's budget is why)."""
        if attempt > self.retries:
            return None, False
        delay = self.backoff * 2 ** (attempt - 1)
        retry_after = _retry_after(response)
        if retry_after is not None:
            delay = retry_after
        delay = min(max(delay, 0.0), MAX_WAIT)
        with self._lock:
            if self._failed is not None:
                return None, False
            if self._retries_used >= COMMAND_RETRIES or self._waited + delay > WAIT_BUDGET:
                return None, True
            self._retries_used += 1
            self._waited += delay
        return delay, False

    def _give_up(self, what: str, fault: BaseException, attempts: int, spent: bool) -> KernlockError:
        """The final error of a request; the first one is remembered so later requests fail at once with it."""
        with self._lock:
            if self._failed is not None:
                return _copy(self._failed)
        tried = f"after {attempts} attempt(s)" + (
            f" (this command's budget of {COMMAND_RETRIES} retries and {WAIT_BUDGET:.0f} s of waiting is spent)"
            if spent
            else ""
        )
        if isinstance(fault, HfHubHTTPError):
            status = fault.response.status_code if fault.response is not None else 0
            hint = (
                "rate limited: set HF_TOKEN (`hf auth login`) or wait, then try again later"
                if status == 429
                else "the Hub (or a proxy in between) is failing: try again later, or check HF_ENDPOINT"
            )
            error: KernlockError = HubError(
                f"the Hub at {self.endpoint} answered HTTP {status} for {what} {tried}; {hint}."
            )
        elif isinstance(fault, (httpx.ConnectError, httpx.ConnectTimeout)):
            error = HubError(
                f"cannot reach the Hub at {self.endpoint} ({type(fault).__name__}: {_one_line(fault)}) {tried}; check "
                "the network or HF_ENDPOINT. Already-synced kernels still load: `kernlock sync --offline`."
            )
        else:
            error = HubError(
                f"the connection to the Hub at {self.endpoint} failed while fetching {what} ({type(fault).__name__}: "
                f"{_one_line(fault)}) {tried}; check the network or HF_ENDPOINT, then try again."
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

    def _once(self, table: dict[str, tuple[bool, Any]], key: str, fetch: Callable[[], Any]) -> Any:
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
            return value
        raise _copy(value) from value


# -- helpers -------------------------------------------------------------------------------------------------


def _copy(error: KernlockError) -> KernlockError:
    """A new exception of the same type and message (one object is never raised in two threads)."""
    try:
        return type(error)(str(error))
    except TypeError:
        return HubError(str(error))


def _checked(check: Callable[[object], T], value: object, error: type[KernlockError]) -> T:
    try:
        return check(value)
    except ValueError as err:
        raise error(str(err)) from None


def _checked_repo(repo: str) -> str:
    return _checked(names.check_repo, repo, SpecError)


def _checked_commit(commit: str) -> str:
    return _checked(names.check_commit, commit, HubError)


def _checked_path(path: str) -> str:
    return _checked(names.check_path, path, HubError)


def _is_variant(name: str) -> bool:
    """Whether ``build/<name>/`` is a variant folder the loader would consider (its grammar, a safe folder name)."""
    try:
        names.check_variant_folder(name)
        check_variant_name(name)
    except ValueError:
        return False
    return True


def _size_and_hash(entry: dict[str, Any]) -> tuple[int, str]:
    """(size, ``sha256:`` or ``git-sha1:`` hash) of a tree entry; ValueError when either is malformed."""
    lfs = entry.get("lfs")
    if lfs is not None:
        if not isinstance(lfs, dict):
            raise ValueError(f"its lfs field {_show(lfs)} is not an object")
        oid, size = lfs.get("oid"), lfs.get("size")
        if not isinstance(oid, str) or not _SHA256.match(oid):
            raise ValueError(f"LFS sha256 {_show(oid)} is not 64 hex digits")
        return names.check_size(size), f"sha256:{oid}"
    oid = entry.get("oid")
    if not isinstance(oid, str) or not _BLOB.match(oid):
        raise ValueError(f"blob id {_show(oid)} is not 40 hex digits")
    return names.check_size(entry.get("size")), f"git-sha1:{oid}"


def _check_file_set(files: list[list[Any]]) -> None:
    """No path twice (also not in another letter case), no file where another file needs a folder (ValueError)."""
    keys = [f[0].casefold() if isinstance(f[0], str) else "" for f in files]
    if "" in keys or len(set(keys)) != len(keys):
        raise ValueError("lists a path twice")
    folders = {"/".join(key.split("/")[:i]) for key in keys for i in range(1, key.count("/") + 1)}
    clash = sorted(folders & set(keys))
    if clash:
        raise ValueError(f"lists {_show(clash[0], 60)} both as a file and as a folder")


def _tree(data: dict[str, list[list[Any]]]) -> dict[str, tuple[LockedFile, ...]]:
    return {name: tuple(LockedFile(*f) for f in files) for name, files in data.items()}


def _tree_from_cache(path: Path) -> dict[str, tuple[LockedFile, ...]] | None:
    """The cached build tree, validated again like a Hub answer; None when absent or not valid (re-fetched)."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_JSON:
            return None
        data = json.loads(path.read_bytes())
        if not isinstance(data, dict):
            return None
        for name, files in data.items():
            if not _is_variant(name) or not isinstance(files, list) or not files:
                return None
            if not all(isinstance(f, list) and len(f) == 3 for f in files):
                return None
            _check_file_set(files)
        return _tree(data)
    except (OSError, ValueError, TypeError, RecursionError):
        return None


def _file_from_cache(path: Path) -> bytes | None:
    """A cached file's bytes; None when absent, a symlink or larger than any answer read_file accepts."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_READ:
            return None
        return path.read_bytes()
    except OSError:
        return None


def _content_length(response: httpx.Response) -> int | None:
    """The body's length as announced (None when unknown or the body is encoded)."""
    value = response.headers.get("Content-Length")
    if value is None or not value.strip().isdigit():
        return None
    if response.headers.get("Content-Encoding", "identity").lower() not in ("", "identity"):
        return None
    return int(value)


def _retry_after(response: httpx.Response | None) -> float | None:
    """``Retry-After`` in seconds (a number or an HTTP date), None when absent or unreadable."""
    value = response.headers.get("Retry-After") if response is not None else None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, (parsedate_to_datetime(value) - datetime.now(timezone.utc)).total_seconds())
    except (TypeError, ValueError):
        return None


def _timeout() -> httpx.Timeout:
    """huggingface_hub's download timeout (``HF_HUB_DOWNLOAD_TIMEOUT``) between bytes; 10 s to connect."""
    return httpx.Timeout(float(constants.HF_HUB_DOWNLOAD_TIMEOUT), connect=10.0)


def _quote(value: str) -> str:
    return quote(value, safe="")


def _show(value: object, limit: int = 80) -> str:
    """``repr`` of a value from an answer, short and on one line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 200 else text[:197] + "..."
