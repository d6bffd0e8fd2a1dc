"""The model `kernlock check --speed`'s training step trains (``--model``, ``--batch``; docs/check.md): a preset
(:data:`PRESETS`) or a Hub-style config folder (a ``config.json``, read by ``transformers.AutoConfig`` with
``local_files_only``), built by ``AutoModelForCausalLM.from_config`` with random, seeded weights: nothing is
downloaded. A bad choice is a one-line :class:`~kernlock.errors.ProjectError` naming the fix, before any timing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernlock.errors import ProjectError

__all__ = ["DEFAULTS", "PRESETS", "Setup", "TrainedModel", "choose"]

#: name -> (the transformers config class, its arguments).
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "tiny": (  # the CPU's default: seconds per step
        "LlamaConfig",
        {
            "vocab_size": 256,
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 32,
        },
    ),
    "small": (  # CUDA's default: a small Llama with grouped-query attention
        "LlamaConfig",
        {
            "vocab_size": 32000,
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "num_hidden_layers": 4,
            "num_attention_heads": 16,
            "num_key_value_heads": 4,
            "head_dim": 128,
        },
    ),
    "qwen3-8b-8layers": (  # Qwen3-8B's config (TRL's comparison) with 8 of its 36 layers
        "Qwen3Config",
        {
            "vocab_size": 151936,
            "hidden_size": 4096,
            "intermediate_size": 12288,
            "num_hidden_layers": 8,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "max_position_embeddings": 40960,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        },
    ),
}
#: device -> (the preset trained without --model, the batch without --batch).
DEFAULTS: dict[str, tuple[str, int]] = {"cuda": ("small", 8), "cpu": ("tiny", 2)}


@dataclass(frozen=True, slots=True, kw_only=True)
class Setup:
    """What one training step comparison trained: the model as named, its shape, the batch, seqlen and dtype."""

    model: str  # the preset, or the config folder as given
    architecture: str  # ``llama 2 layers h4/2 d32``
    batch: int
    seqlen: int
    dtype: str

    @property
    def case(self) -> str:
        """The speed rows' case: ``training step llama 2 layers h4/2 d32 float32 b2 s256``."""
        return f"training step {self.architecture} {self.dtype} b{self.batch} s{self.seqlen}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "architecture": self.architecture,
            "batch": self.batch,
            "seqlen": self.seqlen,
            "dtype": self.dtype,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Setup:
        return cls(**{key: data[key] for key in ("model", "architecture", "batch", "seqlen", "dtype")})


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainedModel:
    """The chosen model's name and transformers config, and the batch it trains on."""

    name: str
    config: Any
    batch: int

    def setup(self, seqlen: int, dtype: str) -> Setup:
        return Setup(
            model=self.name, architecture=_architecture(self.config), batch=self.batch, seqlen=seqlen, dtype=dtype
        )

    def build(self, device: str, dtype: str) -> Any:
        """A model of this config on ``device`` in ``dtype``, its weights random (the caller seeds)."""
        import torch
        import transformers

        auto: Any = transformers.AutoModelForCausalLM
        with torch.device(device):
            return auto.from_config(self.config, dtype=getattr(torch, dtype))


def _architecture(config: Any) -> str:
    """``llama 2 layers h4/2 d32``: the type, layers, query/key-value heads and head dim of ``config``."""
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    return f"{config.model_type} {config.num_hidden_layers} layers h{heads}/{kv_heads} d{head_dim}"


def choose(spec: str | None, batch: int | None, device: str) -> TrainedModel:
    """``--model`` (None: this device's default) and ``--batch`` (None: this device's) as a model to train."""
    preset, default_batch = DEFAULTS[device]
    if batch is not None and batch < 1:
        raise ProjectError(
            f"--batch {batch}: a training step needs at least one sequence",
            fix=f"give a positive number (default here: {default_batch})",
        )
    name = preset if spec is None else spec
    if name in PRESETS:
        import transformers

        kind, arguments = PRESETS[name]
        config = getattr(transformers, kind)(**arguments)
    else:
        config = _read_folder(name)
    return TrainedModel(name=name, config=config, batch=default_batch if batch is None else batch)


def _read_folder(spec: str) -> Any:
    """The config of a Hub-style folder, which must describe a causal language model transformers can build."""
    import transformers

    folder = Path(spec)
    presets = ", ".join(PRESETS)
    if not folder.is_dir():
        raise ProjectError(
            f"--model {spec}: not a preset ({presets}) nor a folder",
            fix="give one of those presets or a folder holding a model's config.json (from the Hub: `hf download "
            "REPO config.json --local-dir DIR`)",
        )
    if not (folder / "config.json").is_file():
        raise ProjectError(
            f"--model {spec}: the folder has no config.json",
            fix=f"give a folder holding a model's config.json (`hf download REPO config.json --local-dir DIR`) or a "
            f"preset ({presets})",
        )
    auto: Any = transformers.AutoConfig
    try:
        config = auto.from_pretrained(str(folder), local_files_only=True)
    except Exception as err:  # an unknown model type, remote code, a config.json that is not JSON
        why = f"{type(err).__name__}: {err}".splitlines()[0][:200]
        raise ProjectError(f"--model {spec}: its config.json does not read as a transformers config ({why}).") from err
    mapping: Any = transformers.MODEL_FOR_CAUSAL_LM_MAPPING
    if type(config) not in mapping:
        raise ProjectError(
            f"--model {spec}: a {config.model_type} config is not a causal language model (AutoModelForCausalLM "
            "builds none from it)",
            fix=f"give a decoder's config, such as Llama's or Qwen3's, or a preset ({presets})",
        )
    return config
