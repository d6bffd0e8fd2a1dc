"""``python -m kernlock.testing catalog|serve|move``: the sample Hub from the shell (docs/testing-hub.md).

- ``catalog ROOT``: build the sample catalog (docs/fixtures.md) under ROOT and list its repositories (a sample Hub
  this command built there before is kept as it is: exit 0); ``--transformers``: the repos transformers' default
  kernel mapping loads for a Llama instead (``build_transformers_catalog``);
- ``serve ROOT [--host H] [--port P] [--latency S]``: serve ROOT as a Hub until SIGTERM/SIGINT (exit status 0). The
  first line on stdout is the server's URL, the second the ``export HF_ENDPOINT=...`` line to paste;
- ``move ROOT REPO BRANCH [VARIANT...]``: re-upload builds of BRANCH (all of them by default), as an upstream
  re-upload does, and print the old and new head.

``python -m kernlock.testing ROOT`` (no command) still serves ROOT.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

__all__ = ["main"]

_COMMANDS = ("catalog", "serve", "move")
#: Written last by ``catalog``: the folder holds the whole sample Hub (a second ``catalog`` keeps it).
_MARKER = ".kernlock-sample-hub"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kernlock.testing", description="The sample Hub: build it, serve it, move a branch."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{catalog,serve,move}")
    catalog = commands.add_parser("catalog", help="build the sample catalog of kernel repositories under ROOT")
    catalog.add_argument(
        "root", type=Path, help="folder to build it in (created; empty, missing, or a sample Hub built before: kept)"
    )
    catalog.add_argument(
        "--transformers", action="store_true", help="the kernels transformers' default mapping loads, instead"
    )
    serve = commands.add_parser("serve", help="serve ROOT as a Hub until interrupted")
    serve.add_argument("root", type=Path, help="folder holding kernels/{org}/{name} and models/{org}/{name}")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=0, help="port to bind (default 0: a free port)")
    serve.add_argument("--page-size", type=int, default=1000, help="entries per page of listings")
    serve.add_argument("--latency", type=float, default=0.0, metavar="SECONDS", help="delay before every answer")
    move = commands.add_parser("move", help="re-upload builds of a branch (new commit, new build ids)")
    move.add_argument("root", type=Path, help="the Hub's folder")
    move.add_argument("repo", help="org/name, e.g. kernels-community/flash-attn2")
    move.add_argument("branch", help="the branch to move, e.g. v4")
    move.add_argument("variants", nargs="*", help="builds to re-upload (default: every build of the branch)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in _COMMANDS and not argv[0].startswith("-"):
        argv.insert(0, "serve")  # the older form: python -m kernlock.testing ROOT
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "catalog":
        return _catalog(parser, args.root, args.transformers)
    if not args.root.is_dir():
        parser.error(f"not a folder: {args.root}")
    if args.command == "move":
        return _move(parser, args.root, args.repo, args.branch, args.variants)
    return _serve(args.root, args.host, args.port, args.page_size, args.latency)


def _catalog(parser: argparse.ArgumentParser, root: Path, transformers: bool = False) -> int:
    from kernlock.testing.fixtures import build_catalog, build_transformers_catalog, open_kernel_repo

    marker = root / _MARKER
    if marker.is_file():  # built here before (the Quick start pasted again): kept as it is, moved branches and all
        print(f"{root.resolve()} already holds the sample Hub (built by this command; delete the folder to start over)")
        print(f"serve it: python -m kernlock.testing serve {root} --port 8765")
        return 0
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        parser.error(f"{root} exists and is not an empty folder; pick a new one")
    repo_ids = build_transformers_catalog(root) if transformers else build_catalog(root).repo_ids
    marker.write_text("the sample Hub of `python -m kernlock.testing catalog` (docs/testing-hub.md)\n")
    print(f"built the sample Hub in {root.resolve()}:")
    for repo_id in repo_ids:
        branches = sorted(b for b in open_kernel_repo(root, repo_id).branches() if b != "main")
        print(f"  {repo_id:<38} {' '.join(branches)}")
    print(f"serve it: python -m kernlock.testing serve {root} --port 8765")
    return 0


def _move(parser: argparse.ArgumentParser, root: Path, repo_id: str, branch: str, variants: list[str]) -> int:
    from kernlock.testing.fixtures import open_kernel_repo

    try:
        repo = open_kernel_repo(root, repo_id)
        old = repo.branches()[branch]
    except (KeyError, FileNotFoundError, ValueError):
        parser.error(f"{root} has no kernel repository {repo_id} with a branch {branch}")
    try:
        new = repo.move_branch(branch, variants or None)
    except (KeyError, ValueError) as err:
        parser.error(f"cannot move {repo_id}@{branch}: {err}")
    moved = len(variants) if variants else len(repo.variants(new))
    print(f"moved {repo_id}@{branch}: {old} -> {new}")
    print(f"{moved} of its {len(repo.variants(new))} builds uploaded anew (new build ids)")
    return 0


def _serve(root: Path, host: str, port: int, page_size: int, latency: float) -> int:
    from kernlock.testing.server import HubServer

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with HubServer(root, host=host, port=port, page_size=page_size) as server:
        if latency > 0:
            server.faults.latency(latency)
        exports = " ".join(f"{key}={value}" for key, value in server.env().items())
        print(server.url, flush=True)
        print(f"export {exports}", flush=True)
        while not stop.wait(0.5):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
