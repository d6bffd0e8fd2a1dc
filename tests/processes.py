"""Processes: the check that sees every process a test starts (:class:`ProcessLog`), and the snippets every child
process runs to load kernels as a user's program would (:data:`CHILD_PRELUDE`, :data:`CHILD_HELPERS`, :class:`Child`).
One copy each: look here before writing one in a test."""

from __future__ import annotations

import json
import re
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The audit event ``_posixsubprocess.fork_exec`` raises here (argv) before it starts a process
#: (:func:`audit_fork_exec`): multiprocessing starts its spawn children, its forkserver and its resource tracker
#: through it (``multiprocessing.util.spawnv_passfds``), and raises no event of its own.
FORK_EXEC = "_posixsubprocess.fork_exec"


def audit_fork_exec() -> None:
    """Make ``_posixsubprocess.fork_exec`` (what subprocess and multiprocessing call by that name) raise
    :data:`FORK_EXEC` first; once per process."""
    try:
        import _posixsubprocess
    except ImportError:  # not a POSIX system
        return
    real = _posixsubprocess.fork_exec
    if getattr(real, "audited", False):
        return

    def fork_exec(*args: Any, **kwargs: Any) -> Any:
        sys.audit(FORK_EXEC, args[0])
        return real(*args, **kwargs)

    fork_exec.audited = True  # type: ignore[attr-defined]
    _posixsubprocess.fork_exec = fork_exec


class ProcessRefused(Exception):
    """A start :meth:`ProcessLog.refusing` stopped."""


#: What the processes multiprocessing starts run (a word of their argv) -> what the log calls them.
_MULTIPROCESSING = {
    "--multiprocessing-fork": "a multiprocessing spawn child",
    "multiprocessing.forkserver": "the multiprocessing forkserver",
    "multiprocessing.resource_tracker": "the multiprocessing resource tracker",
}


class ProcessLog:
    """The processes this (the pytest) process starts, git left out, noted while ``names`` is a list: the check
    behind the ``subprocess`` marker (tests/conftest.py). An audit hook, so it sees every way to start one
    (subprocess, os.posix_spawn, os.system, a fork), from C too; multiprocessing's spawn and forkserver children
    through :data:`FORK_EXEC` and, for a forkserver already running, the request to it (a ``socket.connect`` to its
    address). git does not count, as the test Hub and the fixture repositories run it all the time."""

    STARTS = frozenset({"subprocess.Popen", "os.posix_spawn", "os.system", "os.fork", "os.forkpty", FORK_EXEC})

    def __init__(self) -> None:
        self.names: list[str] | None = None
        #: Whether it started `kernlock run` with this interpreter: that run binds this Python environment, every
        #: process of it, while it lasts (the ``binds`` marker, tests/conftest.py).
        self.binds = False
        #: What :meth:`refusing` stopped.
        self.refused: list[str] = []
        self._refusing = False
        audit_fork_exec()
        sys.addaudithook(self._audit)  # for the rest of the process: audit hooks cannot be removed

    @contextmanager
    def refusing(self) -> Iterator[list[str]]:
        """While it lasts, a start it sees raises :class:`ProcessRefused` instead of starting (the process is noted
        in the list it yields, not in ``names``): how tests/unit/test_process_audit.py shows that it sees a way to
        start a process without starting one."""
        self.refused, self._refusing = [], True
        try:
            yield self.refused
        finally:
            self._refusing = False

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if self.names is None or (event not in self.STARTS and event != "socket.connect"):
            return
        name = self._started(event, args)
        if name is None or name == "git":
            return
        if self._refusing:
            self.refused.append(name)
            raise ProcessRefused(name)
        self.names.append(name)

    def _started(self, event: str, args: tuple[Any, ...]) -> str | None:
        """What the event starts, by name; None when it starts nothing."""
        from os import fsdecode
        from os.path import basename

        if event == "socket.connect":  # (socket, address): a request to multiprocessing's forkserver for a child
            server = getattr(sys.modules.get("multiprocessing.forkserver"), "_forkserver", None)
            address = getattr(server, "_forkserver_address", None)
            return "a multiprocessing forkserver child" if address is not None and args[1] == address else None
        if event == FORK_EXEC:  # (argv,)
            words = [fsdecode(word) for word in args[0]]
            found = (name for mark, name in _MULTIPROCESSING.items() if any(mark in word for word in words))
            return next(found, basename(words[0]))
        if event == "subprocess.Popen":  # (executable, args, cwd, env)
            argv = args[1]
            self.binds = self.binds or binds_this_environment(argv, args[3])
            program = args[0] or (
                argv if isinstance(argv, (str, bytes)) or not hasattr(argv, "__getitem__") else argv[0]
            )
        elif event == "os.posix_spawn":  # (path, argv, env)
            program = args[0]
        elif event == "os.system":  # (command,)
            program = fsdecode(args[0]).split()[0]
        else:
            return "a fork of the test process"
        return basename(fsdecode(program))


