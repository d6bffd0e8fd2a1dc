"""Environments: the machines a lock targets, their facts, and this machine as it is."""

__all__: list[str] = []
