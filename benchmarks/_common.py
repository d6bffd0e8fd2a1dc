"""What the benchmark scripts share: a scratch folder and a free port chosen before huggingface_hub is imported."""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (HF_ENDPOINT must be known before huggingface_hub is imported)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def in_scratch_folder(prefix: str, run: Callable[[Path], int]) -> int:
    """Call ``run(folder)`` with a fresh temporary folder, removed afterwards; returns its exit status."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        return run(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
