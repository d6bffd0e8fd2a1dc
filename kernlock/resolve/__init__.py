"""Requirements x environments -> lock entries: the resolver, eligibility, outdated, migration."""

__all__: list[str] = []
