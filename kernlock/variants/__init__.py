"""The Hub's build-variant grammar, its value types, and the kernels loader's selection rule."""

__all__ = ["RULE"]

#: The loader generation whose selection rule :func:`kernlock.variants.rule.accepted_variants` follows (here, not in
#: :mod:`kernlock.variants.grammar`, so that the lock model names it without importing the grammar).
RULE = "kernels-0.17"
