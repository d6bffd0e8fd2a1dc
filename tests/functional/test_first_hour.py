"""A new user's first hour (issue 22, part 2): the sample Hub from the shell, the README's Quick start pasted line by
line into an empty folder with and without torch (issue 30), and the warning when the installed transformers/kernels
pair turns Hub kernels off. Real CLI, real processes."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli import run_cli
from envs import clean_env, user_env_for
from installs import venv_env
from projects import CPU_ENV, own_repo, write_pyproject

from kernlock.lock import file as lockfile
from kernlock.testing import Catalog, HubServer, move_branch

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parents[2]
CU128 = "torch211-cxx11-cu128-x86_64-linux"


class _Served:
    """``python -m kernlock.testing serve ...`` in its own process: its URL and the export line it printed."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kernlock.testing", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        self.export = self.proc.stdout.readline().strip()

    def exported(self) -> dict[str, str]:
        assert self.export.startswith("export "), self.export
        return dict(word.split("=", 1) for word in shlex.split(self.export[len("export ") :]))

    def stop(self) -> tuple[int, str]:
        self.proc.terminate()
        code = self.proc.wait(timeout=10)
        assert self.proc.stderr is not None
        return code, self.proc.stderr.read()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[list[_Served]]:
    running: list[_Served] = []
    yield running
    for server in running:
        if server.proc.poll() is None:
            server.stop()


def _user(tmp_path: Path, exported: dict[str, str]) -> dict[str, str]:
    return clean_env(
        **exported,
        HF_HOME=str(tmp_path / "hf-home"),
        HF_HUB_CACHE=str(tmp_path / "hf-cache"),
        KERNLOCK_CACHE=str(tmp_path / "kernlock-cache"),
    )


# -- 1. the sample Hub from the shell -------------------------------------------------------------------------


@pytest.mark.slow
def test_sample_hub_commands_build_serve_with_latency_and_move_a_branch(tmp_path: Path, served: list[_Served]):
    root = tmp_path / "hub"
    built = subprocess.run(
        [sys.executable, "-m", "kernlock.testing", "catalog", str(root)], capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr
    assert "kernels-community/flash-attn2" in built.stdout and "v1 v2 v3 v4 v5" in built.stdout
    assert f"python -m kernlock.testing serve {root}" in built.stdout
    again = subprocess.run(
        [sys.executable, "-m", "kernlock.testing", "catalog", str(root)], capture_output=True, text=True
    )
    # the Quick start pasted twice: the Hub it built is kept as it is (never built over), exit 0
    assert again.returncode == 0 and f"{root.resolve()} already holds the sample Hub" in again.stdout, again.stderr
    other = tmp_path / "not-a-hub"
    other.mkdir()
    (other / "notes.txt").write_text("mine\n")
    refused = subprocess.run(
        [sys.executable, "-m", "kernlock.testing", "catalog", str(other)], capture_output=True, text=True
    )
    assert refused.returncode == 2 and "not an empty folder" in refused.stderr
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]

    server = _Served(["serve", str(root), "--port", "0", "--latency", "0.3"])
    served.append(server)
    assert server.url.startswith("http://127.0.0.1:")
    assert server.exported() == {
        "HF_ENDPOINT": server.url,
        "HF_HUB_DISABLE_XET": "1",
        "KERNLOCK_SIGSTORE_TRUSTED_ROOT": str(root / "sigstore" / "trusted_root.json"),  # the sample builds are signed
    }
    env = _user(tmp_path, server.exported())
    project = tmp_path / "project"
    project.mkdir()
    write_pyproject(project, '"kernels-community/activation" = "v1"\n', environments=[CPU_ENV])
    probe = f"{server.url}/api/kernels/kernels-community/activation"
    with pytest.raises((TimeoutError, urllib.error.URLError)):  # every answer waits the latency asked for
        urllib.request.urlopen(probe, timeout=0.05)
    with urllib.request.urlopen(probe, timeout=30) as answer:
        assert answer.status == 200
    locked = run_cli("lock", env=env, cwd=project)
    assert locked.returncode == 0, locked.stderr
    before = lockfile.read(project / "kernels.lock").kernels[0].commit

    moved = subprocess.run(
        [sys.executable, "-m", "kernlock.testing", "move", str(root), "kernels-community/activation", "v1"],
        capture_output=True,
        text=True,
    )
    assert moved.returncode == 0, moved.stderr
    match = re.fullmatch(
        r"moved kernels-community/activation@v1: ([0-9a-f]{40}) -> ([0-9a-f]{40})", moved.stdout.split("\n")[0]
    )
    assert match and match.group(1) == before and match.group(2) != before
    upgraded = run_cli("lock", "--upgrade", env=env, cwd=project)
    assert upgraded.returncode == 0, upgraded.stderr
    assert lockfile.read(project / "kernels.lock").kernels[0].commit == match.group(2)  # the server saw the move
    code, _ = server.stop()
    assert code == 0


