"""Files of Hub **model** repositories: what `kernlock add --from org/model` reads (the kernels.lock a model carries,
docs/provenance.md). Like every answer, a bounded GET through huggingface_hub's session, with the client's retries
and error messages (:class:`kernlock.hub.http.HubSession`); nothing is written to a cache."""

from __future__ import annotations

from typing import TYPE_CHECKING

from huggingface_hub import hf_hub_url

from kernlock.hub.answers import checked_path, checked_repo
from kernlock.util import names

if TYPE_CHECKING:
    from kernlock.hub.client import Hub

__all__ = ["read_model_file"]


def read_model_file(hub: Hub, repo: str, path: str, limit: int, revision: str | None = None) -> bytes:
    """The bytes of ``path`` in the model repo ``repo`` at ``revision`` (default: its main branch), at most ``limit``
    (the caller's rule for that file: a kernels.lock's is :data:`kernlock.lock.file.FOREIGN_MAX`); NotFoundError
    when the repo, the revision or the file is not there, HubError when the Hub cannot answer or answers more."""
    repo, path = checked_repo(repo), checked_path(path)
    if revision is not None:
        names.check_ref(revision)
    url = hf_hub_url(repo, path, repo_type="model", revision=revision, endpoint=hub.endpoint)
    what = f"{path} of the model repo {repo}" + (f"@{revision}" if revision else "")
    return hub.session.call(what, lambda: hub.session.get(url, limit, what))
