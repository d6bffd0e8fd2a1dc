"""kernlock's version (pyproject.toml says the same; a test keeps them equal)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