def test_the_sample_hub_is_quiet_when_clients_go_away_and_stops_at_once_on_sigterm(
    catalog: Catalog, served: list[_Served]
):
    """A client that goes away (Ctrl-C in `kernlock sync`: the connection is reset) is no error of the server:
    nothing is printed, however many do. SIGTERM stops it at once, a request still being answered or not."""
    import socket
    import struct

    server = _Served(["serve", str(catalog.root), "--latency", "0.2"])
    served.append(server)
    host, port = server.url.removeprefix("http://").split(":")
    request = b"GET /api/kernels/kernels-community/activation HTTP/1.1\r\nHost: hub\r\n\r\n"
    for _ in range(5):
        client = socket.create_connection((host, int(port)))
        client.sendall(request)
        client.recv(64)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset, as a killed client
        client.close()
    waiting = socket.create_connection((host, int(port)))
    waiting.sendall(request)  # answered after the latency: the server stops in the middle of it
    code, stderr = server.stop()  # SIGTERM, then a bounded wait: a server that lingers fails there
    assert code == 0
    assert stderr == "", stderr
    waiting.close()


# -- 2. the README's Quick start, pasted line by line into an empty folder (issue 30, item 3) ---------------------


def _readme_section(title: str) -> str:
    """README.md from the heading ``## title`` to the next ``## `` heading."""
    text = (ROOT / "README.md").read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def _consoles(text: str) -> list[str]:
    return re.findall(r"```console\n(.*?)```", text, re.S)


def _pasted(block: str) -> list[str]:
    """The commands of a ``console`` block as a user pastes them: each ``$ `` line without its prompt, with the
    lines of a here-document it opens, up to its delimiter. Every other line is output."""
    commands = []
    lines = iter(block.splitlines())
    for line in lines:
        if not line.startswith("$ "):
            continue
        command = [line[2:]]
        heredoc = re.search(r"<<-?\s*'?(\w+)'?", line)
        if heredoc:
            for body in lines:
                command.append(body)
                if body == heredoc.group(1):
                    break
        commands.append("\n".join(command))
    return commands


def _transcript_script(commands: list[str]) -> str:
    """bash that runs ``commands`` in one shell, in order, as they were pasted; before each it prints ``$ `` and
    its first line, after each ``[exit N]``, and it stops at the first that fails."""
    parts = []
    for command in commands:
        parts += [f"printf '%s\\n' {shlex.quote('$ ' + command.splitlines()[0])}", command]
        parts.append('rc=$?; echo "[exit $rc]"; [ "$rc" = 0 ] || exit "$rc"')
    return "\n".join(parts) + "\n"


#: The git identity of a developer's machine (README: `git config --global user.name`, `user.email`).
GIT_USER = {"NAME": "A. User", "EMAIL": "user@example.com"}
NOT_SYNCED = "not synced: this machine loads no kernels (torch is not installed); run `kernlock sync` where training"


