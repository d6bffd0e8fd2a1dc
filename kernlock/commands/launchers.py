"""Which commands start processes without `kernlock run`'s environment (docs/clusters.md, "Launchers").

`kernlock run` binds its Python environment for the run whatever CMD is; it needs to know CMD only where the
binding cannot be made (site-packages not writable) or would mix with another run's: then a CMD that may clear the
environment is refused before it starts. Only CMD's first word (and its options) is read: a wrapper (``bash -c``,
a script) that clears the environment inside is not seen.
"""

from __future__ import annotations

import os

__all__ = ["clears_environment"]

#: Launchers whose processes (on other nodes, or all of them) get none of the caller's variables, or only those
#: named: pdsh/ssh/clush start a login environment, OpenMPI's mpirun forwards only ``-x NAME`` variables.
CLEARING = frozenset({"pdsh", "ssh", "clush", "mpirun", "mpiexec", "orterun", "prterun"})
SLURM = frozenset({"srun", "salloc", "sbatch"})


def clears_environment(command: tuple[str, ...] | list[str], env: dict[str, str]) -> str | None:
    """How ``command`` (run with ``env``) may start processes without the environment it is given — ``env -i``,
    ``srun --export=NONE``, ``pdsh`` — or None where it is not known to."""
    if not command:
        return None
    name = os.path.basename(command[0])
    if name == "env":
        return "env -i" if _env_ignores(command[1:]) else None
    if name in SLURM:
        export = _option(command[1:], "--export") or env.get("SLURM_EXPORT_ENV")
        if export is not None and export.split(",")[0].strip().upper() != "ALL":
            return f"{name} --export={export}"
        return None
    return name if name in CLEARING else None


def _env_ignores(args: tuple[str, ...] | list[str]) -> bool:
    """Whether ``env``'s options (before its command) include ``-i`` / ``--ignore-environment`` / ``-``."""
    value = False  # the next argument is an option's value (-u NAME, -C DIR, -S STRING)
    for arg in args:
        if value:
            value = False
            continue
        if arg in ("-", "--ignore-environment"):
            return True
        if arg == "--" or not arg.startswith("-"):
            return False
        if arg.startswith("--"):
            value = arg in ("--unset", "--chdir", "--split-string")
            continue
        for i, letter in enumerate(arg[1:], 1):  # -vi; after u, C or S the rest is their value
            if letter == "i":
                return True
            if letter in "uCS":
                value = i == len(arg) - 1
                break
    return False


def _option(args: tuple[str, ...] | list[str], name: str) -> str | None:
    """The value of ``name`` (``--export=V`` or ``--export V``) among a launcher's arguments (those of its command
    too: which of its options take a value is not known here, so where its command starts is not either)."""
    for i, arg in enumerate(args):
        if arg.startswith(name + "="):
            return arg[len(name) + 1 :]
        if arg == name and i + 1 < len(args):
            return args[i + 1]
    return None
