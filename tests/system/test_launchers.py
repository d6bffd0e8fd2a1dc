"""`kernlock run -- <launcher>`: every rank of torchrun, `python -m torch.distributed.run`, `accelerate launch` and
the `deepspeed` launcher trains on the locked build with the Hub stopped (issue 24).

The real launchers from the package index (pinned in the test extra), on CPU with gloo: each rank wraps a tiny GQA
Llama whose attention is the locked Hub kernel in DistributedDataParallel, takes two steps, and reports what it
loaded (the build's identity and commit), every socket it connected, and a checksum of its weights, which DDP keeps
equal on every rank. The Hub is stopped, so any request would fail; plain torchrun with the Hub running and a
moved branch loads the moved build, and `kernlock run` in the same environment still the locked one.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from urllib.parse import urlparse

import pytest
from processes import CHILD_PRELUDE
from projects import TINY_ACTIVATION, TINY_ATTENTION, LockedProject, tiny_locked_project

from kernlock.testing import HubServer, move_branch

BIN = Path(sys.executable).parent

TRAIN = CHILD_PRELUDE + textwrap.dedent(
    f"""
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from transformers import AutoModelForCausalLM, LlamaConfig
    import kernels
    import torch._dynamo  # before the process group exists (the end of the script says why)

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )
    model = AutoModelForCausalLM.from_config(config, attn_implementation="{TINY_ATTENTION}")
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    torch.manual_seed(1 + dist.get_rank())  # each rank its own batch: DDP averages the gradients
    for _step in range(2):
        ids = torch.randint(0, 64, (2, 8))
        loss = ddp(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    activation = kernels.get_kernel("{TINY_ACTIVATION}", version=1)
    found = {{}}
    for k in kernels.get_loaded_kernels():
        identity = getattr(k.module, "KERNEL_IDENTITY", None)
        if identity is not None:
            commit = k.repo_info.revision if k.repo_info is not None else None
            found[identity["repo"]] = {{"commit": commit, "identity": identity, "calls": dict(k.module.CALL_COUNTS)}}
    checksum = float(sum(p.detach().double().sum() for p in model.parameters()))
    from kernlock.distributed import check_ranks
    agreed = check_ranks()  # the optional collective check: every rank the same commits
    report = {{
        "agreed": agreed,
        "rank": dist.get_rank(), "world": dist.get_world_size(), "loaded": found, "connects": CONNECTS,
        "attn": model.config._attn_implementation, "checksum": checksum,
    }}
    dist.barrier()
    # The process group goes before the interpreter does. A rank used to end in SIGABRT now and then on a loaded
    # machine, after its report: destroy_process_group() left gloo's threads (pt_gloo_runloop, gloo_tcp_loop)
    # running, as DDP still held the group (and torch._dynamo would too, were it first imported while a group
    # exists: DDP imports it; here transformers did before, the import at the top makes sure). The threads ran on
    # while the interpreter finalized, where a worker that releases tensors holding Python objects takes the GIL,
    # and a thread taking the GIL then is ended by pthread_exit, whose unwinding through a noexcept destructor calls
    # std::terminate (pytorch/pytorch#179291, #190489); a loaded machine lets a worker lag that far behind. With DDP
    # dropped, destroy_process_group() drops the group's last reference and joins those threads.
    del ddp
    dist.destroy_process_group()
    threads = [open(f"/proc/self/task/{{task}}/comm").read().strip() for task in os.listdir("/proc/self/task")]
    report["gloo_threads"] = sorted(name for name in threads if "gloo" in name)
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), f"rank{{report['rank']}}.json"), "w") as out:
        json.dump(report, out)
    # Still a backstop: under torchrun on a loaded machine gloo_tcp_loop was once seen alive after
    # destroy_process_group() (report["gloo_threads"]), so the rank ends without the interpreter's teardown.
    print(end="", flush=True)
    os._exit(0)
    """
)

ACCELERATE_CPU = ["--mixed_precision=no", "--dynamo_backend=no"]  # no GPU here: gloo, as DDP on CPU uses
LAUNCHERS = {
    "torchrun": (4, [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "4"]),
    "torch.distributed.run": (2, [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]),
    "accelerate": (
        2,
        [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes=2", "--num_machines=1", *ACCELERATE_CPU],
    ),
    "deepspeed": (2, [str(BIN / "deepspeed"), "--num_gpus", "2"]),
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> LockedProject:
    return tiny_locked_project(tmp_path_factory.mktemp("launchers"))


def _ranks(tiny: LockedProject, argv: list[str], script: Path, env: dict[str, str] | None = None) -> list[dict]:
    """Each rank's report (it writes ``rank<N>.json`` beside the script)."""
    for old in script.parent.glob("rank*.json"):
        old.unlink()
    child = tiny.run_argv([*argv, str(script)], env={"OMP_NUM_THREADS": "1", **(env or {})})
    assert child.returncode == 0, child.stdout[-3000:] + child.stderr[-5000:]
    reports = [json.loads(path.read_text()) for path in script.parent.glob("rank*.json")]
    return sorted(reports, key=lambda r: r["rank"])