@pytest.mark.parametrize(
    "torch",
    [
        pytest.param(False, id="python3.12-without-torch"),
        # Part 2's `kernlock run` is this interpreter's (bash finds it first on PATH): it binds this environment while
        # it runs, so a test in another worker that imports kernels before activating loaded under its lock (and its
        # KERNELS_CACHE): test_runtime.py::test_activation_after_transformers_and_kernels_were_imported failed so once.
        pytest.param(True, id="python3.11-with-torch", marks=pytest.mark.binds),
    ],
)
def test_readme_quick_start_pasted_line_by_line_into_an_empty_folder(
    torch: bool, request: pytest.FixtureRequest, catalog: Catalog, hub: HubServer, tmp_path: Path
):
    """Every line of the Quick start's console blocks, as written, run by bash in an empty folder against the
    session's Hub: part 1 (any machine) on Python 3.12 with the kernlock wheel and no torch; parts 1 and 2 (where
    training runs) on this Python with torch, then the README's per-environment pin. Each line exits 0."""
    intro, *parts = _readme_section("Quick start").split("\n### ")
    (sample,) = _consoles(intro)  # the sample Hub (test_sample_hub_commands_... runs those): it exports what this
    (export,) = [c for c in _pasted(sample) if c.startswith("export ")]  # Hub's clients need
    exported = {word.split("=", 1)[0] for word in shlex.split(export, comments=True)[1:]}
    assert exported == {*hub.env(), "KERNLOCK_SIGSTORE_TRUSTED_ROOT"}
    chosen = [part for part in parts if torch or "(torch installed)" not in part.splitlines()[0]]
    assert len(chosen) == (2 if torch else 1), [part.splitlines()[0] for part in parts]
    commands = [command for part in chosen for block in _consoles(part) for command in _pasted(block)]
    # with torch: this interpreter's kernlock (the matrix's newest set runs this case on today's releases)
    bin_folder = Path(sys.executable).parent if torch else request.getfixturevalue("wheel_installed")("3.12")
    env = venv_env(bin_folder, user_env_for(tmp_path, hub))
    env.update({f"GIT_{who}_{what}": value for who in ("AUTHOR", "COMMITTER") for what, value in GIT_USER.items()})
    empty = tmp_path / "empty"
    empty.mkdir()
    for paste in ("first", "again"):  # pasted twice into the same folder: the second changes nothing, exit 0 too
        done = subprocess.run(
            ["bash", "-c", _transcript_script(commands)],
            cwd=empty,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=600,
        )
        print(done.stdout)  # the transcript: `pytest -rP` shows it
        assert done.returncode == 0, (paste, done.stdout)
        assert done.stdout.count("\n[exit 0]\n") == len(commands) >= (7 if torch else 5)
        assert "Traceback" not in done.stdout and "warning" not in done.stdout, done.stdout

    project = empty / "my-training-project"
    # committed: the restore kernlock's errors advise works, and the second paste made no commit of its own
    restored = subprocess.run(["git", "checkout", "HEAD", "--", "kernels.lock"], cwd=project, env=env)
    assert restored.returncode == 0
    log = subprocess.run(["git", "log", "--format=%s"], cwd=project, env=env, capture_output=True, text=True)
    assert log.stdout.splitlines() == ["Lock kernels"], log.stdout
    lock = lockfile.read(project / "kernels.lock")
    assert lock.environments == (CU128, CPU_ENV)
    activation = lock.entry_for("kernels-community/activation", CPU_ENV)
    assert activation is not None and activation.requested == "v1"
    if not torch:
        assert done.stdout.count(NOT_SYNCED) == 2  # one per `kernlock add`
        assert "no variant here: this machine loads no kernels (torch is not installed)" in done.stdout
        return
    assert NOT_SYNCED not in done.stdout and "no variant here" not in done.stdout
    # the load printed the file of the locked build: its commit, this machine's variant
    assert f"/snapshots/{activation.commit}/build/{CPU_ENV}/__init__.py\n" in done.stdout, done.stdout

    # the README's per-environment pin, in place of the table `add` wrote, then `kernlock lock`
    (pins,) = re.findall(r"```toml\n(.*?)```", _readme_section("Pin per environment"), re.S)
    pyproject = project / "pyproject.toml"
    text = pyproject.read_text()
    pyproject.write_text(text[: text.index("[tool.kernlock.kernels]")] + pins)
    locked = run_cli("lock", env=env, cwd=project)
    assert locked.returncode == 0 and "Updated kernels-community/flash-attn2" in locked.stdout, locked
    lock = lockfile.read(project / "kernels.lock")
    fa2 = {env: lock.entry_for("kernels-community/flash-attn2", env) for env in (CPU_ENV, CU128)}
    assert fa2[CU128] is not None and fa2[CU128].requested == "v2"
    assert fa2[CPU_ENV] is not None and fa2[CPU_ENV].requested == "v3"


# -- 3. the transformers/kernels gate, told by add, lock, sync and show --------------------------------------


def _installed(site: Path, name: str, version: str, package: dict[str, str] | None = None) -> None:
    """A distribution as pip installs it: its .dist-info folder (and package files) in ``site``."""
    dist = site / f"{name}-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    for rel, text in (package or {}).items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)


_GATE_523 = 'KERNELS_MIN_VERSION = "0.18.2"\nKERNELS_MAX_VERSION = "0.19.0"\n'


