"""`kernlock ray-env`: parse arguments, print the Ray runtime_env that makes every worker of a job honour the lock
(kernlock.runtime.ray_jobs builds it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from kernlock.cli.common import Command, examples, handle_errors, project_option, verbose_option

__all__ = ["ray_env"]


@click.command(
    "ray-env",
    cls=Command,
    epilog=examples(
        ("kernlock ray-env", 'for `ray job submit --runtime-env-json "$(kernlock ray-env)" -- python train.py`'),
        ("kernlock ray-env --merge runtime_env.yaml", "the job's own runtime_env, with kernlock's merged in"),
        page="ray.md",
    ),
)
@click.option("--mode", type=click.Choice(["strict", "warn"]), help="The workers' KERNLOCK_MODE (default: strict).")
@click.option(
    "--merge",
    "merge",
    metavar="JSON|FILE",
    help="The job's own runtime_env (JSON text, or a .json/.yaml file) to merge kernlock's into.",
)
@project_option
@verbose_option()
@handle_errors
def ray_env(mode: str | None, merge: str | None, project_dir: Path | None) -> None:
    """The Ray runtime_env that makes every worker honour the lock.

    Printed as JSON. The lock travels in the job's py_modules; each worker activates it before its first task, in
    the mode given, and fetches a locked build its node lacks (verified, once per node). A driver that imports
    kernlock.activate (or runs under `kernlock run`) needs none of this: every ray.init() it makes gets it.
    """
    from kernlock.runtime import activation, ray_jobs

    lockfile = project_dir / activation.LOCK_NAME if project_dir is not None else None
    base = _job_env(merge) if merge else None
    click.echo(json.dumps(ray_jobs.runtime_env(base, lockfile=lockfile, mode=mode), indent=2))


def _job_env(value: str) -> dict[str, Any]:
    """The runtime_env ``value`` is, or names (a .json, .yaml or .yml file)."""
    path = Path(value)
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml  # Ray's own dependency, as its --runtime-env reads YAML

            found = yaml.safe_load(path.read_text())
        else:
            found = json.loads(path.read_text() if path.suffix == ".json" else value)
    except Exception as err:  # unreadable, not JSON, not YAML (yaml.YAMLError), no PyYAML
        raise click.BadParameter(f"{value!r} is no runtime_env (JSON text, or a .json/.yaml file): {err}") from err
    if not isinstance(found, dict):
        raise click.BadParameter(f"{value!r} is no runtime_env: a JSON or YAML mapping is expected")
    return found
