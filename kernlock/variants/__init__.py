"""The Hub's build-variant grammar, its value types, and the kernels loader's selection rules."""

__all__ = ["RULE", "RULES"]

#: Every loader rule kernlock follows, oldest first (:mod:`kernlock.variants.rule`): a lock's ``variant-rule`` names
#: one, and a lock naming another was made by a newer kernlock. Here, not in :mod:`kernlock.variants.grammar`, so
#: that the lock model names them without importing the grammar.
RULES = ("kernels-0.17", "kernels-0.18", "kernels-0.19")
#: The rule of the newest loader generation: a new lock's ``variant-rule``, and the rule of an environment that does
#: not declare its ``kernels``.
RULE = RULES[-1]