def test_a_pair_that_turns_hub_kernels_off_is_told_in_one_line_and_the_verdict_is_remembered(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path, tmp_path: Path
):
    # transformers 5.24.0 beside the installed kernels 0.17.2, found first on the path as pip's would be
    site = tmp_path / "site"
    _installed(
        site,
        "transformers",
        "5.24.0",
        {
            "transformers/__init__.py": "",
            "transformers/utils/__init__.py": "",
            "transformers/utils/import_utils.py": _GATE_523,
        },
    )
    env = {**user_env, "PYTHONPATH": str(site)}
    write_pyproject(project, "", environments=[CPU_ENV])
    add = run_cli("add", "kernels-community/activation@v1", env=env, cwd=project)
    assert add.returncode == 0, add.stderr
    (line,) = [text for text in add.stderr.splitlines() if "warning" in text]
    assert line.startswith("warning: transformers 5.24.0 only uses kernels >=0.18.2,<0.19.0, but kernels 0.17.2")
    assert "silently OFF" in line and "pip install 'transformers==5.25.0' 'kernels==0.19.1'" in line  # newest tested
    for command in (["lock"], ["sync"], ["show"]):
        done = run_cli(*command, env=env, cwd=project)
        assert done.returncode == 0, done.stderr
        assert [text for text in done.stderr.splitlines() if "warning" in text] == [line], command
    # The verdict is remembered: metadata is not read again while nothing is installed (a changed file inside an
    # installed package does not count), and read again after an install.
    (site / "transformers/utils/import_utils.py").write_text(
        'KERNELS_MIN_VERSION = "0.17.2"\nKERNELS_MAX_VERSION = "0.18.0"\n'
    )
    assert line in run_cli("show", env=env, cwd=project).stderr
    _installed(site, "kernels", "0.18.3")  # the tested release of the line transformers 5.24 accepts
    (site / "transformers/utils/import_utils.py").write_text(_GATE_523)
    fixed = run_cli("show", env=env, cwd=project)
    assert fixed.returncode == 0 and "warning" not in fixed.stderr, fixed.stderr
    # the pair of this venv (transformers 5.22.2, kernels 0.17.2) warns of nothing
    assert "warning" not in run_cli("show", env=user_env, cwd=project).stderr


# -- 4. "no build": a `when` pin to paste, builds grouped, the entry that did not apply -----------------------


def _pasteable(message: str) -> str:
    """The `"org/name" = [...]` lines the error offers, as the user would copy them."""
    lines = message.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().endswith("= ["))
    end = next(i for i in range(start, len(lines)) if lines[i].strip() == "]")
    return "\n".join(line.strip() for line in lines[start : end + 1]) + "\n"


def test_no_build_error_offers_a_when_pin_that_locks_when_pasted(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
):
    write_pyproject(project, f'"{catalog.flash_attn2}" = "v4"\n', environments=[CPU_ENV, CU128])
    failed = run_cli("lock", env=user_env, cwd=project)
    assert failed.returncode == 1 and "Traceback" not in failed.stderr
    message = failed.stderr
    assert f"{catalog.flash_attn2}@v4 has no build for {CU128}." in message
    assert "builds at v4 (42):" in message
    # one line per group, every build named once
    groups = [line.strip() for line in message.splitlines() if line.startswith("    torch")]
    assert "torch213-cxx11: cpu-aarch64-linux, cpu-x86_64-linux, cu126-aarch64-linux" in "\n".join(groups)
    assert sum(len(line.split(": ", 1)[1].split(", ")) for line in groups) == 42
    assert '{ rev = "v3", when = "cuda == 12.8" },' in message and '{ rev = "v4" },' in message
    assert not (project / "kernels.lock").exists()

    pyproject = (project / "pyproject.toml").read_text()
    pasted = pyproject.replace(f'"{catalog.flash_attn2}" = "v4"\n', _pasteable(message))
    (project / "pyproject.toml").write_text(pasted)
    locked = run_cli("lock", env=user_env, cwd=project)
    assert locked.returncode == 0, locked.stderr
    lock = lockfile.read(project / "kernels.lock")
    assert [(env, lock.entry_for(catalog.flash_attn2, env).requested) for env in (CPU_ENV, CU128)] == [  # type: ignore[union-attr]
        (CPU_ENV, "v4"),
        (CU128, "v3"),
    ]


