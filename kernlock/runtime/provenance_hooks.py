"""Where transformers saves and loads model folders: the hooks of :mod:`kernlock.runtime.provenance`.

Installed with the other transformers hooks (when ``transformers.modeling_utils`` is imported:
:mod:`kernlock.runtime.transformers_hooks`) and when ``transformers.trainer`` is
(:data:`kernlock.runtime.activation.WATCHED`), never before:

* ``PreTrainedModel.save_pretrained`` and ``Trainer._save`` (every checkpoint, ``save_model``, the folder
  ``Trainer.push_to_hub`` uploads; also for a PEFT model) write ``kernels.lock`` into the folder;
* ``PreTrainedModel.from_pretrained`` (a local folder) and ``Trainer.train(resume_from_checkpoint=...)`` compare the
  folder's ``kernels.lock`` with the lock in force, before anything is loaded or trained;
* the model cards transformers writes get a "Kernels" section: ``Trainer.create_model_card`` (and a subclass's own,
  TRL's), and the card ``PreTrainedModel.push_to_hub`` uploads (``PushToHubMixin._upload_modified_files``);
* ``Trainer._push_from_checkpoint`` copies the checkpoint's kernels.lock along with the weights it copies.

Each wrapper calls the original with every argument unchanged; a hook that fails says so once and lets the run go on
(only a strict-mode refusal of other builds stops it). A missing method is skipped: the others still work.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["CARD_BEGIN", "CARD_END", "add_card_section", "install_models", "install_ray_train", "install_trainer"]

_MARK = "__kernlock_provenance__"
CARD_BEGIN = "<!-- kernlock:kernels -->"
CARD_END = "<!-- /kernlock:kernels -->"


def _argument(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], name: str, default: Any = None) -> Any:
    """The argument ``name`` of a call of ``fn`` (by its own signature), else ``default``."""
    try:
        bound = inspect.signature(fn).bind_partial(*args, **kwargs)
    except (TypeError, ValueError):
        return default
    return bound.arguments.get(name, default)


def _quietly(what: str, action: Any, *args: Any) -> Any:
    """Run ``action``; the strict-mode refusal of other builds goes through, any other failure is one warning (the
    run goes on)."""
    from kernlock.errors import OtherBuildsError
    from kernlock.runtime import policy

    try:
        return action(*args)
    except OtherBuildsError:
        raise
    except Exception as err:
        message = f"could not {what}: {type(err).__name__}: {err}"
        try:
            policy.warn_once(f"provenance:{what}", message)
        except Exception:  # the activation itself is broken: still one line, and the run goes on
            logging.getLogger("kernlock").warning("kernlock: %s", message)
        return None


def _wrap(owner: type, name: str, make: Any) -> None:
    """Replace ``owner.name`` (defined on ``owner`` or inherited) with ``make(original)``, once."""
    original = getattr(owner, name, None)
    if original is None or getattr(original, _MARK, False):
        return
    wrapper = make(original)
    functools.update_wrapper(wrapper, original)
    setattr(wrapper, _MARK, True)
    setattr(owner, name, wrapper)


def _active() -> bool:
    from kernlock.runtime import state

    return state.settings() is not None


def _record(folder: Any) -> None:
    from kernlock.runtime import provenance

    if isinstance(folder, (str, os.PathLike)) and _active():
        _quietly(f"write kernels.lock into {folder}", provenance.record, folder)


def _compare(folder: Any, subfolder: Any = None) -> None:
    from kernlock.runtime import provenance

    if not isinstance(folder, (str, os.PathLike)) or not _active() or not os.path.isdir(folder):
        return
    where = Path(folder, subfolder) if isinstance(subfolder, str) and subfolder else Path(folder)
    _quietly(f"compare {where}/kernels.lock", provenance.compare, where)


# -- models -----------------------------------------------------------------------------------------------------


def install_models(modeling_utils: ModuleType) -> None:
    """Hook ``PreTrainedModel``'s save and load, and the card ``push_to_hub`` uploads."""
    model = getattr(modeling_utils, "PreTrainedModel", None)
    if model is None:
        return
    _wrap(model, "save_pretrained", _save_pretrained)
    loader = model.__dict__.get("from_pretrained")
    if isinstance(loader, classmethod) and not getattr(loader.__func__, _MARK, False):
        model.from_pretrained = classmethod(_from_pretrained(loader.__func__))
    for owner in model.__mro__:  # transformers' PushToHubMixin
        if "_upload_modified_files" in owner.__dict__:
            _wrap(owner, "_upload_modified_files", _upload_with_card(model))
            break


