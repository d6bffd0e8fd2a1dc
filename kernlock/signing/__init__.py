"""Signed builds: a sigstore bundle verified offline, and every locked build's signer checked at lock time."""

__all__: list[str] = []