def test_no_build_error_names_the_entry_whose_when_did_not_apply(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
):
    write_pyproject(
        project,
        f'"{catalog.flash_attn2}" = [\n  {{ rev = "v2", when = "cuda == 12.9" }},\n  {{ rev = "v4" }},\n]\n',
        environments=[CPU_ENV, CU128],
    )
    failed = run_cli("lock", env=user_env, cwd=project)
    assert failed.returncode == 1, failed.stderr
    assert (
        f'the entry {{ rev = "v2", when = "cuda == 12.9" }} does not apply to {CU128} (cuda 12.8), so it got v4'
        in failed.stderr
    )
    # the pin offered keeps the user's entries and adds one before the entry that had no build
    assert _pasteable(failed.stderr) == (
        f'"{catalog.flash_attn2}" = [\n{{ rev = "v2", when = "cuda == 12.9" }},\n'
        '{ rev = "v3", when = "cuda == 12.8" },\n{ rev = "v4" },\n]\n'
    )


# -- 9. wording ----------------------------------------------------------------------------------------------


def test_add_over_a_recorded_revision_says_changed(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
):
    write_pyproject(project, f'"{catalog.activation}" = "v1"\n', environments=[CPU_ENV])
    done = run_cli("add", "--no-sync", f"{catalog.activation}@v2", env=user_env, cwd=project)
    assert done.returncode == 0, done.stderr
    assert f'changed {catalog.activation} "v1" -> "v2"' in done.stdout
    assert f"wrote kernels.lock (changed {catalog.activation})" in done.stdout
    assert "added" not in done.stdout
    again = run_cli("add", "--no-sync", f"{catalog.activation}@v2", env=user_env, cwd=project)
    assert f'{catalog.activation} = "v2" was already recorded' in again.stdout, again.stdout


def test_an_environment_added_on_the_same_commit_is_named(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
):
    write_pyproject(project, f'"{catalog.activation}" = "v1"\n', environments=[CPU_ENV])
    assert run_cli("lock", env=user_env, cwd=project).returncode == 0
    write_pyproject(project, f'"{catalog.activation}" = "v1"\n', environments=[CPU_ENV, CU128])
    done = run_cli("lock", env=user_env, cwd=project)
    assert done.returncode == 0, done.stderr
    short = catalog.repo(catalog.activation).head("v1")[:8]
    assert f"Updated {catalog.activation} v1 {short}: now also locked for {CU128}\n" in done.stdout
    assert f"{short} -> {short}" not in done.stdout


def test_a_when_pin_is_said_in_words(catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path):
    """Pinning v2 for CUDA 12.8 moves that environment off the v3 entry: one line says so, with what locks it now."""
    write_pyproject(project, f'"{catalog.flash_attn2}" = "v3"\n', environments=[CPU_ENV, CU128])
    assert run_cli("lock", env=user_env, cwd=project).returncode == 0
    pinned = f'"{catalog.flash_attn2}" = [\n  {{ rev = "v2", when = "cuda == 12.8" }},\n  {{ rev = "v3" }},\n]\n'
    write_pyproject(project, pinned, environments=[CPU_ENV, CU128])
    done = run_cli("lock", env=user_env, cwd=project)
    assert done.returncode == 0, done.stderr
    v3 = catalog.repo(catalog.flash_attn2).head("v3")[:8]
    v2 = catalog.repo(catalog.flash_attn2).head("v2")[:8]
    assert f"Updated {catalog.flash_attn2} v3 {v3}: no longer locked for {CU128} (now v2)\n" in done.stdout
    assert f"Added {catalog.flash_attn2} v2 {v2}\n" in done.stdout
    assert f"- {CU128}" not in done.stdout and f"{CU128}: {CU128}" not in done.stdout, done.stdout
    write_pyproject(project, f'"{catalog.flash_attn2}" = "v3"\n', environments=[CPU_ENV, CU128])
    back = run_cli("lock", env=user_env, cwd=project)
    assert f"Updated {catalog.flash_attn2} v3 {v3}: now also locked for {CU128} (was v2)\n" in back.stdout
    assert f"Removed {catalog.flash_attn2} v2 {v2}\n" in back.stdout


def test_add_names_every_kernel_without_a_build_each_with_its_fix(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
):
    """Two kernels whose newest version has no CUDA 12.8 build (an older one has): one run names both, each with the
    `when` pin that locks it, and writes nothing."""
    repos = [own_repo(catalog, {"v1": [CU128], "v2": [CPU_ENV]}) for _ in range(2)]
    write_pyproject(project, "", environments=[CPU_ENV, CU128])
    before = (project / "pyproject.toml").read_text()
    failed = run_cli("add", "--no-sync", *repos, env=user_env, cwd=project)
    assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr
    assert failed.stderr.startswith("error: 2 kernels cannot be locked"), failed.stderr
    for repo in repos:
        assert f"no version of {repo} has a build for every environment" in failed.stderr
        assert f'"{repo}" = [' in failed.stderr
    assert failed.stderr.count('{ rev = "v1", when = "cuda == 12.8" },') == 2, failed.stderr
    assert "or move every environment" not in failed.stderr  # no version builds everywhere: none is offered
    assert (project / "pyproject.toml").read_text() == before and not (project / "kernels.lock").exists()


