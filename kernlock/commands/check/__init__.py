"""`kernlock check` (docs/check.md), one job per module: the check of this environment's locked builds and of one
lock (``command``), their numerics against the torch paths (``parity``), ``--speed`` (``speed``, ``timing``, the
training step in ``training`` and its ``--model``/``--batch`` in ``training_models``, ``--plot`` in
``speed_plot``, the comparison with recorded figures in ``regression``), what it found and ``--record``'s
kernels.check.toml (``report``), ``--upgrade`` (``upgrade``) and the process it starts for each side (``child``:
``python -m kernlock.commands.check.child``). Like every package ``__init__``, this one imports nothing."""

__all__: list[str] = []
