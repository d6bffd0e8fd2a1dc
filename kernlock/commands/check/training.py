"""`kernlock check --speed`'s training step: one model (:mod:`kernlock.commands.check.training_models`: a preset or the
user's config folder) trained a few steps with each attention implementation — ``eager``, ``sdpa`` and every
locked attention kernel — the comparison the TRL "Kernels Hub" page makes (time per training step and peak memory),
on this machine.

Every implementation starts from the same weights and trains on the same batch with AdamW; the figures are the
median step time (forward, backward, optimizer step, synchronized) over :data:`STEPS` steps after :data:`WARMUP`
warm-up steps, the peak memory of those steps (CUDA only: weights, gradients, optimizer state and activations) and
the loss of the last step (the same data and weights: a correct kernel's loss tracks sdpa's). The implementations
run one after another, each model alone in the device's memory (the shared weights wait on the CPU).
"""

from __future__ import annotations

from typing import Any

from kernlock.commands.check.speed import Base, SpeedRow
from kernlock.commands.check.timing import measure, read_peak, reset_peak, synchronize
from kernlock.commands.check.training_models import Setup, TrainedModel

__all__ = ["REFERENCES", "STEPS", "WARMUP", "training_speed"]

WARMUP = 2
STEPS = 8
#: The implementations every comparison has, before the locked kernels (their rows name no build).
REFERENCES = ("eager", "sdpa")
_NO_BUILD: Base = {"kernel": "", "commit": "", "variant": ""}


def training_speed(kernels: list[Base], model: TrainedModel, setup: Setup, device: str) -> list[SpeedRow]:
    """One row per implementation: eager, sdpa, then each of ``kernels`` (``attn_implementation`` = its repo,
    loaded at its locked commit)."""
    import torch
    import transformers

    torch.manual_seed(0)
    reference = model.build(device, setup.dtype)
    weights = {name: tensor.detach().to("cpu") for name, tensor in reference.state_dict().items()}
    del reference
    batch = torch.randint(0, int(model.config.vocab_size), (setup.batch, setup.seqlen), device=device)
    paths: list[tuple[Base, str, str]] = [(_NO_BUILD, name, name) for name in REFERENCES]
    paths += [(base, "kernel", base["kernel"]) for base in kernels]
    rows = []
    logs: Any = transformers.logging
    verbosity = logs.get_verbosity()
    logs.set_verbosity_error()  # the flash path's notes on each load are not the check's output
    try:
        for base, path, implementation in paths:
            rows.append(_train(model, weights, batch, device, setup, base, path, implementation))
    finally:
        logs.set_verbosity(verbosity)
    return rows


def _train(
    model: TrainedModel,
    weights: Any,
    batch: Any,
    device: str,
    setup: Setup,
    base: Base,
    path: str,
    implementation: str,
) -> SpeedRow:
    """One implementation's row: its own model, alone in memory, trained WARMUP + STEPS steps."""
    import torch

    net = optimizer = None
    try:
        net = model.build(device, setup.dtype)
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
        peak = read_peak(device)
        return SpeedRow(**base, case=setup.case, path=path, total=timing, peak=peak, loss=float(losses[-1]))
    except Exception as err:  # the implementation refuses the model (dtype, memory): reported, not timed
        note = f"{type(err).__name__}: {err}".splitlines()[0][:160]
        return SpeedRow(**base, case=setup.case, path=path, note=note)
    finally:
        del net, optimizer
        if device == "cuda":
            torch.cuda.empty_cache()