def _save_pretrained(original: Any) -> Any:
    def save_pretrained(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if _active() and _argument(original, (self, *args), kwargs, "is_main_process", True):
            _record(_argument(original, (self, *args), kwargs, "save_directory"))
        return result

    return save_pretrained


def _from_pretrained(original: Any) -> Any:
    def from_pretrained(cls: Any, *args: Any, **kwargs: Any) -> Any:
        if _active():
            folder = _argument(original, (cls, *args), kwargs, "pretrained_model_name_or_path")
            _compare(folder, kwargs.get("subfolder"))
        return original(cls, *args, **kwargs)

    functools.update_wrapper(from_pretrained, original)
    setattr(from_pretrained, _MARK, True)
    return from_pretrained


def _upload_with_card(model: type) -> Any:
    def make(original: Any) -> Any:
        def _upload_modified_files(self: Any, *args: Any, **kwargs: Any) -> Any:
            folder = _argument(original, (self, *args), kwargs, "working_dir")
            if isinstance(self, model) and isinstance(folder, (str, os.PathLike)) and _active():
                _quietly("add the Kernels section to the model card", add_card_section, Path(folder))
            return original(self, *args, **kwargs)

        return _upload_modified_files

    return make


# -- Ray Train --------------------------------------------------------------------------------------------------


def install_ray_train(train: ModuleType) -> None:
    """Hook ``ray.train.Checkpoint.from_directory``: the folder a worker reports as its checkpoint gets the
    kernels.lock of the builds that worker loaded before Ray persists it (docs/ray.md)."""
    checkpoint = getattr(train, "Checkpoint", None)
    original = getattr(getattr(checkpoint, "from_directory", None), "__func__", None)
    if not isinstance(checkpoint, type) or original is None or getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def from_directory(cls: type, path: Any) -> Any:
        _record(path)
        return original(cls, path)

    setattr(from_directory, _MARK, True)
    checkpoint.from_directory = classmethod(from_directory)  # type: ignore[attr-defined]  # Ray's class


# -- Trainer ----------------------------------------------------------------------------------------------------


def install_trainer(trainer_module: ModuleType) -> None:
    """Hook ``Trainer``: its saves, a resume, its model card and the copies of a checkpoint push."""
    trainer = getattr(trainer_module, "Trainer", None)
    if trainer is None:
        return
    _wrap(trainer, "_save", _trainer_save)
    _wrap(trainer, "train", _train)
    _wrap(trainer, "push_to_hub", _push_to_hub)
    _wrap(trainer, "_push_from_checkpoint", _push_from_checkpoint)
    _card_hook(trainer)


def _trainer_save(original: Any) -> Any:
    def _save(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if _active():
            folder = _argument(original, (self, *args), kwargs, "output_dir") or getattr(self.args, "output_dir", None)
            _record(folder)
        return result

    return _save


def _train(original: Any) -> Any:
    def train(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _active():
            _card_hook(type(self))
            resume = _argument(original, (self, *args), kwargs, "resume_from_checkpoint")
            if resume is True:
                resume = _quietly("find the last checkpoint", _last_checkpoint, self)
            _compare(resume)
        return original(self, *args, **kwargs)

    return train


def _last_checkpoint(trainer: Any) -> str | None:
    from transformers import trainer_utils

    folder = getattr(trainer.args, "output_dir", None)
    if not isinstance(folder, str) or not os.path.isdir(folder):
        return None
    found: str | None = trainer_utils.get_last_checkpoint(folder)  # type: ignore[no-untyped-call]
    return found


def _push_to_hub(original: Any) -> Any:
    def push_to_hub(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _active():
            _card_hook(type(self))
        return original(self, *args, **kwargs)

    return push_to_hub


def _push_from_checkpoint(original: Any) -> Any:
    def _push_from_checkpoint(self: Any, *args: Any, **kwargs: Any) -> Any:
        checkpoint = _argument(original, (self, *args), kwargs, "checkpoint_folder")
        output = getattr(self.args, "output_dir", None)
        if _active() and isinstance(checkpoint, (str, os.PathLike)) and isinstance(output, str):
            _quietly(f"copy kernels.lock from {checkpoint}", _copy_provenance, Path(checkpoint), Path(output))
        return original(self, *args, **kwargs)

    return _push_from_checkpoint


def _copy_provenance(checkpoint: Path, output: Path) -> None:
    """The checkpoint's kernels.lock (and verdicts) beside the weights Trainer copies into ``output`` to push."""
    from kernlock.lock import check_results
    from kernlock.runtime import provenance

    for name in (provenance.FILE_NAME, check_results.FILE_NAME):
        source = checkpoint / name
        if source.is_file() and not source.is_symlink() and provenance.refusal(output) is None:
            shutil.copyfile(source, output / name)


def _card_hook(trainer: type) -> None:
    """Wrap the ``create_model_card`` that ``trainer`` uses (``Trainer``'s, or a subclass's own, as TRL's)."""
    for owner in trainer.__mro__:
        if "create_model_card" in owner.__dict__:
            _wrap(owner, "create_model_card", _create_model_card)
            return


def _create_model_card(original: Any) -> Any:
    def create_model_card(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        output = getattr(getattr(self, "args", None), "output_dir", None)
        zero = getattr(self, "is_world_process_zero", lambda: True)
        if _active() and isinstance(output, str) and zero():
            _quietly("add the Kernels section to the model card", add_card_section, Path(output))
        return result

    return create_model_card


def add_card_section(folder: Path) -> None:
    """Add (or replace) the "Kernels" section of ``folder/README.md``: the locked builds this process loaded."""
    from kernlock.runtime import provenance

    readme = folder / "README.md"
    if not readme.is_file() or readme.is_symlink():
        return
    section = provenance.card_section()
    if section is None:
        return
    text = readme.read_text(encoding="utf-8")
    if CARD_BEGIN in text and CARD_END in text:
        head, _, rest = text.partition(CARD_BEGIN)
        text = head.rstrip("\n") + "\n\n" + rest.partition(CARD_END)[2].lstrip("\n")
    block = f"{CARD_BEGIN}\n{section}{CARD_END}\n"
    from kernlock.util.atomic import write_text_atomic

    write_text_atomic(readme, text.rstrip("\n") + "\n\n" + block)
