"""`kernlock check --speed`: how fast a loaded kernel is against the torch path it replaces (docs/check.md).

* An **attention kernel**: its ``flash_attn_func`` as transformers calls it without padding (query, key and value
  transposed to (batch, seqlen, heads, dim), causal), against transformers' own ``sdpa`` and ``eager`` attention
  functions on the same tensors (the paths ``attn_implementation`` otherwise takes), with multi-head (MHA) and
  grouped-query (GQA) attention at shapes that resemble training (:data:`ATTENTION_SHAPES`).
* A **layer kernel**: each layer whose reference is known, bound to the module it replaces (as ``kernelize`` runs
  it), against that module, at a training-sized hidden state (:data:`LAYER_SIZES`).
* The **training step** of one model with each attention implementation: :mod:`kernlock.commands.check.training`.

Each case reports the forward and the forward+backward time (median and spread, :mod:`kernlock.commands.check.timing`)
and peak memory (CUDA only). A path that raises (a dtype the kernel refuses, out of memory) is reported with its
error and no figure; speed is never a failure.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypedDict

from kernlock.commands.check import parity
from kernlock.commands.check.timing import Timing, measure, peak_memory

__all__ = [
    "ATTENTION_SHAPES",
    "LAYER_SIZES",
    "SEQLENS",
    "Base",
    "SpeedRow",
    "attention_speed",
    "layer_speed",
    "speed_dtypes",
]

#: device -> (batch, query heads, head dim, {case: key/value heads}); the sequence lengths come from SEQLENS.
ATTENTION_SHAPES: dict[str, tuple[int, int, int, dict[str, int]]] = {
    "cuda": (8, 32, 128, {"MHA": 32, "GQA": 8}),  # Qwen3-8B's attention: 32 query heads, 8 kv heads, dim 128
    "cpu": (2, 8, 64, {"MHA": 8, "GQA": 2}),
}
#: device -> the default sequence lengths (`--seqlen` replaces them).
SEQLENS: dict[str, tuple[int, ...]] = {"cuda": (1024, 4096), "cpu": (256,)}
#: device -> (batch, tokens, hidden, intermediate) of the layer cases.
LAYER_SIZES: dict[str, tuple[int, int, int, int]] = {"cuda": (8, 1024, 4096, 12288), "cpu": (2, 128, 256, 512)}


class Base(TypedDict):
    """The build a speed row measures."""

    kernel: str
    commit: str
    variant: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeedRow:
    """One path of one speed case (``path``: ``kernel``, ``sdpa``, ``eager`` or ``torch``), or of the training step
    (whose ``eager`` and ``sdpa`` rows name no build: ``kernel`` is empty)."""

    kernel: str
    commit: str
    variant: str
    case: str
    path: str
    forward: Timing | None = None
    total: Timing | None = None  # forward+backward; for a training step, the whole step
    peak: int | None = None  # bytes, CUDA only
    loss: float | None = None  # training step: the loss of the last step
    note: str = ""

    @property
    def training(self) -> bool:
        return self.case.startswith("training step")

    @property
    def label(self) -> str:
        """A training step's implementation: ``eager``, ``sdpa`` or the locked build, ``repo@commit`` (8 digits)."""
        return f"{self.kernel}@{self.commit[:8]}" if self.path == "kernel" else self.path

    def as_dict(self) -> dict[str, Any]:
        total = self.total.as_dict() if self.total else None
        return {
            "kernel": self.kernel,
            "commit": self.commit,
            "variant": self.variant,
            "case": self.case,
            "path": self.path,
            "forward": self.forward.as_dict() if self.forward else None,
            "forward-backward": None if self.training else total,
            "step": total if self.training else None,
            "peak-memory-bytes": self.peak,
            "loss": self.loss,
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SpeedRow:
        total = data.get("step") or data.get("forward-backward")
        return cls(
            kernel=data["kernel"],
            commit=data["commit"],
            variant=data["variant"],
            case=data["case"],
            path=data["path"],
            forward=Timing.from_dict(data["forward"]) if data.get("forward") else None,
            total=Timing.from_dict(total) if total else None,
            peak=data.get("peak-memory-bytes"),
            loss=data.get("loss"),
            note=data.get("note", ""),
        )


def speed_dtypes(device: str, chosen: list[str] | None) -> list[str]:
    """The dtypes speed is measured in: those asked for, else bfloat16 on CUDA (training's) and float32 on CPU."""
    return list(chosen) if chosen else (["bfloat16"] if device == "cuda" else ["float32"])


def _error(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}".splitlines()[0][:160]


def _compare(
    base: Base,
    case: str,
    device: str,
    paths: dict[str, Callable[..., Any]],
    inputs: tuple[Any, ...],
    grad_out: Any,
) -> list[SpeedRow]:
    """Time each of ``paths`` (a function of ``inputs``) forward and forward+backward, interleaved."""
    import torch

    def forward(fn: Callable[..., Any]) -> Callable[[], object]:
        return lambda: fn(*inputs)

    def total(fn: Callable[..., Any]) -> Callable[[], object]:
        return lambda: torch.autograd.grad(fn(*inputs), [t for t in inputs if t.requires_grad], grad_out)

    working: dict[str, Callable[..., Any]] = {}
    rows: list[SpeedRow] = []
    for name, fn in paths.items():
        try:
            total(fn)()
        except Exception as err:  # the path refuses the case (dtype, shape, memory): reported, not timed
            rows.append(SpeedRow(**base, case=case, path=name, note=_error(err)))
            if device == "cuda":
                torch.cuda.empty_cache()
            continue
        working[name] = fn
    forwards = measure({name: forward(fn) for name, fn in working.items()}, device)
    totals = measure({name: total(fn) for name, fn in working.items()}, device)
    measured = [
        SpeedRow(
            **base,
            case=case,
            path=name,
            forward=forwards[name],
            total=totals[name],
            peak=peak_memory(total(fn), device),
        )
        for name, fn in working.items()
    ]
    order = list(paths)
    return sorted([*measured, *rows], key=lambda row: order.index(row.path))


# -- attention ------------------------------------------------------------------------------------------------


class _AttentionModule:
    """What transformers' attention functions read of the attention layer calling them."""

    def __init__(self, groups: int) -> None:
        self.num_key_value_groups = groups
        self.is_causal = True
        self.training = True
        self.layer_idx = 0


def _attention_paths(module: ModuleType, groups: int, scaling: float, mask: Any) -> dict[str, Callable[..., Any]]:
    """kernel / sdpa / eager, each (query, key, value) in (batch, heads, seqlen, dim) -> (batch, seqlen, heads, dim),
    as transformers' attention interface calls them."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.models.llama.modeling_llama import eager_attention_forward

    layer: Any = _AttentionModule(groups)
    flash = module.flash_attn_func

    def kernel(q: Any, k: Any, v: Any) -> Any:
        return flash(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), softmax_scale=scaling, causal=True)

    def sdpa(q: Any, k: Any, v: Any) -> Any:
        return sdpa_attention_forward(layer, q, k, v, None, dropout=0.0, scaling=scaling, is_causal=True)[0]

    def eager(q: Any, k: Any, v: Any) -> Any:
        return eager_attention_forward(layer, q, k, v, mask, scaling=scaling, dropout=0.0)[0]

    return {"kernel": kernel, "sdpa": sdpa, "eager": eager}


def attention_speed(
    module: ModuleType, base: Base, device: str, dtypes: list[str], seqlens: list[int]
) -> list[SpeedRow]:
    """The kernel's attention against transformers' sdpa and eager paths, MHA and GQA, per sequence length."""
    import torch

    batch, heads, dim, shapes = ATTENTION_SHAPES[device]
    rows: list[SpeedRow] = []
    for dtype in dtypes:
        kind = getattr(torch, dtype)
        for seqlen in seqlens:
            causal = torch.full((seqlen, seqlen), torch.finfo(kind).min, device=device, dtype=kind).triu(1)
            mask = causal[None, None]  # the additive mask transformers builds for eager attention
            for shape, kv_heads in shapes.items():
                case = f"attention {shape} {dtype} b{batch} s{seqlen} h{heads}/{kv_heads} d{dim}"
                torch.manual_seed(0)

                inputs = tuple(
                    torch.randn(batch, n, seqlen, dim, device=device, dtype=kind).requires_grad_(True)
                    for n in (heads, kv_heads, kv_heads)
                )
                grad_out = torch.randn(batch, seqlen, heads, dim, device=device, dtype=kind)
                paths = _attention_paths(module, heads // kv_heads, 1 / math.sqrt(dim), mask)
                rows += _compare(base, case, device, paths, inputs, grad_out)
                del inputs, grad_out
    return rows


# -- layers ---------------------------------------------------------------------------------------------------


def _input_width(name: str, hidden: int, intermediate: int) -> int:
    """What the replaced module reads: the hidden state (norms), both halves of a gated MLP, or its activation."""
    if "Norm" in name:
        return hidden
    return 2 * intermediate if name.endswith("AndMul") else intermediate


def _reference(name: str, width: int) -> Any:
    if "Norm" in name:
        import torch
        from transformers.models.llama.modeling_llama import LlamaRMSNorm

        norm = LlamaRMSNorm(width)
        with torch.no_grad():
            norm.weight.copy_(1 + 0.1 * torch.randn(width))
        return norm
    return parity.REFERENCES[name]()


def layer_speed(module: ModuleType, base: Base, device: str, dtypes: list[str]) -> list[SpeedRow]:
    """Each known layer of ``module`` bound to the module it replaces, against that module."""
    import torch

    batch, tokens, hidden, intermediate = LAYER_SIZES[device]
    rows: list[SpeedRow] = []
    for name, cls in parity.layer_classes(module).items():
        if name not in parity.REFERENCES:
            continue
        width = _input_width(name, hidden, intermediate)
        for dtype in dtypes:
            kind = getattr(torch, dtype)
            torch.manual_seed(0)
            reference = _reference(name, width).to(device=device, dtype=kind)
            x = torch.randn(batch, tokens, width, device=device, dtype=kind).requires_grad_(True)
            grad_out = torch.randn_like(reference(x))
            paths = {"kernel": cls.forward.__get__(reference), "torch": reference.forward}
            case = f"layer {name} {dtype} {batch}x{tokens}x{width}"
            rows += _compare(base, case, device, paths, (x,), grad_out)
    return rows
