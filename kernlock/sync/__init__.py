"""Lock -> verified files in the cache: the cache layout, fetching, checking, verifying."""

__all__: list[str] = []
