"""The error family (kernlock.errors): every class lives there and derives from KernlockError, ``str(err)`` joins
its parts by one rule, and each site built from parts keeps its fix apart (``.fix``), as the user reads it."""

from __future__ import annotations

import ast
import os
import pickle
import re
import socket
import sys
import types
from pathlib import Path
from typing import Any

import pytest

import kernlock
from kernlock import errors
from kernlock.errors import KernlockError

ROOT = Path(kernlock.__file__).parent

#: The exceptions that may live outside errors.py (errors.py's docstring says why): internal ValueErrors that are
#: re-raised as a KernlockError or skipped, and control flow that never leaves its module.
INTERNAL = {"VariantNameError", "BadToken", "FactError", "Cancelled", "Retry", "Abort"}


def _exception_classes() -> dict[str, str]:
    """Every class of kernlock (the fixture of kernlock.testing aside) whose base is an exception: name -> module."""
    family = set(errors.__all__)
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        if "testing" in path.relative_to(ROOT).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {
                b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else "" for b in node.bases
            }
            if any(b in family or b.endswith(("Error", "Exception")) for b in bases):
                found[node.name] = str(path.relative_to(ROOT))
    return found


def test_every_error_class_lives_in_errors_and_derives_from_kernlock_error() -> None:
    classes = _exception_classes()
    outside = {name: where for name, where in classes.items() if where != "errors.py" and name not in INTERNAL}
    assert not outside, outside
    assert set(classes) >= INTERNAL  # the list names what is there
    for name in INTERNAL:
        assert name in (errors.__doc__ or ""), name  # and errors.py says why each stays outside
    for name, where in classes.items():
        if where == "errors.py":
            cls = getattr(errors, name)
            assert issubclass(cls, KernlockError) and name in errors.__all__, name


#: The verbs a fix starts with (the fixes kernlock's errors name, in the imperative).
_FIX_VERBS = (
    "add|ask|check|choose|commit|copy|create|declare|delete|edit|export|fix|give|install|keep|load|lock|make|move|"
    "name|pass|pick|pin|point|reinstall|remove|report|restore|retry|review|run|save|see|set|start|sync|try|unset|"
    "update|upgrade|use|wait|write"
)
#: A fix written inside one whole sentence (the old form): see the test's docstring.
_OLD_FORM_FIX = re.compile(
    rf"[;:] (?:{_FIX_VERBS})\b|\. (?:{_FIX_VERBS.title()})\b|, run `|; `kernlock |; did you mean",
)
#: Old-form messages left as they are, each with the reason (file:line is not used, so that an edit above them
#: does not break the test: the start of the message is).
_OLD_FORM_KEPT = {
    # versions.latest_version: several lines, the last a [tool.kernlock.kernels] block to paste, on which the
    # joining rule's final full stop would land.
    "kernlock/resolve/versions.py": "no version of {} has a build for every environment",
}


