"""Small pieces with no better room: validated names, atomic writes, interrupts, wording, the HF cache env."""

__all__: list[str] = []
