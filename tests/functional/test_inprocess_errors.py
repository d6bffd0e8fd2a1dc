"""Errors inside the user's process read like the CLI's (issue 30, item 4).

In a process that `kernlock run` starts or that imports ``kernlock.activate``, an uncaught kernlock error is one line,
``kernlock: error: <message>``, exit status 1; the traceback comes back with ``KERNLOCK_DEBUG=1`` (or ``kernlock -v
run``). Every other exception, and one that the program raised from ours, keeps its traceback. Real kernels,
transformers and torch, against a locked project whose Hub is stopped.
"""

from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path

import pytest
from envs import user_env_for
from processes import CHILD_HELPERS, CHILD_PRELUDE, Child
from projects import CPU_ENV, TINY_ACTIVATION, LockedProject, locked_offline, tiny_locked_project, write_pyproject

from kernlock.testing import CPU_VARIANT, create_kernel_repo

pytestmark = pytest.mark.subprocess  # every test here starts kernlock, Python or a server process

UNLOCKED = "kernels-community/rotary"
COMPILED = "kernels-community/compiled-activation"
PREFIX = "kernlock: error: "


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> LockedProject:
    return tiny_locked_project(tmp_path_factory.mktemp("inprocess"))


def _script(tmp_path: Path, body: str, *, activate: bool = False) -> Path:
    script = tmp_path / "train.py"
    activation = "import kernlock.activate\n" if activate else ""
    script.write_text(CHILD_PRELUDE + activation + CHILD_HELPERS + textwrap.dedent(body))
    return script


def _one_line(child: Child, *needles: str) -> str:
    """The child failed as the CLI does: exit 1, no traceback, one ``kernlock: error:`` line naming ``needles``."""
    assert child.returncode == 1, (child.returncode, child.stderr[-3000:])
    assert "Traceback" not in child.stderr, child.stderr[-3000:]
    errors = [line for line in child.stderr.splitlines() if line.startswith(PREFIX)]
    assert len(errors) == 1 and child.error_line() == errors[0], child.stderr[-3000:]
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


LOADS = {
    "get_kernel": f'import kernels\nkernels.get_kernel("{UNLOCKED}", version=1)\n',
    "attn_implementation": f'train_llama("{UNLOCKED}")\n',
}


@pytest.mark.binds
@pytest.mark.parametrize("load", sorted(LOADS))
def test_an_unlocked_kernel_under_kernlock_run_is_one_line(tiny: LockedProject, tmp_path: Path, load: str):
    """Strict mode, no kernlock import in the program: the `kernlock run` line, then the one error line."""
    script = _script(tmp_path, LOADS[load])
    child = tiny.run_argv([sys.executable, "-m", "kernlock", "run", "--", sys.executable, str(script)])
    line = _one_line(child, f"{UNLOCKED} (version=1) is not in", f"`kernlock add {UNLOCKED}@v1`")
    assert [text for text in child.stderr.splitlines() if text.strip()][-2:][0].startswith("kernlock: "), line


@pytest.mark.binds
@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["run"], {"KERNLOCK_DEBUG": "1"}),
        (["-v", "run"], {}),
        (["run", "-v"], {}),
    ],
)
def test_the_traceback_comes_back_with_kernlock_debug_or_v(
    tiny: LockedProject, tmp_path: Path, argv: list[str], env: dict[str, str]
):
    script = _script(tmp_path, LOADS["get_kernel"])
    child = tiny.run_argv([sys.executable, "-m", "kernlock", *argv, "--", sys.executable, str(script)], env=env)
    assert child.returncode == 1
    assert "Traceback" in child.stderr and child.error_line().startswith("kernlock.errors.ActivationError:")
    assert PREFIX not in child.stderr


def test_not_synced_with_import_kernlock_activate_is_one_line(tiny: LockedProject, tmp_path: Path):
    child = tiny.run(
        f'import kernels\nkernels.get_kernel("{TINY_ACTIVATION}", version=1)\n',
        env={"HF_HUB_CACHE": str(tmp_path / "empty"), "HF_HUB_OFFLINE": "1"},
    )
    # What is missing from which cache, and both ways to bring it (a Ray node without builds says the same).
    line = _one_line(child, TINY_ACTIVATION, "nothing of it is in the kernel cache", "`kernlock sync`")
    assert "HF_HUB_OFFLINE=1" in line and "`kernlock bundle`" in line and "`kernlock sync --from BUNDLE`" in line