def test_lock_says_what_it_did_not_download(catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path):
    """`add` syncs, `lock` does not: after a lock that moved a pin, `lock` says the new commit is not synced here
    (an offline run would fail on it); `lock --sync` syncs, as `add` does."""
    repo = own_repo(catalog, {"v1": [CPU_ENV]})
    assert run_cli("add", f"{repo}@v1", env=user_env, cwd=project).returncode == 0
    head = move_branch(catalog.root, repo, "v1")
    upgraded = run_cli("lock", "--upgrade", env=user_env, cwd=project)
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"not synced here yet ({CPU_ENV}): {repo} v1 {head[:8]}; run `kernlock sync`" in upgraded.stdout
    synced = run_cli("lock", "--sync", env=user_env, cwd=project)
    assert synced.returncode == 0, synced.stderr
    assert "kernels.lock is up to date" in synced.stdout and f"downloaded {repo}" in synced.stdout
    assert "not synced here" not in synced.stdout
    offline = run_cli("verify", env=user_env, cwd=project)
    assert offline.returncode == 0, offline.stderr


def _variant_lines(stdout: str) -> list[str]:
    return sorted(line.strip() for line in stdout.splitlines() if line.startswith("  downloaded "))


@pytest.mark.slow
def test_per_variant_file_counts_are_the_same_in_every_run(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path, tmp_path: Path
):
    """Variants of one commit share files (the same layers.py): each variant counts every file it installed,
    whichever variant's download fetched the shared blob."""
    envs = [CPU_ENV, CU128, "torch213-cxx11-cu130-x86_64-linux", "torch212-cxx11-cu126-x86_64-linux"]
    write_pyproject(project, f'"{catalog.activation}" = "v1"\n', environments=envs)
    assert run_cli("lock", env=user_env, cwd=project).returncode == 0
    (kernel,) = lockfile.read(project / "kernels.lock").kernels
    expected = sorted(f"downloaded {catalog.activation} {v.name} ({len(v.files)} files," for v in kernel.variants)
    runs = []
    for i in range(3):
        env = {**user_env, "HF_HUB_CACHE": str(tmp_path / f"cache-{i}")}
        done = run_cli("sync", "--all-environments", env=env, cwd=project)
        assert done.returncode == 0, done.stderr
        runs.append(_variant_lines(done.stdout))
        assert [line.split(" files,")[0] + " files," for line in runs[-1]] == expected
    assert runs[0] == runs[1] == runs[2]


@pytest.mark.slow
def test_sync_from_a_bundle_says_installed_from(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path, tmp_path: Path
):
    write_pyproject(project, f'"{catalog.activation}" = "v1"\n', environments=[CPU_ENV])
    assert run_cli("lock", env=user_env, cwd=project).returncode == 0
    bundle = tmp_path / "kernels.bundle"
    assert run_cli("bundle", "-o", str(bundle), env=user_env, cwd=project).returncode == 0
    fresh = {**user_env, "HF_HUB_CACHE": str(tmp_path / "offline-cache"), "HF_HUB_OFFLINE": "1"}
    done = run_cli("sync", "--from", str(bundle), env=fresh, cwd=project)
    assert done.returncode == 0, done.stderr
    assert f"  installed {catalog.activation} {CPU_ENV} (" in done.stdout
    assert f"(1 installed from {bundle}, 0 already verified)" in done.stdout
    assert "downloaded" not in done.stdout


@pytest.mark.binds
def test_kernlock_run_says_once_that_the_lock_is_active_and_quiet_silences_it(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
):
    write_pyproject(project, f'"{catalog.activation}" = "v1"\n', environments=[CPU_ENV])
    assert run_cli("lock", env=user_env, cwd=project).returncode == 0
    program = [sys.executable, "-c", "print('ran')"]
    done = run_cli("run", "--", *program, env=user_env, cwd=project)
    assert done.returncode == 0 and done.stdout == "ran\n", done.stderr
    assert done.stderr.splitlines() == [
        f"kernlock: {project / 'kernels.lock'} (1 kernel, strict mode) active for {shlex.join(program)}"
    ]
    quiet = run_cli("run", "-q", "--", *program, env=user_env, cwd=project)
    assert quiet.returncode == 0 and quiet.stdout == "ran\n" and quiet.stderr == ""


