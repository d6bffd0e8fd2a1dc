"""`kernlock.activate()` under ``if __name__ == "__main__":`` reaches every child multiprocessing starts fresh
(issue 24): a spawn, forkserver or ``torch.multiprocessing.spawn`` child re-imports only the main module's top
level, so kernlock carries the activation in the child's preparation data (kernlock.runtime.activation)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from processes import CHILD_PRELUDE
from projects import TINY_ACTIVATION, LockedProject, tiny_locked_project

pytestmark = pytest.mark.subprocess


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> LockedProject:
    return tiny_locked_project(tmp_path_factory.mktemp("spawn"))


UNLOCKED = "kernels-community/rotary"

SCRIPT = """
import multiprocessing
import kernlock


def child(queue_or_rank, queue=None):
    import kernels
    queue = queue if queue is not None else queue_or_rank
    identity = kernels.get_kernel("{locked}", version=1).KERNEL_IDENTITY
    try:
        kernels.get_kernel("{unlocked}", version=1)
        refused = None
    except Exception as err:
        refused = str(err)
    queue.put(json.dumps({{"identity": identity, "refused": refused, "connects": CONNECTS}}))


if __name__ == "__main__":
    kernlock.activate()
    method = sys.argv[1]
    if method == "torch":
        import torch.multiprocessing as tmp
        queue = tmp.get_context("spawn").SimpleQueue()
        tmp.spawn(child, args=(queue,), nprocs=2)
        results = [queue.get() for _ in range(2)]
    else:
        ctx = multiprocessing.get_context(method)
        queue = ctx.SimpleQueue()
        procs = [ctx.Process(target=child, args=(queue,)) for _ in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
        results = [queue.get() for _ in range(2)]
    print("REPORT " + json.dumps({{"children": [json.loads(r) for r in results]}}), flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("method", ["spawn", "forkserver", "torch"])
def test_activate_under_main_guard_reaches_every_spawned_child(tiny: LockedProject, tmp_path: Path, method: str):
    script = tmp_path / "train.py"
    script.write_text(CHILD_PRELUDE + textwrap.dedent(SCRIPT.format(locked=TINY_ACTIVATION, unlocked=UNLOCKED)))
    child = tiny.run_argv([sys.executable, str(script), method])
    assert child.returncode == 0, child.stderr[-3000:]
    children = child.report["children"]
    assert len(children) == 2
    for result in children:
        assert result["identity"] == tiny.identity(TINY_ACTIVATION)
        assert result["connects"] == []
        assert result["refused"] is not None and f"kernlock add {UNLOCKED}" in result["refused"], result
