"""What each command does, one job per module (kernlock.api names them); no parsing, no printing."""

__all__: list[str] = []
