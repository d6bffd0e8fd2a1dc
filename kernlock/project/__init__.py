"""The project's inputs: pyproject.toml's [tool.kernlock] table, read, edited, and its `when` conditions."""

__all__: list[str] = []