def _hub_connects(report: dict, endpoint: str) -> list[str]:
    address = urlparse(endpoint)
    return [c for c in report["connects"] if str(address.port) in c]


@pytest.mark.binds
@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_every_rank_trains_on_the_locked_build_with_the_hub_stopped(tiny: LockedProject, tmp_path: Path, launcher):
    ranks, argv = LAUNCHERS[launcher]
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    reports = _ranks(tiny, [sys.executable, "-m", "kernlock", "run", "--", *argv], script)
    assert [r["rank"] for r in reports] == list(range(ranks)) and {r["world"] for r in reports} == {ranks}
    for report in reports:
        assert report["attn"] == TINY_ATTENTION
        assert report["loaded"][TINY_ATTENTION]["identity"] == tiny.identity(TINY_ATTENTION)
        assert report["loaded"][TINY_ATTENTION]["calls"], "the locked attention kernel ran in the forward pass"
        assert report["loaded"][TINY_ACTIVATION]["identity"] == tiny.identity(TINY_ACTIVATION)
        assert _hub_connects(report, tiny.env["HF_ENDPOINT"]) == [], "zero Hub requests"
        assert report["agreed"][TINY_ACTIVATION] == tiny.entry(TINY_ACTIVATION).commit
    assert len({round(r["checksum"], 9) for r in reports}) == 1, "DDP kept every rank's weights equal"


@pytest.mark.binds
@pytest.mark.slow
@pytest.mark.subprocess
def test_plain_torchrun_loads_the_moved_branch_and_kernlock_run_the_locked_build(tiny: LockedProject, tmp_path: Path):
    """Upstream re-uploads the activation kernel's v1 while the Hub runs: plain torchrun's ranks load the new
    commit; `kernlock run -- torchrun` in the same environment loads the locked one, with no Hub request."""
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    argv = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2"]
    with HubServer(tiny.root) as server:
        moved = move_branch(tiny.root, TINY_ACTIVATION, "v1")
        assert moved != tiny.entry(TINY_ACTIVATION).commit
        env = {**server.env(), "HF_HUB_CACHE": str(tmp_path / "cache"), "KERNLOCK_CACHE": str(tmp_path / "kl")}
        plain = _ranks(tiny, argv, script, env)
        locked = _ranks(tiny, [sys.executable, "-m", "kernlock", "run", "--", *argv], script, server.env())
        url = server.url
    assert len(plain) == len(locked) == 2
    for report in plain:
        assert report["loaded"][TINY_ACTIVATION]["commit"] == moved
    for report in locked:
        assert report["loaded"][TINY_ACTIVATION]["commit"] == tiny.entry(TINY_ACTIVATION).commit
        assert report["loaded"][TINY_ACTIVATION]["identity"] == tiny.identity(TINY_ACTIVATION)
        assert _hub_connects(report, url) == []


def test_the_collective_check_names_the_ranks_that_differ():
    """kernlock.distributed.check_ranks compares what every rank loaded (above: through a real gloo group)."""
    from kernlock.distributed import disagreements

    same = {"org/a": "a" * 40, "org/b": "b" * 40}
    assert disagreements([same, dict(same), dict(same)]) == []
    moved = {**same, "org/a": "c" * 40}
    assert disagreements([same, same, moved, {"org/b": "b" * 40}]) == [
        f"org/a: {'a' * 12} on ranks 0, 1; {'c' * 12} on rank 2; not loaded on rank 3"
    ]
