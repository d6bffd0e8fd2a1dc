"""A Hugging Face Hub-compatible HTTP server over a folder of real git repositories.

The real, unmodified ``huggingface_hub`` and ``kernels`` clients work against it through
``HF_ENDPOINT=http://127.0.0.1:PORT``. Only committed data is served; git is read through the git CLI
on every request (commit-keyed answers are cached). See ``docs/testing-hub.md``.

**Modules, by job.** :mod:`~kernlock.testing.server.git` (the repositories read through git, cached by commit and
blob), :mod:`~kernlock.testing.server.log` (the request log), :mod:`~kernlock.testing.server.faults` (fault
injection), :mod:`~kernlock.testing.server.routes` (which answer a path gets), :mod:`~kernlock.testing.server.answers`
(the API's JSON answers), :mod:`~kernlock.testing.server.files` (file downloads: git blobs and LFS objects),
:mod:`~kernlock.testing.server.app` (the WSGI app: faults applied, requests logged),
:mod:`~kernlock.testing.server.httpd` (the HTTP/1.1 layer) and :mod:`~kernlock.testing.server.hubserver` (the
server in a background thread). The uploads ``push_to_hub`` makes are :mod:`kernlock.testing.uploads`. This
package names their API.
"""

from kernlock.testing.server.app import HubApp, make_app
from kernlock.testing.server.faults import ConnectionDropped, Faults, Transform
from kernlock.testing.server.git import GitError
from kernlock.testing.server.hubserver import HubServer
from kernlock.testing.server.log import Request, RequestLog

__all__ = [
    "ConnectionDropped",
    "Faults",
    "GitError",
    "HubApp",
    "HubServer",
    "Request",
    "RequestLog",
    "Transform",
    "make_app",
]