#: Shells whose ``-c`` script :func:`binds_this_environment` reads (the README's pasted transcripts run in bash).
SHELLS = frozenset({"bash", "sh", "dash", "zsh"})
#: `kernlock run` (or `kernlock -q run`, `python -m kernlock run`) as a command in a shell script.
_KERNLOCK_RUN = re.compile(r"(?<![\w.-])(kernlock|python3?(\.\d+)?\s+-m\s+kernlock)(\s+-\S+)*\s+run(?![\w-])")


def binds_this_environment(argv: Any, env: Any = None) -> bool:
    """Whether ``argv`` is `kernlock run` by this interpreter (``python -m kernlock run``, or the console script
    beside it): such a run binds this Python environment's site-packages (kernlock.commands.runbind). So is a shell
    (:data:`SHELLS`) whose ``-c`` script runs `kernlock run` where its PATH (``env``'s, else this process's) finds
    this interpreter's `kernlock` or `python` first: the audit sees the shell, not what the script starts."""
    from os import fsdecode
    from os.path import abspath, basename, dirname, join

    if isinstance(argv, (str, bytes)) or not hasattr(argv, "__iter__"):
        return False
    words = [fsdecode(word) for word in argv]
    if not words:
        return False
    here = abspath(sys.executable)
    if basename(words[0]) in SHELLS and len(words) > 2 and words[1] == "-c":
        return _KERNLOCK_RUN.search(words[2]) is not None and _finds_this_interpreter(env)
    if abspath(words[0]) == here and words[1:3] == ["-m", "kernlock"]:
        rest = words[3:]
    elif abspath(words[0]) == join(dirname(here), "kernlock"):
        rest = words[1:]
    else:
        return False
    commands = [word for word in rest if not word.startswith("-")]
    return bool(commands) and commands[0] == "run"


def _finds_this_interpreter(env: Any) -> bool:
    """Whether a shell started with ``env`` (None: this process's environment) finds `kernlock`, `python` or
    `python3` first in this interpreter's bin folder (its environment's) on its PATH."""
    import os
    import shutil
    from os.path import abspath, dirname

    path = (env if isinstance(env, dict) else os.environ).get("PATH", os.defpath)
    path = os.fsdecode(path) if isinstance(path, bytes) else path
    ours = dirname(abspath(sys.executable))
    found = (shutil.which(name, path=path) for name in ("kernlock", "python", "python3"))
    return any(where is not None and dirname(abspath(where)) == ours for where in found)


# First, before anything else in a child: record every socket the process connects.
#: Before kernels is imported: sigstore looks absent to it (kernels 0.18+ then checks the digest alone, and never
#: reaches for sigstore's trust root over the network).
HIDE_SIGSTORE = """
import importlib.util
_find = importlib.util.find_spec
importlib.util.find_spec = lambda name, *rest: None if name == "sigstore" else _find(name, *rest)
"""

CHILD_PRELUDE = """\
import json, sys
CONNECTS = []
sys.addaudithook(lambda event, args: CONNECTS.append(repr(args[1])) if event == "socket.connect" else None)
"""
# Functions every child may call: what kernels loaded (by the identity each build exports), a tiny Llama trained
# one step, and the closing REPORT line that Child.report reads.
CHILD_HELPERS = """\
def loaded():
    import kernels
    found = {}
    for k in kernels.get_loaded_kernels():
        identity = getattr(k.module, "KERNEL_IDENTITY", None)
        if identity is not None:
            commit = str(k.repo_info.revision) if k.repo_info is not None else None  # an Oid from kernels 0.18 on
            found[identity["repo"]] = {"commit": commit, "identity": identity, "calls": dict(k.module.CALL_COUNTS)}
    return found


def train_llama(attn, **kwargs):
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attn, **kwargs)
    model.train()
    ids = torch.randint(0, 64, (2, 8))
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    grad = model.model.layers[0].self_attn.q_proj.weight.grad
    return model, {"attn": model.config._attn_implementation, "loss": float(loss), "q_grad": float(grad.abs().sum())}


def report(**extra):
    print("REPORT " + json.dumps({"loaded": loaded(), "connects": CONNECTS, **extra}), flush=True)
"""