def _text(node: ast.expr) -> str:
    """The literal text of a message argument, ``{}`` for each value put into it (an f-string's fields, a name)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_text(value) for value in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _text(node.left) + _text(node.right)
    return "{}"


def _old_form_fixes(source: str) -> list[tuple[int, str]]:
    """(line, text) of each call of an errors.py class in ``source`` that passes its message as one positional
    text, without ``why=`` or ``fix=``, whose literal text holds a fix (:data:`_OLD_FORM_FIX`)."""
    family = set(errors.__all__) - {"message"}
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name not in family or any(k.arg in ("why", "fix") for k in node.keywords):
            continue
        text = _text(node.args[0])
        if _OLD_FORM_FIX.search(text):
            found.append((node.lineno, text))
    return found


def test_no_error_is_raised_with_its_fix_inside_one_sentence() -> None:
    """Every error naming a fix is built from its parts (``fix=``), not written as one sentence with the fix inside
    (the old form). The scan reads each call of an errors.py class in kernlock/ (a raise, or a helper returning
    the error) that passes one positional text and no ``why=`` or ``fix=``, with each value put into the text read
    as ``{}``, and fails when that literal text holds:

    - ``; `` or ``: `` then a fix verb in lower case (``; run ``, ``: add ``, ``; restore ``, ``; report it ``, ...);
    - ``. `` then a fix verb with a capital (``. Run ``, ``. Restore ``, ``. Pick ``, ...);
    - ``, run ``` (a command to run after a comma);
    - ``; `kernlock `` (a command offered after a semicolon) or ``; did you mean``.

    Text built elsewhere (a helper returning a string, a constant) is not read; the messages kept in the old form
    on purpose are listed, with why, in :data:`_OLD_FORM_KEPT`.
    """
    assert _old_form_fixes('LockError(f"no lock at {p}; run `kernlock lock` to create it.")')  # the rule bites
    assert not _old_form_fixes('LockError(f"no lock at {p}", fix="run `kernlock lock` to create it")')
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        where = str(path.relative_to(ROOT.parent))
        for line, text in _old_form_fixes(path.read_text()):
            if not text.startswith(_OLD_FORM_KEPT.get(where, "\0")):
                found.append(f"{where}:{line}: {text}")
    assert not found, "raise these from their parts, SomeError(what, why=..., fix=...):\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("parts", "line"),
    [
        ({"what": "a whole sentence, as before."}, "a whole sentence, as before."),
        ({"what": "no full stop added to the old form"}, "no full stop added to the old form"),
        ({"what": "cannot run 'x'", "why": "No such file"}, "cannot run 'x': No such file."),
        ({"what": "no lock file at /p", "fix": "run `kernlock lock`"}, "no lock file at /p; run `kernlock lock`."),
        (
            {"what": "cannot remove /s/f", "why": "Permission denied", "fix": "run as its owner"},
            "cannot remove /s/f: Permission denied; run as its owner.",
        ),
        (
            {"what": "it changed; no bundle was written", "fix": "Run `kernlock sync`, then bundle again"},
            "it changed; no bundle was written. Run `kernlock sync`, then bundle again.",
        ),
        ({"what": "x", "fix": "name a file, e.g. `-o a.tar`."}, "x; name a file, e.g. `-o a.tar`."),
    ],
)
def test_str_joins_the_parts_by_one_rule(parts: dict[str, str], line: str) -> None:
    err = KernlockError(**parts)
    assert str(err) == line == errors.message(**parts)
    assert (err.what, err.why, err.fix) == (parts["what"], parts.get("why"), parts.get("fix"))


@pytest.mark.parametrize(
    "err",
    [
        errors.LockError("kernels.lock is stale", fix="run `kernlock lock`"),
        errors.ActivationError("a load", why="no build", fix="run `kernlock lock`"),
        errors.SkippedKernelError("not locked here"),
        errors.VariantNotSynced("org/a v (commit 1)", fix="run `kernlock sync`", detail="nothing of it"),
    ],
)
def test_an_error_pickles_with_its_parts(err: KernlockError) -> None:
    """A process pool or a Ray worker sends errors back pickled: the line and the parts survive."""
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and str(back) == str(err)
    assert (back.what, back.why, back.fix) == (err.what, err.why, err.fix)
    assert getattr(back, "detail", None) == getattr(err, "detail", None)


# -- the sites built from parts, one module at a time ---------------------------------------------------------


def test_damaged_lock_keeps_place_failure_and_repair_apart() -> None:
    from kernlock.lock.validate import REPAIR, damaged

    err = damaged("kernels.lock", "it holds git merge-conflict markers")
    assert str(err) == f"kernels.lock: it holds git merge-conflict markers; {REPAIR}."
    assert (err.what, err.why, err.fix) == ("kernels.lock", "it holds git merge-conflict markers", REPAIR)


def test_bundle_errors_name_their_fix(tmp_path: Path) -> None:
    from kernlock.airgap import bundle

    with pytest.raises(errors.BundleError) as missing:
        bundle.load(tmp_path / "none.tar")
    assert missing.value.fix == f"make one with `kernlock bundle -o {tmp_path / 'none.tar'}` on the connected machine"
    (tmp_path / "junk.tar").write_bytes(b"not a tar archive" * 100)
    with pytest.raises(errors.BundleError) as junk:
        bundle.load(tmp_path / "junk.tar")
    assert "is not a usable kernlock bundle" in str(junk.value) and "nothing was installed. Make it again" in str(
        junk.value
    )
    assert junk.value.fix == "Make it again with `kernlock bundle -o FILE` on the connected machine and copy it whole"
    assert junk.value.why is not None and junk.value.why.startswith("not an uncompressed tar archive")


def test_bundle_and_serve_arguments_name_their_fix(tmp_path: Path) -> None:
    from kernlock.commands import airgap

    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n\n[tool.kernlock.kernels]\n')
    with pytest.raises(errors.ArgumentError) as folder:
        airgap.bundle(tmp_path, str(tmp_path), None)
    assert (
        str(folder.value) == f"-o {tmp_path} is a folder; name a new file for the bundle, e.g. `-o kernels-bundle.tar`."
    )
    assert folder.value.fix == "name a new file for the bundle, e.g. `-o kernels-bundle.tar`"
    with pytest.raises(errors.ArgumentError) as both:
        airgap.mirror_app(tmp_path, bundle=tmp_path / "b.tar", cache=tmp_path)
    assert both.value.fix == "serve from a bundle (--from) or from a kernel cache (--cache), not both"


def test_serve_names_its_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernlock.airgap import mirror

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(errors.ServeError) as busy:
            mirror._check_free("127.0.0.1", port)
    assert busy.value.what == f"cannot listen on 127.0.0.1 port {port}"
    assert busy.value.fix == "pick another with `--port` (or `--host`)"
    monkeypatch.setitem(sys.modules, "gunicorn.app.base", None)  # as if gunicorn were not installed
    with pytest.raises(errors.ServeError) as absent:
        mirror.run(Any, "127.0.0.1", port, 1, 1, "-")
    assert str(absent.value).startswith("`kernlock serve` runs on gunicorn, which is not installed; install it with")
    assert absent.value.fix == "install it with `pip install 'kernlock[serve]'` (or `pip install gunicorn`)"


def test_hook_errors_name_their_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernlock.commands import hook

    with pytest.raises(errors.LockError) as nolock:
        hook.install(tmp_path / "kernels.lock", None, None)
    assert str(nolock.value).startswith(f"no lock file at {tmp_path / 'kernels.lock'}; run `kernlock lock`")
    assert nolock.value.fix == "run `kernlock lock` in the project, or fix --lockfile"
    (tmp_path / hook.PTH_NAME).mkdir()  # a folder where the hook's file is: it cannot be removed
    monkeypatch.setattr(hook, "site_packages", lambda python: tmp_path)
    with pytest.raises(errors.HookError) as stuck:
        hook.uninstall(None)
    assert stuck.value.what == f"cannot remove {tmp_path / hook.PTH_NAME}" and stuck.value.why
    assert stuck.value.fix == "run as its owner"


def test_run_binding_errors_name_their_fix(tmp_path: Path) -> None:
    from kernlock.commands import runbind
    from kernlock.runtime import runs

    if not runbind.SUPPORTED:
        pytest.skip("no binding on this platform")
    env = {"KERNLOCK_LOCKFILE": str(tmp_path / "kernels.lock")}
    (tmp_path / "file").write_text("")  # a site-packages that cannot be written
    with pytest.raises(errors.BindingError) as unbound:
        runbind.bind(env, ("env", "-i", "python"), tmp_path / "file")
    assert unbound.value.what == f"cannot bind {tmp_path / 'file'} to the lock for this run"
    assert unbound.value.fix == (
        f"Run `kernlock hook install --lockfile {tmp_path / 'kernels.lock'}` as the environment's owner, or launch "
        "so that the environment is passed on"
    )
    site = tmp_path / "site"
    site.mkdir()
    other = {
        "host": "elsewhere",  # another host's run, its file fresh: it still runs
        "pid": 1,
        "start": 0,
        "uid": os.getuid(),
        "clears": None,
        "settings": {"KERNLOCK_LOCKFILE": "/other/kernels.lock"},
    }
    (site / f"{runbind.PTH_PREFIX}elsewhere-1.pth").write_text(
        f"import {runbind.RUN_MODULE}\n{runs.OWNER_PREFIX}{other!r}\n"
    )
    with pytest.raises(errors.BindingError) as mixed:
        runbind.bind(env, ("env", "-i", "python"), site)
    assert "Wait for it" in str(mixed.value) and "could not tell the two locks apart. Wait" in str(mixed.value)
    assert mixed.value.fix == "Wait for it to end, or run from a Python environment of its own"


def test_ranks_that_differ_name_their_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernlock import distributed

    dist = pytest.importorskip("torch.distributed")

    def all_gather_object(out: list[Any], mine: Any, group: Any = None) -> None:
        out[:] = [mine, {"org/a": "b" * 40}]

    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)  # two ranks, without a process group
    monkeypatch.setattr(dist, "all_gather_object", all_gather_object)
    monkeypatch.setattr(distributed, "loaded_commits", lambda: {"org/a": "a" * 40})
    with pytest.raises(errors.RankMismatchError) as differ:
        distributed.check_ranks()
    assert str(differ.value).startswith("the ranks loaded different kernel commits: org/a: ")
    assert differ.value.fix == (
        "give every node the same kernels.lock (`kernlock run -- <launcher>`, or `kernlock hook install --lockfile "
        "PATH` on each node's environment)"
    )


def test_an_unwritable_answer_cache_names_its_fix(tmp_path: Path) -> None:
    from kernlock.hub.client import Hub

    with pytest.raises(errors.CacheError) as unwritable:
        Hub._write_cache(tmp_path / ("x" * 300), b"{}")  # a name too long: not a read-only or full disk
    assert unwritable.value.fix == "point KERNLOCK_CACHE at a writable folder and try again"
    assert str(unwritable.value).endswith("; point KERNLOCK_CACHE at a writable folder and try again.")


def test_an_export_that_cannot_hold_the_lock_names_its_fix() -> None:
    from kernlock.lock import interop

    def entry(commit: str, rev: str, environment: str) -> Any:
        return types.SimpleNamespace(repo="org/a", requested=rev, commit=commit, environments=(environment,))

    lock: Any = types.SimpleNamespace(
        environments=("e1", "e2"), kernels=[entry("a" * 40, "v1", "e1"), entry("b" * 40, "v2", "e2")]
    )
    with pytest.raises(errors.ArgumentError) as unknown:
        interop.kernels_pins(lock, "e3")
    assert str(unknown.value) == "--environment e3: kernels.lock covers e1, e2; pick one of them."
    assert unknown.value.fix == "pick one of them"
    with pytest.raises(errors.ExportError) as two:
        interop.kernels_pins(lock)
    assert two.value.fix == "choose with `kernlock export --format kernels --environment ENV`"
    assert [pin.commit for pin in interop.kernels_pins(lock, "e2")] == ["b" * 40]


def test_lock_file_errors_name_their_fix(tmp_path: Path) -> None:
    from kernlock.lock import file as lockfile

    with pytest.raises(errors.LockError) as missing:
        lockfile.read_text(tmp_path / "kernels.lock")
    assert str(missing.value) == f"no kernels.lock at {tmp_path / 'kernels.lock'}; run `kernlock lock` to create it."
    assert missing.value.fix == "run `kernlock lock` to create it"
    with pytest.raises(errors.LockError) as folder:
        lockfile.read_text(tmp_path)  # a folder: not missing, unreadable
    assert folder.value.what == f"cannot read {tmp_path}" and folder.value.fix == "check its permissions"
    large = lockfile.foreign_too_large("model/kernels.lock", 4 << 20)
    assert str(large) == (
        "model/kernels.lock is over 4 MiB, more than any lock a model or another tool carries (a few KiB): kernlock "
        "does not read it; delete it, or write it again (save the model from an activated process)."
    )
    assert large.fix == "delete it, or write it again (save the model from an activated process)"


def test_a_full_disk_names_its_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from kernlock.sync import disk_space

    full = disk_space.full_disk(tmp_path, OSError(errno.ENOSPC, "No space left on device"))
    assert full is not None and full.fix == disk_space.FREE_SPACE
    assert (
        f"is full ({full.what.split('(', 1)[1]}: No space left on device; no partial file was kept. Free space"
        in str(full)
    )
    monkeypatch.setattr(disk_space, "needed_bytes", lambda pairs, cache: 10 << 20)
    monkeypatch.setattr(disk_space, "_free", lambda cache: 1 << 20)
    with pytest.raises(errors.DiskFullError) as room:
        disk_space.require_space([], tmp_path)
    assert str(room.value).startswith(f"not enough room for the kernel files in {tmp_path}: they need ")
    assert "(10485760 bytes) and the disk has" in str(room.value) and room.value.why is not None
    assert "; nothing was downloaded. Free space there, or point KERNELS_CACHE" in str(room.value)
    assert room.value.fix == (
        "Free space there, or point KERNELS_CACHE (or HF_HUB_CACHE) at a disk with room, then run `kernlock sync` again"
    )


def _entry(commit: str = "c" * 40, **fields: Any) -> Any:
    return types.SimpleNamespace(repo="org/a", requested="v1", ref="v1", commit=commit, **fields)


def test_activation_refusals_name_their_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernlock.runtime import policy, servable

    variant = types.SimpleNamespace(name="torch213-cxx11-cpu-x86_64-linux", files=())
    with pytest.raises(errors.ActivationError) as nometa:
        servable.check(_entry(), variant, Path("/nowhere"), variant.name)
    assert nometa.value.fix == (
        "Lock a revision whose builds have one: `kernlock add org/a@<rev>` (`kernlock outdated` lists the newer ones); "
        "`kernlock lock` now refuses such builds"
    )
    assert "(every release since 0.15). Lock a revision" in str(nometa.value)
    state: Any = types.SimpleNamespace(lock=types.SimpleNamespace(environments=("e1",)), environment="e2")
    uncovered = policy._not_covered(state, "/p/kernels.lock")
    assert str(uncovered) == (
        '/p/kernels.lock does not cover this environment, e2 (it covers: e1); add "e2" to `environments` in '
        "[tool.kernlock] and run `kernlock lock`."
    )
    assert uncovered.fix == 'add "e2" to `environments` in [tool.kernlock] and run `kernlock lock`'
    monkeypatch.setattr(policy, "strict", lambda: True)
    with pytest.raises(errors.ActivationError) as other:
        policy._check_revision("org/a", "v2", _entry())
    assert str(other.value).startswith(
        f"org/a@v2 is requested, but kernels.lock pins org/a to v1 (commit {'c' * 12}). Load"
    )
    assert (
        other.value.fix == "Load it without a revision or with @v1, or change the requirement: `kernlock add org/a@v2`"
    )


def test_an_offline_load_of_a_missing_build_names_its_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    from kernlock.runtime import fetching

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    variant = types.SimpleNamespace(name="torch213-cxx11-cpu-x86_64-linux", files=())
    with pytest.raises(errors.NotSyncedError) as offline:
        fetching.fetch_missing(_entry(), variant, errors.NotSyncedError("missing"), None)
    assert ", and HF_HUB_OFFLINE=1 forbids downloading it. Run `kernlock sync` on this machine" in str(offline.value)
    assert offline.value.fix == (
        "Run `kernlock sync` on this machine while the Hub is reachable, or `kernlock bundle` where it is and "
        "`kernlock sync --from BUNDLE` here"
    )


def test_resuming_on_other_builds_names_its_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernlock.runtime import policy, provenance

    (tmp_path / "kernels.lock").write_text("")
    theirs = _entry("a" * 40, variants=(types.SimpleNamespace(name="cpu"),))
    mine = _entry("b" * 40, variant_for=lambda environment: types.SimpleNamespace(name="cpu"))
    view = types.SimpleNamespace(entry_for=lambda repo, environment: mine)
    monkeypatch.setattr(provenance, "enabled", lambda: True)
    monkeypatch.setattr(provenance, "refusal", lambda where: None)
    monkeypatch.setattr(provenance.lockfile, "read_foreign", lambda path: types.SimpleNamespace(kernels=[theirs]))
    monkeypatch.setattr(policy, "current_lock", lambda: (view, "cpu"))
    monkeypatch.setattr(policy, "strict", lambda: True)
    with pytest.raises(errors.OtherBuildsError) as other:
        provenance.compare(tmp_path)
    assert ". Resuming would change the kernel builds mid-run; run on the model's builds" in str(other.value)
    assert other.value.fix == (
        f"run on the model's builds with `kernlock add --from {tmp_path}`, or set KERNLOCK_MODE=warn to go on with "
        f"this run's builds ({provenance.ENV}=0 turns this comparison off)"
    )


def test_add_and_lock_errors_name_their_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernlock.commands import lock

    with pytest.raises(errors.DuplicateSpecError) as twice:
        lock.add(tmp_path, ["org/a", "org/a@v2"])
    assert str(twice.value) == "org/a is given more than once; name each kernel once (org/name[@rev])."
    assert twice.value.fix == "name each kernel once (org/name[@rev])"

    def no_torch() -> Any:
        raise errors.NoEnvironmentError("torch is not installed")

    monkeypatch.setattr(lock, "detect", no_torch)
    with pytest.raises(errors.NoEnvironmentError) as none:
        lock.target_environments(types.SimpleNamespace(environments=()))  # type: ignore[arg-type]
    assert str(none.value).startswith(
        "torch is not installed, so this machine has no environment of its own to lock for"
    )
    assert none.value.fix is not None and none.value.fix.startswith("declare where training runs in pyproject.toml")


def test_a_sync_for_an_uncovered_machine_names_its_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernlock.commands import sync

    monkeypatch.setattr(sync, "detect", lambda: "e2")
    with pytest.raises(errors.LockError) as uncovered:
        sync.this_environment(types.SimpleNamespace(environments=("e1",)))  # type: ignore[arg-type]
    assert str(uncovered.value).startswith(
        "this machine (e2) is not an environment of kernels.lock (it covers e1); add"
    )
    assert uncovered.value.fix == (
        "add it to `environments` in [tool.kernlock] and run `kernlock lock`, or fill a shared cache with "
        "`kernlock sync --all-environments`"
    )


def test_an_unlocked_load_names_its_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernlock.runtime import policy

    lock = types.SimpleNamespace(repos=(), environments=("e1",), entry_for=lambda repo, environment: None)
    settings = types.SimpleNamespace(lockfile="/p/kernels.lock", mode="strict")
    monkeypatch.setattr(policy, "_current", lambda: types.SimpleNamespace(lock=lock, environment="e1"))
    monkeypatch.setattr(policy.activated, "settings", lambda: settings)
    monkeypatch.delenv("KERNLOCK_RECORD", raising=False)
    with pytest.raises(errors.ActivationError) as unlocked:
        policy.locked_entry("org/a", "version=1")
    assert str(unlocked.value) == (
        "org/a (version=1) is not in /p/kernels.lock; add it with `kernlock add org/a@v1`, or record every kernel a "
        "run asks for with `kernlock run --record -- CMD...` (or set KERNLOCK_MODE=warn to load unlocked kernels "
        "with a warning)."
    )
    assert unlocked.value.fix is not None and unlocked.value.fix.startswith("add it with `kernlock add org/a@v1`, or")
    warned: list[str] = []
    monkeypatch.setattr(policy, "warn_once", lambda key, message: warned.append(message))
    settings.mode = "warn"
    assert policy.locked_entry("org/a", "version=1") is None
    assert warned == [
        "org/a (version=1) is not in /p/kernels.lock; add it with `kernlock add org/a@v1`. Loading it unlocked and "
        "unverified, as kernels would."
    ]


def test_a_json_lock_where_kernlocks_is_expected_names_its_fix() -> None:
    from kernlock.lock import interop

    err = interop.json_lock_error("./kernels.lock")
    assert isinstance(err, errors.JsonLockError)
    assert str(err).startswith(
        "./kernels.lock is the kernels library's JSON lock (`kernels lock`), not kernlock's; kernlock does not "
        "overwrite it. Run `kernlock import` to migrate it"
    )
    assert err.fix == (
        f"Run `kernlock import` to migrate it (its commits are kept, the JSON lock is moved to {interop.MOVED_NAME}), "
        "or remove it to start over"
    )


def test_a_folder_others_can_write_names_its_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernlock.util import hfenv, kept

    monkeypatch.setattr(hfenv, "private", lambda path, create=False: False)  # neither folder is this user's alone
    monkeypatch.setattr(hfenv, "cache_root", lambda: tmp_path / "cache")
    with pytest.raises(errors.ActivationError) as shared:
        kept.private_folder(tmp_path, "run", "abc", {}, "`kernlock run`'s sitecustomize.py")
    assert str(shared.value).startswith("cannot keep `kernlock run`'s sitecustomize.py in ")
    assert "would run code from them). Point KERNLOCK_CACHE at a folder of your own" in str(shared.value)
    assert shared.value.fix == (
        "Point KERNLOCK_CACHE at a folder of your own, or `chmod go-w` those folders and the folders above them"
    )


def test_hub_errors_name_their_fix() -> None:
    from huggingface_hub.errors import HfHubHTTPError

    from kernlock.hub.http import HubSession, httpx  # httpx2 or httpx, as huggingface_hub's session uses

    session = HubSession("http://hub.invalid")
    assert (
        session.invalid("no JSON", "http://hub.invalid/api").fix
        == "check HF_ENDPOINT (a mirror or proxy may be broken)"
    )
    assert str(session.too_large("a tree", "http://hub.invalid/api", 10)) == (
        "the Hub at http://hub.invalid answered more than 10 bytes for a tree (http://hub.invalid/api); check "
        "HF_ENDPOINT (a mirror or proxy may be broken)."
    )
    request = httpx.Request("GET", "http://hub.invalid/api")
    limited = HfHubHTTPError("429", response=httpx.Response(429, request=request))
    err = session._give_up("the refs of org/a", limited, 4, "")
    assert str(err) == (
        "the Hub at http://hub.invalid answered HTTP 429 for the refs of org/a after 4 attempts: rate limited; set "
        "HF_TOKEN (`hf auth login`) or wait, then try again later."
    )
    assert (err.why, err.fix) == ("rate limited", "set HF_TOKEN (`hf auth login`) or wait, then try again later")
    failing = HubSession("http://hub.invalid")._give_up(
        "the refs of org/a", HfHubHTTPError("503", response=httpx.Response(503, request=request)), 4, ""
    )
    assert failing.fix == "try again later, or check HF_ENDPOINT"
    refused = HubSession("http://hub.invalid")._give_up("the refs of org/a", httpx.ConnectError("refused"), 4, "")
    assert isinstance(refused, errors.UnreachableError) and refused.fix == "check the network or HF_ENDPOINT"
    assert str(refused).endswith("after 4 attempts; check the network or HF_ENDPOINT.")
    with pytest.raises(errors.HubError) as again:  # the session's failure, raised again to a later request
        session._raise_if_failed()
    assert again.value is not err and str(again.value) == str(err) and again.value.fix == err.fix


def test_sync_errors_name_their_fix(tmp_path: Path) -> None:
    from kernlock.hub.download import Transfer
    from kernlock.sync import cache, engine
    from kernlock.util.wording import RETRY_SYNC

    (tmp_path / "out").symlink_to("/")
    with pytest.raises(errors.IntegrityError) as leaves:
        cache.under(tmp_path, "out", "etc")
    assert leaves.value.what == f"the kernel cache {tmp_path} holds a path that leads outside it"
    assert (
        leaves.value.fix == "remove that symlink (or point KERNELS_CACHE at another folder), then run `kernlock sync`"
    )
    lock: Any = types.SimpleNamespace(environments=("e1",))
    with pytest.raises(errors.NotSyncedError) as other:
        engine.sync(lock, ["e2"], cache=tmp_path)
    assert str(other.value) == (
        "kernels.lock has no entries for e2 (it covers e1); add the environment to [tool.kernlock] environments and "
        "run `kernlock lock`."
    )
    assert other.value.fix == "add the environment to [tool.kernlock] environments and run `kernlock lock`"
    session: Any = types.SimpleNamespace(endpoint="http://hub.invalid")
    transfer = Transfer(session=session, url="u", what="org/a@c f", dest=tmp_path / "f", size=3, bar=None, label="f")
    wrong = transfer.size_error("5 bytes")
    assert str(wrong).endswith(
        "; nothing was installed. Retry `kernlock sync`; if it persists the endpoint serves "
        "other content than the lock was made from (check HF_ENDPOINT)."
    )
    assert wrong.fix == RETRY_SYNC


def test_run_time_refusals_name_their_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernlock.runtime import implicit, policy, records, runs
    from kernlock.runtime.loaders import kernels_0_19
    from kernlock.util import hfenv

    monkeypatch.setattr(policy, "active", lambda: True)
    monkeypatch.setattr(policy, "strict", lambda: True)
    monkeypatch.delenv("KERNLOCK_RECORD", raising=False)
    with pytest.raises(errors.ActivationError) as latest:
        kernels_0_19._latest_body(lambda: None, None, (), {})
    assert str(latest.value) == (
        "UNSTABLE_KERNELS_ALL_LATEST is set, which makes kernels load the newest version of a kernel over "
        "kernels.lock; unset it to load the locked build (or set KERNLOCK_MODE=warn to let it override the lock "
        "with a warning)."
    )
    assert (
        latest.value.fix
        == "unset it to load the locked build (or set KERNLOCK_MODE=warn to let it override the lock with a warning)"
    )

    view = types.SimpleNamespace(environments=("e1",), entry_for=lambda repo, environment: None)
    monkeypatch.setattr(policy, "current_lock", lambda: (view, "e1"))
    monkeypatch.setattr(implicit, "_mapped_layers", lambda repo: (("org/a", "Layer", "v1"), ["RMSNorm"]))
    with pytest.raises(errors.ActivationError) as mapped:
        implicit.refuse_unlocked(object())
    assert mapped.value.what == (
        "org/a (version=1) is loaded by transformers' default kernel mapping (layer RMSNorm), but kernels.lock does "
        "not lock it for e1"
    )
    assert mapped.value.fix is not None and mapped.value.fix.startswith("lock it with `kernlock add --implicit org/a`")

    monkeypatch.setattr(hfenv, "private", lambda path, create=False: False)
    monkeypatch.setattr(hfenv, "cache_root", lambda: tmp_path)
    with pytest.raises(errors.ActivationError) as shared:
        records.make_folder()
    assert shared.value.fix == "point KERNLOCK_CACHE at a folder of your own"

    two = [{"host": "h", "pid": pid, "settings": {"KERNLOCK_LOCKFILE": f"/p{pid}/kernels.lock"}} for pid in (1, 2)]
    monkeypatch.setattr(runs.activated, "settings", lambda: None)
    monkeypatch.setattr(runs, "owners", lambda site: two)
    monkeypatch.setattr(runs, "applies", lambda run: True)
    monkeypatch.delenv("KERNLOCK_LOCKFILE", raising=False)
    with pytest.raises(errors.ActivationError) as mixed:
        runs.activate(str(tmp_path))
    assert mixed.value.what == f"2 `kernlock run`s in progress bind {tmp_path} to different settings"
    assert mixed.value.fix == "run them one at a time, or from Python environments of their own"


def test_signature_refusals_name_their_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernlock.lock.model import Signature
    from kernlock.signing import bundle
    from kernlock.sync import signatures

    with pytest.raises(errors.SignedDigestError) as digest:
        bundle.check_digest("org/a@c v", b"[]", [], lambda file, algorithm: None, fix="pin another revision")
    assert str(digest.value) == "org/a@c v: the signed metadata.json is not a JSON object; pin another revision."
    assert digest.value.fix == "pin another revision"
    with pytest.raises(errors.SignatureError) as unsigned:
        bundle.unsigned_allowed("require", "org/a@c v", "sign it")
    assert unsigned.value.fix == "sign it" and str(unsigned.value).endswith("refuses unsigned builds; sign it.")

    check = signatures.SignatureCheck(tmp_path / "root.json", remember=False)
    monkeypatch.setattr(check, "_made", lambda: None)  # no sigstore: the files cannot be read before it is asked
    signed = Signature(
        signer="https://github.com/org/a/.github/workflows/build.yml@refs/heads/main",
        repository="org/a",
        issuer="https://token.actions.githubusercontent.com",
        log_index=1,
        integrated_time=1,
        bundle="sha256:" + "0" * 64,
    )
    variant: Any = types.SimpleNamespace(name="torch213-cxx11-cpu-x86_64-linux", signature=signed, files=())
    failed = check.failure(_entry(), variant, root=tmp_path)
    assert failed is not None and failed.fix == signatures.TRUST_FIX
    assert str(failed).startswith(f"org/a@{'c' * 12} torch213-cxx11-cpu-x86_64-linux: cannot read its signed files")


def test_add_from_and_environments_name_their_parts(tmp_path: Path) -> None:
    from kernlock.commands import adopt, reports

    (tmp_path / "model").mkdir()
    with pytest.raises(errors.ProjectError) as nolock:
        adopt.add_from(tmp_path, str(tmp_path / "model"))
    assert str(nolock.value) == (
        f"{tmp_path / 'model'} has no kernels.lock: a model folder carries one when a process kernlock activated "
        "saved it (docs/provenance.md)."
    )
    assert nolock.value.what == f"{tmp_path / 'model'} has no kernels.lock" and nolock.value.fix is None
    (tmp_path / "model" / "kernels.lock").write_text("<<<<<<< HEAD\n")
    with pytest.raises(errors.ProjectError) as damaged:
        adopt.add_from(tmp_path, str(tmp_path / "model"))
    assert damaged.value.why is not None and str(damaged.value).endswith(f": {damaged.value.why}.")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n\n[tool.kernlock.kernels]\n')
    with pytest.raises(errors.LockError) as none:
        reports.environments([], tmp_path)
    assert none.value.fix == "name some, e.g. `kernlock environments kernels-community/flash-attn2`"


def test_add_implicit_without_transformers_names_its_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernlock.commands import implicit

    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "p"\n\n[tool.kernlock]\nenvironments = ["torch213-cxx11-cpu-x86_64-linux"]\n\n'
        "[tool.kernlock.kernels]\n"
    )
    absent = types.SimpleNamespace(transformers=None, why="transformers is not installed", kernels=())
    monkeypatch.setattr(implicit.implicit, "read", lambda: absent)
    with pytest.raises(errors.ProjectError) as nomap:
        implicit.add_implicit(tmp_path, [])
    assert str(nomap.value) == (
        "transformers is not installed: `kernlock add --implicit` reads the kernel mapping of the transformers your "
        "training runs with; run it in that Python environment."
    )
    assert nomap.value.fix == "run it in that Python environment"


def test_an_unwritable_kernel_cache_names_its_fix(tmp_path: Path) -> None:
    import errno

    from kernlock.sync import fetch

    err = fetch.cache_error(tmp_path, OSError(errno.EIO, "Input/output error"))
    assert isinstance(err, errors.CacheError)
    assert str(err) == (
        f"cannot write to the kernel cache {tmp_path}: Input/output error; make it writable or point KERNELS_CACHE "
        "(or HF_HUB_CACHE) at a writable folder, then run `kernlock sync` again."
    )
    assert err.fix == (
        "make it writable or point KERNELS_CACHE (or HF_HUB_CACHE) at a writable folder, then run `kernlock sync` again"
    )
    assert isinstance(
        fetch.cache_error(tmp_path, OSError(errno.ENOSPC, "No space left on device")), errors.DiskFullError
    )


def test_pyproject_errors_name_their_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernlock.project import inputs, location

    (tmp_path / "bad.toml").write_text("[tool\n")
    with pytest.raises(errors.ProjectError) as invalid:
        inputs.read_document(tmp_path / "bad.toml")
    assert str(invalid.value).endswith("; fix the file and run the command again.")
    assert invalid.value.fix == "fix the file and run the command again"
    (tmp_path / "latin.toml").write_bytes(b"# caf\xe9\n")
    with pytest.raises(errors.ProjectError) as latin:
        inputs.read_document(tmp_path / "latin.toml")
    assert latin.value.fix == "save it as UTF-8 and run the command again"
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "p"\n\n[tool.kernlock.kernels]\n"org/a" = "v1"\n"ORG/a" = "v2"\n'
    )
    with pytest.raises(errors.ProjectError) as twice:
        inputs.load(tmp_path)
    assert str(twice.value).endswith('("org/a" and "ORG/a"; repo ids are not case-sensitive); keep one.')
    assert twice.value.fix == "keep one"
    monkeypatch.setattr(location, "find_root", lambda: None)
    with pytest.raises(errors.ProjectError) as nowhere:
        location.locate(None)
    assert nowhere.value.fix == (
        "run the command in your project, pass --project DIR, or create one with `kernlock add org/name`"
    )
