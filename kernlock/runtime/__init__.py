"""Run-time activation: its state, the policy every Hub kernel load follows, the loader hooks."""

__all__: list[str] = []
