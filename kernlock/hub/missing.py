"""What a repo the Hub does not have means: a typo (did you mean one of the publisher's repos?), or an endpoint
that is no Hub at all. Asked only on that error path, with one request: the publisher's listing
``GET /api/kernels?author=ORG`` (a Hub answers it with a JSON list; a web server that is no Hub does not)."""

from __future__ import annotations

import difflib
import json
from typing import TYPE_CHECKING

from huggingface_hub.errors import RepositoryNotFoundError

from kernlock.errors import NotFoundError
from kernlock.hub.answers import MAX_JSON
from kernlock.util import interrupt

if TYPE_CHECKING:
    from kernlock.hub.http import HubSession

__all__ = ["explain", "is_a_hub", "not_a_hub"]

_SHOWN = 5


def explain(session: HubSession, repo: str, err: NotFoundError) -> NotFoundError:
    """The error for ``repo`` answered as not found (``err``, raised by :meth:`HubSession.call`)."""
    org, name = repo.split("/", 1)
    listed = _publisher_repos(session, org)
    said_so = isinstance(err.__cause__, RepositoryNotFoundError)  # the answer carried the Hub's RepoNotFound code
    if listed is None and not said_so:
        return not_a_hub(session, repo)
    what = f"{repo} was not found on {session.endpoint} (or it is private and no token is set)"
    if not listed:
        return NotFoundError(what, fix="check the name, or set HF_TOKEN (`hf auth login`) for a private repo")
    names = {item.split("/", 1)[1].casefold(): item for item in listed}
    close = difflib.get_close_matches(name.casefold(), list(names), n=3, cutoff=0.6)
    if close:
        return NotFoundError(what, fix=f"did you mean {' or '.join(names[c] for c in close)}?")
    shown = ", ".join(sorted(listed)[:_SHOWN]) + (", ..." if len(listed) > _SHOWN else "")
    return NotFoundError(what, why=f"{org} publishes {len(listed)} kernel repos ({shown})", fix="check the name")


def is_a_hub(session: HubSession, org: str) -> bool:
    """Whether the endpoint answers a listing of ``org``'s model repos (``GET /api/models?author=ORG``, what
    ``HfApi.list_models`` asks; a JSON list, empty for an unknown author) as a Hub does: one request."""
    return _listing(session, "models", org, "1") is not None


def not_a_hub(session: HubSession, what: str) -> NotFoundError:
    """The error for an endpoint that answers 404 to everything, as a web server that is no Hub does."""
    return NotFoundError(
        f"{session.endpoint} does not answer like a Hugging Face Hub",
        why=f"it answered 404 without the Hub's error code for {what}, and to a listing of repositories "
        "(/api/models?author=...)",
        fix="check HF_ENDPOINT (the Hub's address, e.g. https://huggingface.co, or a mirror's root)",
    )


def _publisher_repos(session: HubSession, org: str) -> list[str] | None:
    """The ids of ``org``'s kernel repos (first page of the listing), or None when the endpoint gives no listing."""
    return _listing(session, "kernels", org, "1000")


def _listing(session: HubSession, kind: str, org: str, limit: str) -> list[str] | None:
    """The ids ``GET /api/{kind}?author=ORG`` lists (one request, no retry), or None when it is no JSON list."""
    url = f"{session.endpoint}/api/{kind}"
    try:
        body = session.get(url, MAX_JSON, f"the {kind} repos of {org}", {"author": org, "limit": limit})
        data = json.loads(body)
    except interrupt.Cancelled:
        raise
    except Exception:  # any failure of this extra question leaves the first error as it is
        return None
    if not isinstance(data, list):
        return None
    return [
        item["id"]
        for item in data
        if isinstance(item, dict) and isinstance(item.get("id"), str) and item["id"].startswith(f"{org}/")
    ]
