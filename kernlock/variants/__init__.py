"""The Hub's build-variant grammar, its value types, and the kernels loader's selection rule."""

__all__: list[str] = []
