"""Stream one file of a Hub repo into a local file: resumed with ``Range``, never more than the locked size.

The bytes are not trusted here (the caller compares their hash with the lock); what is checked is the transfer: the
size the Hub announces and serves, and that a resumed answer continues at the right byte. The bytes are hashed as
they are written (``Transfer.hasher``), so a downloaded file is never read back to be verified.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from huggingface_hub import get_session
from huggingface_hub.utils import hf_raise_for_status  # type: ignore[attr-defined]  # public, lazily exported

from kernlock.errors import IntegrityError
from kernlock.hub.http import HubSession, Retry, content_length, timeout
from kernlock.util import interrupt
from kernlock.util.hashing import StreamHash
from kernlock.util.sharing import make_folder
from kernlock.util.wording import RETRY_SYNC

if TYPE_CHECKING:
    from httpx2 import Response

__all__ = ["Transfer", "fetch_into"]

_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


@dataclass(frozen=True, slots=True, kw_only=True)
class Transfer:
    """One file's download: where it comes from, where it goes, how big it must be, how it is shown."""

    session: HubSession
    url: str
    what: str  # "repo@commit path", for messages
    dest: Path
    size: int | None  # the locked size, when known
    bar: type | None  # a tqdm class
    label: str  # the progress bar's name
    hasher: StreamHash | None = None  # fed every byte of ``dest``, from the first (None: not hashed here)

    def size_error(self, served: str) -> IntegrityError:
        """The error for a Hub that serves another size than the lock records."""
        return IntegrityError(
            f"{self.session.endpoint} served {self.what} with {served}, but kernels.lock records {self.size} bytes "
            f"({self.url}); nothing was installed",
            fix=RETRY_SYNC,
        )


def fetch_into(transfer: Transfer) -> None:
    """One attempt of a download into ``transfer.dest``, resuming from the bytes it already holds; a fault worth a
    retry raises :class:`kernlock.hub.http.Retry` (the caller's budget decides), a wrong size IntegrityError."""
    dest, size = transfer.dest, transfer.size
    make_folder(dest.parent)
    with open(dest, "ab") as handle:
        have = handle.tell()
        if size is not None and have > size:
            handle.truncate(0)
            have = 0
        if transfer.hasher is not None:
            transfer.hasher.restart(dest, have)  # what an earlier attempt (or sync) left, once
        if size is not None and have == size:
            return  # complete: the caller verifies the hash
        headers = {**transfer.session.headers(), "Accept-Encoding": "identity"}
        if have:
            headers["Range"] = f"bytes={have}-"
        with get_session().stream("GET", transfer.url, headers=headers, timeout=timeout()) as response:
            if response.status_code == 416 and have:
                handle.truncate(0)  # the Hub's file is shorter than what we hold: start over
                raise Retry(f"the Hub refused to resume {transfer.what} at byte {have}")
            hf_raise_for_status(response)
            if have and response.status_code != 206:
                handle.truncate(0)  # the Hub ignored the Range header and sends the whole file
                have = 0
                if transfer.hasher is not None:
                    transfer.hasher.restart(dest, 0)
            elif have:
                _check_resume(transfer, response, have, handle)
            expected = None if size is None else size - have
            declared = content_length(response)
            if expected is not None and declared is not None and declared != expected:
                raise transfer.size_error(f"{have + declared} bytes")
            _stream(transfer, response, handle, have, expected)


def _check_resume(transfer: Transfer, response: Response, have: int, handle: BinaryIO) -> None:
    """A 206 answer must continue at byte ``have`` of a file of ``size`` bytes."""
    match = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
    if match is None or int(match.group(1)) != have:
        handle.truncate(0)
        raise Retry(f"the Hub resumed {transfer.what} at another byte than {have}")
    if transfer.size is not None and match.group(3) != "*" and int(match.group(3)) != transfer.size:
        raise transfer.size_error(f"{match.group(3)} bytes")


def _stream(transfer: Transfer, response: Response, handle: BinaryIO, have: int, expected: int | None) -> None:
    """Write the body to ``handle``, never more than ``expected`` bytes; checks for cancellation per chunk."""
    size = transfer.size
    bar = (
        transfer.bar(total=size, initial=have, unit="B", unit_scale=True, desc=transfer.label) if transfer.bar else None
    )
    written = 0
    try:
        for chunk in response.iter_bytes():
            interrupt.check()
            written += len(chunk)
            if expected is not None and written > expected:
                raise transfer.size_error(f"more than {size} bytes")
            handle.write(chunk)
            if transfer.hasher is not None:
                transfer.hasher.update(chunk)  # hashlib releases the GIL: other downloads go on meanwhile
            if bar is not None:
                bar.update(len(chunk))
    finally:
        if bar is not None:
            bar.close()
    if expected is not None and written < expected:
        raise Retry(f"the body of {transfer.what} ended after {have + written} of {size} bytes")
