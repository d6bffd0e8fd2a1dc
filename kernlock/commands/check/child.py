"""The process `kernlock check --upgrade` starts for each side (:mod:`kernlock.commands.check.upgrade`): `check` of
some kernels of one lock file, activated with that lock, the report written as JSON to the path it is given.

``python -m kernlock.commands.check.child REQUEST``, where REQUEST is JSON: ``lockfile``, ``kernels`` (repos),
``environment``, ``dtypes``, ``speed``, ``seqlens``, ``out``. An error kernlock explains is written as
``{"error": message}``; anything else ends the process with its traceback (the parent shows its last lines).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kernlock.errors import KernlockError

__all__ = ["main"]


def main(argv: list[str]) -> int:
    from kernlock.commands.check.command import check_lock, entries_here
    from kernlock.lock import file as lockfile

    request = json.loads(argv[1])
    out = Path(request["out"])
    try:
        path = Path(request["lockfile"])
        entries = entries_here(lockfile.read(path), request["environment"], list(request["kernels"]))
        report = check_lock(
            path,
            entries,
            request["environment"],
            request.get("dtypes"),
            speed=bool(request.get("speed")),
            seqlens=request.get("seqlens"),
        )
    except KernlockError as err:
        out.write_text(json.dumps({"error": str(err)}), encoding="utf-8")
        return 1
    out.write_text(json.dumps(report.as_dict()), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
