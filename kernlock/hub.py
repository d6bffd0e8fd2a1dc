"""The only module that talks to the Hub (through huggingface_hub).

Answers addressed by a commit (the build tree, a file's bytes) are immutable and cached on disk; refs are
always asked fresh. Every call retries 429/5xx and dropped connections with backoff (honouring Retry-After),
then raises a HubError that says what to do.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx2
from huggingface_hub import HfApi, constants, get_session, hf_hub_url
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoFile
from huggingface_hub.utils import hf_raise_for_status

from kernlock import __version__
from kernlock.atomic import write_bytes_atomic
from kernlock.errors import HubError, NotFoundError
from kernlock.lockfile import LockedFile

T = TypeVar("T")
REPO_TYPE = "kernel"
RETRY_STATUSES = {408, 429, 500, 502, 503, 504}
_HEX = re.compile(r"^[0-9a-f]{4,40}$")


def cache_root() -> Path:
    """kernlock's own cache: ``$KERNLOCK_CACHE``, else ``$XDG_CACHE_HOME/kernlock``, else ~/.cache/kernlock."""
    if os.environ.get("KERNLOCK_CACHE"):
        return Path(os.environ["KERNLOCK_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kernlock"


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


class Hub:
    """A Hub endpoint as kernlock needs it; thread-safe, so kernels are resolved in parallel."""

    def __init__(
        self,
        endpoint: str | None = None,
        token: str | None = None,
        cache_dir: Path | None = None,
        retries: int = 5,
        backoff: float = 0.5,
    ) -> None:
        self.endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
        self.api = HfApi(endpoint=self.endpoint, token=token, library_name="kernlock", library_version=__version__)
        self.cache_dir = cache_dir or cache_root() / "hub"
        self.retries = retries
        self.backoff = backoff
        self._trust: dict[str, bool] = {}
        self._refs: dict[str, Refs] = {}
        self._key_locks: dict[tuple[int, str], threading.Lock] = {}
        self._lock = threading.Lock()

    # -- mutable answers (never cached across runs) --

    def refs(self, repo: str) -> Refs:
        """Branches and tags of ``repo``: one request, remembered for the life of this Hub object, so that one
        command sees one consistent state of the repo."""

        def fetch() -> Refs:
            answer = self._call(repo, lambda: self.api.list_repo_refs(repo, repo_type=REPO_TYPE))
            return Refs(
                {b.name: b.target_commit for b in answer.branches},
                {t.name: t.target_commit for t in answer.tags},
            )

        return self._once(self._refs, repo, fetch)

    def is_trusted(self, org: str) -> bool:
        """Whether the Hub marks ``org`` as a trusted kernel publisher (asked once per org and process)."""

        def fetch() -> bool:
            try:
                info = self._call(org, lambda: self.api.get_organization_overview(org))
            except NotFoundError:
                return False
            return bool(getattr(info, "trustedKernelPublisher", False))

        return self._once(self._trust, org, fetch)

    def commits(self, repo: str, branch: str) -> list[str]:
        """Commit ids reachable from ``branch``, newest first."""
        return self._call(
            repo,
            lambda: [c.commit_id for c in self.api.list_repo_commits(repo, repo_type=REPO_TYPE, revision=branch)],
        )

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
        raise NotFoundError(
            f"{repo} has no revision '{rev}'; version branches: {versions}"
            + (f"; other branches and tags: {', '.join(others)}" if others else "")
            + f". Pick one, e.g. `kernlock add {repo}@v{max(refs.versions(), default=1)}`."
        )

    # -- immutable answers (cached on disk by commit) --

    def build_tree(self, repo: str, commit: str) -> dict[str, tuple[LockedFile, ...]]:
        """Variant name -> its files at ``commit``, from one recursive listing of ``build/``."""
        path = self._cache_path(repo, commit, "build-tree.json")
        if path.exists():
            data = json.loads(path.read_text())
        else:
            data = self._call(repo, lambda: self._list_build(repo, commit))
            write_bytes_atomic(path, json.dumps(data, sort_keys=True).encode())
        return {name: tuple(LockedFile(*f) for f in files) for name, files in data.items()}

    def _list_build(self, repo: str, commit: str) -> dict[str, list[list]]:
        variants: dict[str, list[list]] = {}
        try:
            entries = self.api.list_repo_tree(
                repo, path_in_repo="build", recursive=True, revision=commit, repo_type=REPO_TYPE
            )
            for entry in entries:
                parts = entry.path.split("/")
                if len(parts) < 3 or not isinstance(entry, RepoFile):
                    continue
                if entry.lfs is not None:
                    digest = f"sha256:{entry.lfs.sha256}"
                    size = entry.lfs.size
                else:
                    digest = f"git-sha1:{entry.blob_id}"
                    size = entry.size
                variants.setdefault(parts[1], []).append(["/".join(parts[2:]), size, digest])
        except EntryNotFoundError:
            return {}
        return {name: sorted(files) for name, files in variants.items()}

    def read_file(self, repo: str, commit: str, path: str) -> bytes:
        """The bytes of ``path`` at ``commit`` (one GET; cached on disk)."""
        cached = self._cache_path(repo, commit, "files", path)
        if cached.exists():
            return cached.read_bytes()

        def fetch() -> bytes:
            url = hf_hub_url(repo, path, repo_type=REPO_TYPE, revision=commit, endpoint=self.endpoint)
            response = get_session().get(url, headers=self.api._build_hf_headers(), follow_redirects=True)
            hf_raise_for_status(response)
            return response.content

        data = self._call(repo, fetch)
        write_bytes_atomic(cached, data)
        return data

    def download(
        self, repo: str, commit: str, path: str, dest: Path, size: int | None = None, tqdm_class: type | None = None
    ) -> None:
        """Stream ``path`` at ``commit`` into ``dest`` (one GET per attempt, no HEAD), resuming from the bytes
        ``dest`` already holds; huggingface_hub's ``http_get`` resumes dropped streams, ``_call`` retries."""
        from huggingface_hub.file_download import http_get

        url = hf_hub_url(repo, path, repo_type=REPO_TYPE, revision=commit, endpoint=self.endpoint)

        def fetch() -> None:
            dest.parent.mkdir(parents=True, exist_ok=True)
            with open(dest, "ab") as handle:
                resume = handle.tell()
                if size is not None and resume > size:
                    handle.truncate(0)
                    resume = 0
                http_get(
                    url,
                    handle,
                    resume_size=resume,
                    headers=self.api._build_hf_headers(),
                    expected_size=size,
                    displayed_filename=f"{repo.split('/')[-1]}/{path.rsplit('/', 1)[-1]}",
                    tqdm_class=tqdm_class,
                )

        self._call(f"{repo}@{commit[:12]} {path}", fetch)

    def _cache_path(self, repo: str, commit: str, *parts: str) -> Path:
        return self.cache_dir.joinpath(repo.replace("/", "--"), commit, *parts)

    # -- retries and error mapping --

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` with retries on 429/5xx/connection faults; map Hub errors to kernlock errors."""
        for attempt in range(self.retries + 1):
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
                status = err.response.status_code if err.response is not None else 0
                if status == 404:
                    raise NotFoundError(f"{what} was not found on {self.endpoint}.") from err
                if status in (401, 403):
                    raise HubError(
                        f"the Hub at {self.endpoint} refused access to {what} (HTTP {status}); check HF_TOKEN "
                        "(`hf auth login`) and that it may read this repo."
                    ) from err
                if status not in RETRY_STATUSES or attempt == self.retries:
                    raise HubError(
                        f"the Hub at {self.endpoint} answered HTTP {status} for {what} after "
                        f"{attempt + 1} attempt(s); try again later (HTTP 429 means rate limited: "
                        "set HF_TOKEN or wait)."
                    ) from err
                self._sleep(attempt, err.response)
            except OfflineModeIsEnabled as err:
                raise HubError(
                    f"{what}: the Hub is needed but HF_HUB_OFFLINE is set; run this once online, "
                    "or `kernlock sync` before going offline."
                ) from err
            except (httpx2.TransportError, OSError) as err:
                if not _network_fault(err):
                    raise  # a local filesystem error (disk full, permissions): the caller names the folder
                if attempt == self.retries:
                    raise HubError(
                        f"cannot reach the Hub at {self.endpoint} ({type(err).__name__}: {err}); check the "
                        "network or HF_ENDPOINT. Already-synced kernels still load: `kernlock sync --offline`."
                    ) from err
                self._sleep(attempt, None)
        raise AssertionError("unreachable")

    def _once(self, table: dict[str, Any], key: str, fetch: Callable[[], Any]) -> Any:
        """``table[key]``, fetched once per Hub object even when threads ask for it at the same time."""
        with self._lock:
            key_lock = self._key_locks.setdefault((id(table), key), threading.Lock())
        with key_lock:
            if key not in table:
                table[key] = fetch()
            return table[key]

    def _sleep(self, attempt: int, response: httpx2.Response | None) -> None:
        delay = self.backoff * (2**attempt)
        if response is not None and response.headers.get("Retry-After"):
            with contextlib.suppress(ValueError):
                delay = float(response.headers["Retry-After"])
        time.sleep(min(delay, 30.0))


def _network_fault(err: BaseException) -> bool:
    """A fault of the connection (worth a retry), not of the local disk: huggingface_hub reports a truncated
    download as a plain OSError without errno, while a full disk or a permission problem carries one."""
    if isinstance(err, (httpx2.TransportError, ConnectionError, TimeoutError)):
        return True
    return isinstance(err, OSError) and err.errno is None
