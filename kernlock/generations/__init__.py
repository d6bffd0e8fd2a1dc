"""The kernels loader generations kernlock supports: each one's id (``kernels-0.17``), kernels range and tested
versions, generated from tests/compat/matrix.toml; pure data, importable by every package above ``variants``."""

__all__: list[str] = []
