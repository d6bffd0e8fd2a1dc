"""kernels.lock: the model, its document (write), its file (read), the run-time index, changes, exports."""

__all__: list[str] = []
