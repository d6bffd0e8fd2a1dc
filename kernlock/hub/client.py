"""kernlock's Hub client: the questions kernlock asks a Hub (refs, history, build trees, files), each answer
validated (:mod:`kernlock.hub.answers`) where it arrives, because a Hub, a mirror or a proxy may be broken or hostile.

An invalid answer is a HubError that names the endpoint and the repo. Answers addressed by a commit (the build
tree, a file's bytes) are immutable and cached on disk at paths built with :func:`kernlock.util.names.under` from
validated parts; what is read back from that cache is validated again (a poisoned entry is fetched anew). Refs are
always asked fresh. Every request goes through :class:`kernlock.hub.http.HubSession` (retries, waits and the
command's budget: its docstring); a file's bytes are streamed by :mod:`kernlock.hub.download`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

from huggingface_hub import hf_hub_url

from kernlock.errors import CacheError, IntegrityError, NotFoundError, UnknownRevisionError
from kernlock.hub.answers import (
    MAX_LISTING,
    MAX_READ,
    Listing,
    Refs,
    check_file_set,
    checked_commit,
    checked_path,
    checked_repo,
    file_from_cache,
    is_variant,
    show,
    size_and_hash,
    tree,
    tree_from_cache,
)
from kernlock.hub.download import Transfer, fetch_into
from kernlock.hub.http import DEFAULT_RETRIES, HubSession
from kernlock.lock.model import LockedFile
from kernlock.util import names
from kernlock.util.atomic import unwritable, write_bytes_atomic
from kernlock.util.hashing import StreamHash
from kernlock.util.hfenv import cache_root, private

__all__ = ["Hub", "Refs"]

REPO_TYPE = "kernel"
THREADED_HASH = 8 << 20  # a file at least this big is hashed on a thread of its own while it downloads
_HEX = re.compile(r"[0-9a-f]{4,40}")


class Hub:
    """A Hub endpoint as kernlock needs it; thread-safe, so kernels are resolved in parallel.

    ``retries`` retries per request and ``backoff`` (seconds, doubled per retry) shape one request's attempts;
    the budget of the whole object is fixed (:mod:`kernlock.hub.http`).
    """

    def __init__(
        self,
        endpoint: str | None = None,
        token: str | None = None,
        cache_dir: Path | None = None,
        retries: int = DEFAULT_RETRIES,
        backoff: float = 0.5,
    ) -> None:
        self.session = HubSession(endpoint, token, retries, backoff)
        self.endpoint = self.session.endpoint
        self.cache_dir = cache_dir or cache_root() / "hub"
        self._trust: dict[str, tuple[bool, Any]] = {}
        self._refs: dict[str, tuple[bool, Any]] = {}
        self._blobs: dict[str, tuple[bool, Any]] = {}

    # -- mutable answers (never cached across runs) --

    def refs(self, repo: str) -> Refs:
        """Branches and tags of ``repo``: one request, remembered (answer or failure) for the life of this Hub
        object, so that one command sees one consistent state of the repo."""
        repo = checked_repo(repo)

        def fetch() -> Refs:
            url = f"{self.endpoint}/api/kernels/{repo}/refs"
            label = f"the branches and tags of {repo}"
            try:
                data = self.session.call(repo, lambda: self.session.get_json(url, label), label)
            except UnknownRevisionError:
                raise
            except NotFoundError as err:  # a typo, or an endpoint that is no Hub: one more question says which
                from kernlock.hub import missing as hubmissing

                raise hubmissing.explain(self.session, repo, err) from err
            if not isinstance(data, dict) or not isinstance(data.get("branches"), list):
                raise self.session.invalid(f"a refs answer without a list of branches for {repo}", url)
            found: dict[str, dict[str, str]] = {"branches": {}, "tags": {}}
            for kind, table in found.items():
                items = data.get(kind) or []
                if not isinstance(items, list) or len(items) > MAX_LISTING:
                    raise self.session.invalid(f"a refs answer whose {kind} are not a list for {repo}", url)
                for item in items:
                    if not isinstance(item, dict):
                        raise self.session.invalid(
                            f"a refs answer with a {kind[:-1]} that is not an object for {repo}", url
                        )
                    try:
                        name = names.check_ref(item.get("name"))
                    except ValueError:
                        continue  # a name kernlock cannot use as a path (nor the loader as a version): ignored
                    table[name] = self.session.commit_from(item.get("targetCommit"), repo, url)
            return Refs(branches=found["branches"], tags=found["tags"])

        return self.session.once(self._refs, repo, fetch)

    def is_trusted(self, org: str) -> bool:
        """Whether the Hub marks ``org`` as a trusted kernel publisher (asked once per org and Hub object)."""
        org = checked_repo(f"{org}/kernel").split("/")[0]

        def fetch() -> bool:
            url = f"{self.endpoint}/api/organizations/{org}/overview"
            try:
                label = f"the publisher overview of {org}"
                data = self.session.call(org, lambda: self.session.get_json(url, label), label)
            except NotFoundError as err:  # an unknown org is untrusted; an endpoint that is no Hub is an error
                from kernlock.hub import missing as hubmissing

                if not hubmissing.is_a_hub(self.session, org):
                    raise hubmissing.not_a_hub(self.session, f"the publisher {org}") from err
                return False
            if not isinstance(data, dict):
                raise self.session.invalid(f"an organization overview that is not an object for {org}", url)
            return data.get("trustedKernelPublisher") is True

        return self.session.once(self._trust, org, fetch)

    def commits(self, repo: str, branch: str) -> list[str]:
        """Commit ids reachable from ``branch``, newest first (every id checked)."""
        return [commit for commit, _ in self.history(repo, branch)]

    def history(self, repo: str, rev: str, until: str | None = None) -> list[tuple[str, str]]:
        """(commit id, date) reachable from ``rev``, newest first; with ``until``, no page after the one that
        holds that commit is fetched. Dates are the Hub's ISO 8601 strings ("" when it gave none)."""
        repo = checked_repo(repo)
        url = f"{self.endpoint}/api/kernels/{repo}/commits/{_quote(rev)}"
        found = []
        for item in self.session.paginate(repo, url, {}, f"the commit history of {repo}@{rev}"):
            if not isinstance(item, dict):
                raise self.session.invalid(f"a commit listing with an entry that is not an object for {repo}", url)
            date = item.get("date")
            found.append(
                (self.session.commit_from(item.get("id"), repo, url), date[:40] if isinstance(date, str) else "")
            )
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
        if _HEX.fullmatch(rev):
            if len(rev) == 40:
                return rev, rev
            matches = {c for branch in refs.branches for c in self.commits(repo, branch) if c.startswith(rev)}
            matches |= {c for c in refs.tags.values() if c.startswith(rev)}
            if len(matches) == 1:
                commit = matches.pop()
                return commit, commit
            if len(matches) > 1:
                raise NotFoundError(
                    f"revision '{rev}' of {repo} is ambiguous: it matches {', '.join(sorted(c[:12] for c in matches))}",
                    fix="use more characters of the commit sha",
                )
        versions = ", ".join(f"v{n}" for n in sorted(refs.versions())) or "none"
        others = sorted(set(refs.branches) - {f"v{n}" for n in refs.versions()}) + sorted(refs.tags)
        raise UnknownRevisionError(
            f"{repo} has no revision '{rev}'; version branches: {versions}"
            + (f"; other branches and tags: {', '.join(others)}" if others else ""),
            fix=f"Pick one, e.g. `kernlock add {repo}@v{max(refs.versions(), default=1)}`",
        )

    # -- immutable answers (cached on disk by commit) --

    def build_tree(self, repo: str, commit: str) -> dict[str, tuple[LockedFile, ...]]:
        """Variant name -> its files at ``commit``, from one recursive listing of ``build/`` (cached)."""
        repo, commit = checked_repo(repo), checked_commit(commit)
        path = self._cache_path(repo, commit, "build-tree.json")
        cached = tree_from_cache(path) if path is not None else None
        if cached is not None:
            return cached
        url = f"{self.endpoint}/api/kernels/{repo}/tree/{commit}/build"
        data = self._list_build(repo, commit, url)
        try:
            variants = tree(data)
        except (ValueError, TypeError) as err:  # LockedFile's own checks, stricter than the ones above
            raise self.session.invalid(
                f"a build tree kernlock cannot lock for {repo} at {commit[:12]} ({err})", url
            ) from None
        if path is not None:
            self._write_cache(path, json.dumps(data, sort_keys=True).encode())
        return variants

    def _list_build(self, repo: str, commit: str, url: str) -> Listing:
        """The validated files of every variant folder under ``build/``: name -> sorted [path, size, hash]."""
        variants: dict[str, dict[str, list[list[Any]]]] = {}
        label = f"the build tree of {repo}@{commit[:12]}"
        for entry in self.session.paginate(repo, url, {"recursive": "true", "expand": "false"}, label, missing_ok=True):
            if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
                raise self.session.invalid(f"a tree entry without a path for {repo}", url)
            parts = entry["path"].split("/")
            if parts[0] != "build" or len(parts) < 2:
                raise self.session.invalid(f"a tree entry outside build/ ({show(entry['path'])}) for {repo}", url)
            if entry.get("type") != "file" or len(parts) < 3 or not is_variant(parts[1]):
                continue  # folders, files directly in build/, folders that are no variant (the loader skips them)
            name, rel = parts[1], "/".join(parts[2:])
            try:
                names.check_path(rel)
                size, digest = size_and_hash(entry)
            except ValueError as err:
                raise self.session.invalid(f"build/{name}/{show(rel, 60)} of {repo}: {err}", url) from None
            variants.setdefault(name, {}).setdefault(rel.casefold(), []).append([rel, size, digest])
        result = {}
        for name, found in variants.items():
            files = sorted(f for same in found.values() for f in same)
            try:
                check_file_set(files)
            except ValueError as err:
                raise self.session.invalid(f"a build/{name}/ listing of {repo} that {err}", url) from None
            result[name] = files
        return result

    def read_file(self, repo: str, commit: str, path: str) -> bytes:
        """The bytes of ``path`` at ``commit`` (one GET, at most 1 MiB; cached on disk)."""
        repo, commit, path = checked_repo(repo), checked_commit(commit), checked_path(path)
        cached = self._cache_path(repo, commit, "files", *path.split("/"))
        data = file_from_cache(cached) if cached is not None else None
        if data is not None:
            return data
        url = hf_hub_url(repo, path, repo_type=REPO_TYPE, revision=commit, endpoint=self.endpoint)
        data = self.session.call(
            f"{repo}@{commit[:12]} {path}", lambda: self.session.get(url, MAX_READ, f"{path} of {repo}")
        )
        if cached is not None:
            self._write_cache(cached, data)
        return data

    def read_blob(self, repo: str, commit: str, path: str, blob: str) -> bytes:
        """:meth:`read_file` for a file the build tree names by its blob id (its ``hash``): fetched once per
        distinct blob of ``repo`` and Hub object, so the variants and commits of one lock that share a file (the
        same ``metadata.json``) cost one request."""
        return self.session.once(self._blobs, f"{repo}\0{blob}", lambda: self.read_file(repo, commit, path))

    def download(
        self,
        repo: str,
        commit: str,
        path: str,
        dest: Path,
        size: int | None = None,
        tqdm_class: type | None = None,
        algorithm: str | None = None,
    ) -> str | None:
        """Stream ``path`` at ``commit`` into ``dest`` (one GET per attempt, no HEAD), resuming from the bytes
        ``dest`` already holds with ``Range: bytes=N-``; returns the ``algorithm:hex`` hash of all of ``dest``,
        computed as it was written (None without ``algorithm``, or a git blob id of unknown ``size``).

        A Hub that serves another size than ``size`` (the locked size) is an IntegrityError at once, and ``dest``
        is removed; a dropped or short transfer is retried (and resumed) within the request's budget.
        """
        repo, commit, path = checked_repo(repo), checked_commit(commit), checked_path(path)
        if size is not None:
            size = names.check_size(size)
        url = hf_hub_url(repo, path, repo_type=REPO_TYPE, revision=commit, endpoint=self.endpoint)
        what = f"{repo}@{commit[:12]} {path}"
        label = f"{repo.split('/')[-1]}/{path.rsplit('/', 1)[-1]}"
        hashing = None
        if algorithm is not None and (size is not None or algorithm == "sha256"):
            hashing = StreamHash(algorithm, size or 0, threaded=size is None or size >= THREADED_HASH)
        try:
            transfer = Transfer(
                session=self.session,
                url=url,
                what=what,
                dest=dest,
                size=size,
                bar=tqdm_class,
                label=label,
                hasher=hashing,
            )
            self.session.call(what, lambda: fetch_into(transfer))
        except IntegrityError:
            dest.unlink(missing_ok=True)  # a file of the wrong size never stays, even as a partial download
            raise
        finally:
            if hashing is not None:
                hashing.close()  # its thread hashed what it was given (value() below reads it)
        return None if hashing is None else hashing.value()

    # -- the disk cache of immutable answers --

    def _cache_path(self, repo: str, commit: str, *parts: str) -> Path | None:
        """``{cache}/{org}--{name}/{commit}/{parts}`` from validated parts, proven to stay under the cache; None
        when it would not (a symlink planted in the cache) or when others could write the cache (they could forge
        an answer there, see :func:`kernlock.util.hfenv.private`): the answer is then fetched and not cached."""
        if not private(self.cache_dir, create=True):  # remembered while the folder keeps its owner and mode
            return None
        try:
            return names.under(self.cache_dir, repo.replace("/", "--"), commit, *parts)
        except ValueError:
            return None

    @staticmethod
    def _write_cache(path: Path, data: bytes) -> None:
        """Cache ``data`` at ``path`` (never through a symlink). A cache that cannot be written (read-only, full)
        only loses time: the answer is asked again next time; any other OSError is a CacheError."""
        try:
            if path.is_symlink():
                path.unlink()
            write_bytes_atomic(path, data, private=True)
        except OSError as err:
            if not unwritable(err):
                raise CacheError(
                    f"cannot write kernlock's cache of Hub answers at {path}",
                    why=f"{err.strerror or err}",
                    fix="point KERNLOCK_CACHE at a writable folder and try again",
                ) from err


def _quote(value: str) -> str:
    return quote(value, safe="")