# The start of a rank's script in the cluster tests (tests/system/test_hook.py, tests/system/test_run_bind.py): it
# says it started (a rank that stops at its first kernel import printed only this), imports kernels and reads the
# activation.
RANK_PRELUDE = (
    CHILD_PRELUDE
    + CHILD_HELPERS
    + """
import os
print("started", flush=True)
import kernels
from kernlock.runtime import state as activated
"""
)


#: A ``sitecustomize.py`` for processes a test cannot put code into (a console script such as ``trl sft``, every
#: rank a launcher starts): it records every socket the process connects and, at exit, when the process imported
#: kernels, writes what it loaded (:data:`CHILD_HELPERS`' ``loaded()``: each build's identity and call counts) and
#: the sockets to ``$KERNLOCK_TEST_PROBE.<pid>.json``. `kernlock run` puts its own sitecustomize first on the path;
#: that one runs the sitecustomize it shadows, this one.
PROBE_SITECUSTOMIZE = (
    CHILD_PRELUDE
    + CHILD_HELPERS
    + """
import atexit, os


def _probe_write():
    if "kernels" in sys.modules:
        with open(f"{os.environ['KERNLOCK_TEST_PROBE']}.{os.getpid()}.json", "w") as out:
            json.dump({"argv": sys.argv, "loaded": loaded(), "connects": CONNECTS}, out)


atexit.register(_probe_write)
"""
)


def install_probe(folder: Path) -> dict[str, str]:
    """Write :data:`PROBE_SITECUSTOMIZE` into ``folder``; the variables that make a process run it (to merge into
    its environment: PYTHONPATH, KERNLOCK_TEST_PROBE). :func:`read_probes` reads what the processes wrote."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(PROBE_SITECUSTOMIZE)
    return {"PYTHONPATH": str(folder), "KERNLOCK_TEST_PROBE": str(folder / "probe")}


def read_probes(folder: Path) -> list[dict[str, Any]]:
    """What each probed process that imported kernels wrote at exit (:func:`install_probe`), oldest first."""
    found = sorted(folder.glob("probe.*.json"), key=lambda path: path.stat().st_mtime_ns)
    return [json.loads(path.read_text()) for path in found]


def kernelize_silu_and_mul(repo: str) -> str:
    """Child code: a ``SiluAndMul`` layer kernelized from ``repo``'s layer (asked as version 1) into ``layer``."""
    return textwrap.dedent(
        f"""
        import torch
        from torch import nn
        from kernels import LayerRepository, Mode, kernelize, use_kernel_forward_from_hub, use_kernel_mapping

        @use_kernel_forward_from_hub("SiluAndMul")
        class SiluAndMul(nn.Module):
            def forward(self, x):
                d = x.shape[-1] // 2
                return nn.functional.silu(x[..., :d]) * x[..., d:]

        layer = nn.Sequential(SiluAndMul())
        mapping = {{"SiluAndMul": {{"cpu": LayerRepository("{repo}", layer_name="SiluAndMul", version=1)}}}}
        with use_kernel_mapping(mapping):
            kernelize(layer, mode=Mode.INFERENCE, device="cpu")
        """
    )


@dataclass
class Child:
    """What a child process left: its exit code, output, and the REPORT line it printed."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def report(self) -> dict[str, Any]:
        for line in self.stdout.splitlines():
            if line.startswith("REPORT "):
                return json.loads(line[len("REPORT ") :])
        raise AssertionError(f"no report (exit {self.returncode}):\n{self.stdout}\n{self.stderr[-4000:]}")

    def error_line(self) -> str:
        """The last line of stderr: what the user sees of an uncaught exception."""
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        return lines[-1] if lines else ""
