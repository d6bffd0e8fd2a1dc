"""`kernlock check`'s numerics: a loaded kernel against the torch path it replaces, forward and backward.

* An **attention kernel** (a module transformers can use as ``attn_implementation``: it has
  ``flash_attn_varlen_func``): a tiny Llama built in code (no download), causal, once with multi-head (MHA) and
  once with grouped-query attention (GQA); the logits and every parameter's gradient of one loss, compared with
  the same model (same weights, same batch) under ``attn_implementation="sdpa"``.
* A **layer kernel** (its ``layers`` module holds the ``nn.Module`` classes ``kernelize`` maps): each layer whose
  reference module is known (:data:`REFERENCES`) runs as ``kernelize`` runs it (its ``forward`` bound to the
  replaced module, reading that module's weights) on random inputs; outputs and input gradients are compared.
* Anything else is "not checked", never passed.

A comparison passes when ``max |kernel - reference| <= atol + rtol * max |reference|``, per dtype
(:data:`TOLERANCES`, also in docs/check.md). Imports torch and transformers: only `kernlock check` uses it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

__all__ = ["REFERENCES", "TOLERANCES", "Case", "attention_cases", "kinds", "layer_cases", "layer_classes", "tolerance"]

#: dtype -> (atol, rtol).
TOLERANCES: dict[str, tuple[float, float]] = {
    "float32": (1e-5, 1e-4),
    "bfloat16": (1e-2, 5e-2),
    "float16": (1e-3, 1e-2),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """One comparison: its name, the largest absolute difference, the tolerance it had to meet (None and the
    reason in ``note`` when it could not run)."""

    name: str
    error: float | None
    tolerance: float | None
    note: str = ""

    @property
    def passed(self) -> bool:
        return self.error is not None and self.tolerance is not None and self.error <= self.tolerance


def tolerance(dtype: str, reference_max: float) -> float:
    atol, rtol = TOLERANCES[dtype]
    return atol + rtol * reference_max


def kinds(module: ModuleType) -> list[str]:
    """What can be checked of a loaded kernel: ``attention``, ``layers``, both or neither."""
    found = []
    if callable(getattr(module, "flash_attn_varlen_func", None)):
        found.append("attention")
    if layer_classes(module):
        found.append("layers")
    return found


def _compare(pairs: Iterator[tuple[Any, Any]], dtype: str) -> tuple[float, float]:
    """The worst (error, tolerance) over tensor pairs (kernel, reference): the pair nearest to failing."""
    worst: tuple[float, float] | None = None
    for ours, theirs in pairs:
        ours, theirs = ours.detach(), theirs.detach()
        error = float((ours.float() - theirs.float()).abs().max())
        limit = tolerance(dtype, float(theirs.float().abs().max()))
        if worst is None or error / limit > worst[0] / worst[1] or error != error:
            worst = (error, limit)
    assert worst is not None
    return worst


# -- attention ------------------------------------------------------------------------------------------------

_SHAPES = {"MHA": 4, "GQA": 2}  # key/value heads for 4 query heads


def attention_cases(repo: str, device: str, dtypes: list[str]) -> list[Case]:
    """The tiny Llama through ``attn_implementation=repo`` (the loaded, locked build) vs SDPA."""
    cases = []
    for shape, kv_heads in _SHAPES.items():
        for dtype in dtypes:
            name = f"attention {shape} {dtype}"
            try:
                (logits, grads) = _llama_case(repo, device, dtype, kv_heads)
            except Exception as err:  # the kernel refused the case: a failure, with its reason
                note = f"{type(err).__name__}: {err}".splitlines()[0][:160]
                cases += [Case(name=f"{name} logits", error=None, tolerance=None, note=note)]
                continue
            cases.append(Case(name=f"{name} logits", error=logits[0], tolerance=logits[1]))
            cases.append(Case(name=f"{name} gradients", error=grads[0], tolerance=grads[1]))
    return cases


def _llama_case(repo: str, device: str, dtype: str, kv_heads: int) -> tuple[tuple[float, float], tuple[float, float]]:
    import torch
    import transformers

    llama: Any = transformers.LlamaForCausalLM
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        max_position_embeddings=64,
    )
    reference = llama(copy.deepcopy(config)).to(device=device, dtype=getattr(torch, dtype))
    reference.set_attn_implementation("sdpa")
    model = llama(copy.deepcopy(config)).to(device=device, dtype=getattr(torch, dtype))
    model.load_state_dict(reference.state_dict())
    model.set_attn_implementation(repo)
    model.train()
    reference.train()
    batch = torch.randint(0, config.vocab_size, (2, 16), device=device)
    ours, theirs = model(input_ids=batch, labels=batch), reference(input_ids=batch, labels=batch)
    ours.loss.backward()
    theirs.loss.backward()
    logits = _compare(iter([(ours.logits, theirs.logits)]), dtype)
    pairs = ((a.grad, b.grad) for a, b in zip(model.parameters(), reference.parameters(), strict=True))
    return logits, _compare(pairs, dtype)


# -- layers ---------------------------------------------------------------------------------------------------


def layer_classes(module: ModuleType) -> dict[str, Any]:
    layers = getattr(module, "layers", None)
    if not isinstance(layers, ModuleType):
        return {}
    try:
        from torch import nn
    except ImportError:
        return {}
    return {
        name: cls
        for name, cls in sorted(vars(layers).items())
        if isinstance(cls, type) and issubclass(cls, nn.Module) and cls.__module__ == layers.__name__
    }


def _gated(kind: str) -> Callable[[Any], Any]:
    def reference(x: Any) -> Any:
        import torch.nn.functional as F

        d = x.shape[-1] // 2
        a, b = x[..., :d], x[..., d:]
        if kind == "silu":
            return F.silu(a) * b
        return F.gelu(a, approximate="tanh" if kind == "tanh" else "none") * b

    return reference


def _function_module(fn: Callable[[Any], Any]) -> Any:
    from torch import nn

    class Reference(nn.Module):
        def forward(self, x: Any) -> Any:
            return fn(x)

    return Reference()


def _rms_norm() -> Any:
    import torch
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    norm = LlamaRMSNorm(64)
    with torch.no_grad():
        norm.weight.copy_(1 + 0.1 * torch.randn(64))
    return norm


def _activation(name: str) -> Callable[[], Any]:
    def make() -> Any:
        from transformers import activations

        return getattr(activations, name)()

    return make


#: Layer class name (as a kernel's ``layers`` module names it) -> the module it replaces, built fresh.
REFERENCES: dict[str, Callable[[], Any]] = {
    "RMSNorm": _rms_norm,
    "LlamaRMSNorm": _rms_norm,
    "SiluAndMul": lambda: _function_module(_gated("silu")),
    "GeluAndMul": lambda: _function_module(_gated("gelu")),
    "GeluTanhAndMul": lambda: _function_module(_gated("tanh")),
    "FastGELU": _activation("FastGELUActivation"),
    "NewGELU": _activation("NewGELUActivation"),
    "QuickGELU": _activation("QuickGELUActivation"),
}


def layer_cases(module: ModuleType, device: str, dtypes: list[str]) -> tuple[list[Case], list[str]]:
    """Each known layer of ``module`` vs the module it replaces; and the layers with no known reference."""
    import torch

    cases: list[Case] = []
    unknown: list[str] = []
    for name, cls in layer_classes(module).items():
        make = REFERENCES.get(name)
        if make is None:
            unknown.append(name)
            continue
        for dtype in dtypes:
            label = f"layer {name} {dtype}"
            torch.manual_seed(0)
            reference = make().to(device=device, dtype=getattr(torch, dtype))
            x = torch.randn(4, 16, 64, device=device, dtype=getattr(torch, dtype))
            grad_out = None
            results = []
            try:
                for forward in (reference.forward, cls.forward.__get__(reference)):
                    leaf = x.clone().requires_grad_(True)
                    out = forward(leaf)
                    if grad_out is None:
                        grad_out = torch.randn_like(out)
                    out.backward(grad_out)
                    results.append((out.detach(), leaf.grad))
            except Exception as err:
                note = f"{type(err).__name__}: {err}".splitlines()[0][:160]
                cases.append(Case(name=f"{label} outputs", error=None, tolerance=None, note=note))
                continue
            (ref_out, ref_grad), (out, grad) = results
            error, limit = _compare(iter([(out, ref_out)]), dtype)
            cases.append(Case(name=f"{label} outputs", error=error, tolerance=limit))
            if grad is None or ref_grad is None:
                cases.append(Case(name=f"{label} input gradients", error=None, tolerance=None, note="no gradient"))
            else:
                error, limit = _compare(iter([(grad, ref_grad)]), dtype)
                cases.append(Case(name=f"{label} input gradients", error=error, tolerance=limit))
    return cases, unknown
