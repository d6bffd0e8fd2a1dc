"""Air-gapped sites: bundles of locked files and the read-only Hub mirror."""

__all__: list[str] = []
