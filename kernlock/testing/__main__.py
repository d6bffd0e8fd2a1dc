"""``python -m kernlock.testing ROOT [--host H] [--port P]``: serve ROOT as a Hub until killed.

The first line on stdout is the server's URL; SIGTERM and SIGINT stop it cleanly (exit status 0).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from kernlock.testing.server import HubServer

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kernlock.testing", description="Serve a folder of git repositories as a Hub."
    )
    parser.add_argument("root", type=Path, help="folder holding kernels/{org}/{name} and models/{org}/{name}")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind (default 0: a free port)")
    parser.add_argument("--page-size", type=int, default=1000, help="entries per page of listings")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the server until SIGTERM/SIGINT."""
    args = _parser().parse_args(argv)
    if not args.root.is_dir():
        _parser().error(f"not a folder: {args.root}")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with HubServer(args.root, host=args.host, port=args.port, page_size=args.page_size) as server:
        print(server.url, flush=True)
        print(f"serving {args.root.resolve()} at {server.url}", file=sys.stderr, flush=True)
        exports = " ".join(f"{k}={v}" for k, v in server.env().items() if k != "HF_HUB_DISABLE_XET")
        print(f"export {exports}", file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
