"""`kernlock check --speed`'s training-step case: a small Llama-shaped model (a few layers, grouped-query attention)
trained a few steps with each attention implementation — the locked kernel, ``sdpa`` and ``eager`` — the
comparison the TRL "Kernels Hub" page makes (latency per training step and peak memory), on this machine.

Every implementation starts from the same weights and trains on the same batch with AdamW; the figures are the
median step time (forward, backward, optimizer step, synchronized) over :data:`STEPS` steps after :data:`WARMUP`
warm-up steps, the peak memory of those steps (CUDA only: weights, gradients, optimizer state and activations) and
the loss of the last step (the same data and weights: a correct kernel's loss tracks sdpa's). The implementations
run one after another, each model alone in memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernlock.commands.speed import Base, SpeedRow
from kernlock.commands.timing import measure, read_peak, reset_peak, synchronize

__all__ = ["MODELS", "STEPS", "WARMUP", "Model", "training_speed"]

WARMUP = 2
STEPS = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class Model:
    """The Llama trained per device, and its batch (the sequence length is the first `--seqlen`)."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    batch: int

    def describe(self, seqlen: int, dtype: str) -> str:
        head_dim = self.hidden // self.heads
        return (
            f"training step llama {self.layers} layers h{self.heads}/{self.kv_heads} d{head_dim} {dtype} "
            f"b{self.batch} s{seqlen}"
        )


MODELS = {
    "cuda": Model(hidden=2048, intermediate=5632, layers=4, heads=16, kv_heads=4, vocab=32000, batch=8),
    "cpu": Model(hidden=128, intermediate=256, layers=2, heads=4, kv_heads=2, vocab=256, batch=2),
}


def _config(model: Model, seqlen: int) -> Any:
    import transformers

    return transformers.LlamaConfig(
        vocab_size=model.vocab,
        hidden_size=model.hidden,
        intermediate_size=model.intermediate,
        num_hidden_layers=model.layers,
        num_attention_heads=model.heads,
        num_key_value_heads=model.kv_heads,
        head_dim=model.hidden // model.heads,
        max_position_embeddings=seqlen,
    )


def training_speed(repo: str, base: Base, device: str, dtype: str, seqlen: int) -> list[SpeedRow]:
    """One row per implementation (``kernel`` is ``attn_implementation=repo``, the locked build)."""
    import torch
    import transformers

    model = MODELS[device]
    case = model.describe(seqlen, dtype)
    config = _config(model, seqlen)
    torch.manual_seed(0)
    llama: Any = transformers.LlamaForCausalLM
    weights = llama(config).state_dict()
    batch = torch.randint(0, model.vocab, (model.batch, seqlen), device=device)
    rows = []
    logs: Any = transformers.logging
    verbosity = logs.get_verbosity()
    logs.set_verbosity_error()  # the flash path's notes on each load are not the check's output
    try:
        for path, implementation in (("kernel", repo), ("sdpa", "sdpa"), ("eager", "eager")):
            rows.append(_train(llama, config, weights, batch, device, dtype, path, implementation, base, case))
    finally:
        logs.set_verbosity(verbosity)
    return rows


def _train(
    llama: Any,
    config: Any,
    weights: Any,
    batch: Any,
    device: str,
    dtype: str,
    path: str,
    implementation: str,
    base: Base,
    case: str,
) -> SpeedRow:
    """One implementation's row: its own model, alone in memory, trained WARMUP + STEPS steps."""
    import torch

    net = optimizer = None
    try:
        net = llama(config).to(device=device, dtype=getattr(torch, dtype))
        net.load_state_dict(weights)
        net.set_attn_implementation(implementation)
        net.train()
        optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
        losses: list[Any] = []

        def step(net: Any = net, optimizer: Any = optimizer) -> None:
            loss = net(input_ids=batch, labels=batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.detach())

        reset_peak(device)
        timing = measure({path: step}, device, warmup=WARMUP, repeats=STEPS)[path]
        synchronize(device)
        return SpeedRow(**base, case=case, path=path, total=timing, peak=read_peak(device), loss=float(losses[-1]))
    except Exception as err:  # the implementation refuses the model (dtype, memory): reported, not timed
        return SpeedRow(**base, case=case, path=path, note=f"{type(err).__name__}: {err}".splitlines()[0][:160])
    finally:
        del net, optimizer
        if device == "cuda":
            torch.cuda.empty_cache()