def test_a_build_whose_compiled_code_does_not_load_here_is_one_line(tmp_path: Path):
    """The locked, verified build's extension cannot be loaded on this machine (a CUDA build on a torch without the
    NVIDIA driver says `libcuda.so.1: cannot open shared object file`; this fixture's stand-in extension makes the
    dynamic loader say the same of the extension itself, a file that is there, as a new user saw with the sample
    Hub's CUDA builds): one line naming the build and the fix, not the loader's ImportError, at every try."""
    root, project = tmp_path / "hub", tmp_path / "project"
    create_kernel_repo(root, COMPILED, {"v1": [CPU_VARIANT]}, kind="activation", compiled_builds=[CPU_VARIANT])
    project.mkdir()
    write_pyproject(project, f'"{COMPILED}" = "v1"\n', environments=[CPU_ENV])
    locked = locked_offline(root, project, user_env_for(tmp_path))
    for _attempt in range(2):
        child = locked.run(f'import kernels\nkernels.get_kernel("{COMPILED}", version=1)\n')
        line = _one_line(child, COMPILED, CPU_VARIANT, "is the locked, verified build", "cannot open shared object")
        assert "its files are there and match kernels.lock" in line and "compare `kernlock env`" in line


def test_a_damaged_lock_with_import_kernlock_activate_is_one_line(tiny: LockedProject, tmp_path: Path):
    project = tmp_path / "project"
    shutil.copytree(tiny.project, project)
    lock = project / "kernels.lock"
    lock.write_text("<<<<<<< ours\n" + lock.read_text() + "=======\n>>>>>>> theirs\n")
    child = tiny.run(f'import kernels\nkernels.get_kernel("{TINY_ACTIVATION}", version=1)\n', cwd=project)
    _one_line(child, str(lock), "merge-conflict markers", "`kernlock lock`")


def test_no_lock_at_import_kernlock_activate_is_one_line(tiny: LockedProject, tmp_path: Path):
    child = tiny.run("print('ran')\n", cwd=tmp_path)
    _one_line(child, "no kernels.lock found", "KERNLOCK_LOCKFILE")
    assert "ran" not in child.stdout


def test_a_kernlock_error_that_transformers_rewrapped_is_one_line(tiny: LockedProject):
    """transformers' own loader turns any load failure into ValueError("An error occurred ..."), raised while
    handling ours: our error is the root cause, and its message is what the user needs."""
    child = tiny.run(
        f"""
        from transformers.integrations.hub_kernels import load_and_register_attn_kernel
        load_and_register_attn_kernel("{UNLOCKED}")
        """
    )
    _one_line(child, f"{UNLOCKED} (", "is not in", f"`kernlock add {UNLOCKED}")
    assert "An error occurred" not in child.stderr


def test_other_exceptions_keep_their_traceback(tiny: LockedProject):
    """A bug of the program is not kernlock's to shorten; nor is an error the program raises from ours: both keep
    Python's report, ours included as the cause."""
    own = tiny.run("raise ValueError('a bug of the program')\n")
    assert own.returncode == 1 and "Traceback" in own.stderr and PREFIX not in own.stderr
    assert own.error_line() == "ValueError: a bug of the program"
    rewrapped = tiny.run(
        f"""
        import kernels
        try:
            kernels.get_kernel("{UNLOCKED}", version=1)
        except ImportError as err:
            raise RuntimeError("could not set up the model") from err
        """
    )
    assert rewrapped.returncode == 1 and PREFIX not in rewrapped.stderr
    assert rewrapped.error_line() == "RuntimeError: could not set up the model"
    assert "kernlock.errors.ActivationError:" in rewrapped.stderr and "direct cause" in rewrapped.stderr


def test_a_kernlock_error_in_a_thread_is_one_line(tiny: LockedProject):
    """The thread stops with one line; the program goes on (a thread's error never sets the exit status)."""
    child = tiny.run(
        f"""
        import threading, kernels
        worker = threading.Thread(target=kernels.get_kernel, args=("{UNLOCKED}",), kwargs={{"version": 1}},
                                  name="loader")
        worker.start()
        worker.join()
        print("main went on")
        """
    )
    assert child.returncode == 0 and "main went on" in child.stdout, child.stderr[-3000:]
    assert "Traceback" not in child.stderr
    assert child.error_line().startswith(f"{PREFIX}thread loader stopped: {UNLOCKED} (version=1) is not in")


def test_a_kernlock_error_in_a_torch_spawn_child_is_one_line(tiny: LockedProject, tmp_path: Path):
    """torch.multiprocessing.spawn re-raises a child's failure in the parent, as the child's traceback in text."""
    script = tmp_path / "spawned.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import kernlock


            def child(rank):
                import kernels
                kernels.get_kernel("{UNLOCKED}", version=1)


            if __name__ == "__main__":
                kernlock.activate()
                import torch.multiprocessing
                torch.multiprocessing.spawn(child, nprocs=1)
            """
        )
    )
    child = tiny.run_argv([sys.executable, str(script)])
    _one_line(child, "process 0 of torch.multiprocessing.spawn stopped:", f"`kernlock add {UNLOCKED}@v1`")