# -- 5. a mistyped repo: did you mean, from the publisher's listing ------------------------------------------


@pytest.mark.parametrize("spec", ["kernels-community/flash-atn2", "kernels-community/Flash-Attn@v2"])
def test_a_mistyped_repo_gets_a_did_you_mean_from_the_publishers_listing(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path, spec: str
):
    write_pyproject(project, "", environments=[CPU_ENV])
    before = (project / "pyproject.toml").read_text()
    failed = run_cli("add", spec, env=user_env, cwd=project)
    assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr
    repo = spec.split("@")[0]
    assert f"{repo} was not found on {hub.url}" in failed.stderr
    assert re.search(r"did you mean (kernels-community/[\w-]+ or )*kernels-community/flash-attn2\b", failed.stderr)
    assert "e.g. kernels-community/activation" not in failed.stderr  # no unrelated example
    assert hub.log.count("GET", contains="/api/kernels?author=kernels-community") == 1  # one request, error path
    assert (project / "pyproject.toml").read_text() == before and not (project / "kernels.lock").exists()


def test_a_correct_repo_asks_for_no_listing(catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path):
    write_pyproject(project, "", environments=[CPU_ENV])
    assert run_cli("add", "--no-sync", catalog.activation, env=user_env, cwd=project).returncode == 0
    assert hub.log.count(contains="author=") == 0


# -- 6. network errors ---------------------------------------------------------------------------------------


@pytest.fixture
def not_a_hub(tmp_path: Path) -> Iterator[str]:
    """A real web server that is no Hub: ``python -m http.server`` over an empty folder (404 to every API path)."""
    import functools
    import http.server
    import threading

    folder = tmp_path / "www"
    folder.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("command", [["add", "kernels-community/activation"], ["lock"]])
def test_an_endpoint_that_is_no_hub_is_told_apart_from_a_missing_repo(
    user_env: dict[str, str], project: Path, not_a_hub: str, command: list[str]
):
    write_pyproject(project, '"kernels-community/activation" = "v1"\n', environments=[CPU_ENV])
    env = {**user_env, "HF_ENDPOINT": not_a_hub}
    failed = run_cli(*command, env=env, cwd=project)
    assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr
    assert f"{not_a_hub} does not answer like a Hugging Face Hub" in failed.stderr and "HF_ENDPOINT" in failed.stderr
    assert "was not found" not in failed.stderr and "trusted" not in failed.stderr


@pytest.mark.slow
def test_a_retry_message_says_which_part_of_the_budget_ran_out(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
):
    write_pyproject(project, f'"{catalog.activation}" = "v1"\n', environments=[CPU_ENV])
    hub.faults.status(503, times=100, match="/refs", retry_after=8)
    failed = run_cli("lock", env=user_env, cwd=project)
    assert failed.returncode == 1, failed.stderr
    assert "answered HTTP 503 for the branches and tags of kernels-community/activation after 2 attempts" in (
        failed.stderr
    )
    assert "(the next wait of 8.0 s would take this command past the 15 s of waiting it allows (8.0 s used" in (
        failed.stderr
    )
    assert "attempt(s)" not in failed.stderr and "retries and 15 s of waiting is spent" not in failed.stderr


@pytest.mark.slow
def test_only_sync_points_to_its_offline_mode_when_the_hub_is_unreachable(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
):
    write_pyproject(project, f'"{catalog.activation}" = "v1"\n', environments=[CPU_ENV])
    assert run_cli("lock", env=user_env, cwd=project).returncode == 0
    dead = {**user_env, "HF_ENDPOINT": "http://127.0.0.1:9"}
    for command in (["add", catalog.flash_attn2], ["lock", "--upgrade"]):
        failed = run_cli(*command, env=dead, cwd=project)
        assert failed.returncode == 1 and "cannot reach the Hub at http://127.0.0.1:9" in failed.stderr
        assert "--offline" not in failed.stderr, failed.stderr
    failed = run_cli("sync", env=dead, cwd=project)
    assert failed.returncode == 1 and "cannot reach the Hub at http://127.0.0.1:9" in failed.stderr
    assert "`kernlock sync --offline --frozen`" in failed.stderr


# -- 8. a full disk ------------------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real file system of 1 MiB (tmpfs), for a cache without room; skipped where mounting is not allowed."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_disk_without_room_is_refused_before_any_download(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path, small_disk: Path
):
    repo = own_repo(catalog, {"v1": [CPU_ENV]}, so_size=3 << 20)
    write_pyproject(project, f'"{repo}" = "v1"\n', environments=[CPU_ENV])
    assert run_cli("lock", env=user_env, cwd=project).returncode == 0
    hub.log.clear()
    env = {**user_env, "HF_HUB_CACHE": str(small_disk / "cache")}
    failed = run_cli("sync", env=env, cwd=project)
    assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr
    (variant,) = lockfile.read(project / "kernels.lock").kernels[0].variants
    needed = sum(f.size for f in variant.files)
    said = re.search(r"they need 3\.0 MB \((\d+) bytes\) and the disk has 1\.0 MB \((\d+) bytes\) free", failed.stderr)
    assert said and int(said.group(1)) == needed and 0 < int(said.group(2)) <= 1 << 20, failed.stderr
    assert "nothing was downloaded" in failed.stderr and "KERNELS_CACHE" in failed.stderr
    assert "writable" not in failed.stderr
    assert hub.log.count(contains="/resolve/") == 0  # refused before the first download
    assert not [p for p in small_disk.rglob("*") if p.is_file() and not p.name.endswith(".lock")]


# -- 4. the environment strings, learned on a machine without torch (issue 42) ----------------------------------


def test_environments_lists_what_the_kernels_build_for_and_each_listed_string_locks(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
):
    """`kernlock environments` answers what a machine without torch cannot learn from `kernlock env`: the strings
    the kernels have builds for, in words. Every string it lists under "every one" locks both kernels; one it
    lists as served by only one of them does not lock the other."""
    fa2, activation = f"{catalog.flash_attn2}@v3", f"{catalog.activation}@v1"
    shown = run_cli("environments", fa2, activation, env=user_env, cwd=project)
    assert shown.returncode == 0, shown.stderr
    assert f"  {CU128}     torch 2.11, CUDA 12.8, x86_64 Linux\n" in shown.stdout, shown.stdout
    assert f"  {CPU_ENV}       torch 2.13, CPU, x86_64 Linux\n" in shown.stdout
    found = json.loads(run_cli("environments", fa2, activation, "--json", env=user_env, cwd=project).stdout)
    rows = {row["name"]: row["kernels"] for row in found["environments"]}
    everywhere = sorted(env for env, repos in rows.items() if len(repos) == 2)
    partly = sorted(env for env, repos in rows.items() if repos == [activation])
    assert CU128 in everywhere and CPU_ENV in everywhere and partly
    kernels = f'"{catalog.flash_attn2}" = "v3"\n"{catalog.activation}" = "v1"\n'
    write_pyproject(project, kernels, everywhere)
    locked = run_cli("lock", env=user_env, cwd=project)
    assert locked.returncode == 0, locked.stderr
    assert set(lockfile.read(project / "kernels.lock").environments) == set(everywhere)
    write_pyproject(project, kernels, [partly[0]])
    refused = run_cli("lock", env=user_env, cwd=project)
    assert refused.returncode == 1 and catalog.flash_attn2 in refused.stderr and partly[0] in refused.stderr
    # one kernel pinned per environment counts at each revision it pins
    write_pyproject(project, f'"{catalog.flash_attn2}" = [{{ rev = "v2", when = "cuda == 12.8" }}, {{ rev = "v3" }}]\n')
    both = json.loads(run_cli("environments", "--json", env=user_env, cwd=project).stdout)
    assert [(k["repo"], k["rev"]) for k in both["kernels"]] == [
        (catalog.flash_attn2, "v2"),
        (catalog.flash_attn2, "v3"),
    ]
    served = {row["name"]: row["kernels"] for row in both["environments"]}
    assert served[CU128] == [f"{catalog.flash_attn2}@v2", fa2]  # both revisions build for CUDA 12.8 on torch 2.11
    # no SPEC: the project's requirements, each at the revision it pins
    write_pyproject(project, kernels, [CPU_ENV])
    again = json.loads(run_cli("environments", "--json", env=user_env, cwd=project).stdout)
    assert {(k["repo"], k["rev"]) for k in again["kernels"]} == {
        (catalog.flash_attn2, "v3"),
        (catalog.activation, "v1"),
    }
    assert {row["name"]: row["kernels"] for row in again["environments"]} == rows
    nothing = run_cli("environments", "kernels-community/flash-attn2@v99", env=user_env, cwd=project)
    assert nothing.returncode == 1 and "has no branch or tag 'v99'" in nothing.stderr
