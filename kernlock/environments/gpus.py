"""The compute capabilities of this machine's NVIDIA GPUs, asked of the driver (NVML) without importing torch.

``kernlock env`` and a lock for "this machine" need the capabilities (the loader refuses a build that lacks the
GPU's); importing torch to ask costs seconds on a GPU machine. NVML is the driver's own C library
(``libnvidia-ml``, installed with every NVIDIA driver); its five calls used here are stable since CUDA 5. The
official Python binding (nvidia-ml-py) costs ~50 ms to import, more than the rest of a local command, so the
calls are made with ctypes. ``CUDA_VISIBLE_DEVICES`` is honoured as CUDA honours it (indices or ``GPU-`` UUIDs);
a form NVML cannot map (MIG instances) gives None, and the caller asks torch instead.
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["nvml_capabilities"]

_LIBRARY = "nvml.dll" if sys.platform == "win32" else "libnvidia-ml.so.1"
_OK = 0


def nvml_capabilities() -> tuple[str, ...] | None:
    """The sorted distinct ``major.minor`` capabilities of the visible GPUs; ``()`` when CUDA_VISIBLE_DEVICES
    hides them all; None when NVML cannot say (no NVIDIA driver, an NVML error, a MIG device list)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    wanted = None if visible is None else [item.strip() for item in visible.split(",") if item.strip()]
    if wanted is not None and (not wanted or wanted[0].startswith("-")):
        return ()  # "" or "-1": CUDA sees no device
    if wanted is not None and not all(item.isdigit() or item.startswith("GPU-") for item in wanted):
        return None  # MIG instances or another form NVML's device list cannot map
    import ctypes  # ~2 ms: only a CUDA environment asks

    try:
        nvml = ctypes.CDLL(_LIBRARY)
    except OSError:
        return None
    if nvml.nvmlInit_v2() != _OK:
        return None
    try:
        devices = _devices(nvml)
    finally:
        nvml.nvmlShutdown()
    if devices is None:
        return None
    if wanted is not None:
        picked = []
        for item in wanted:  # CUDA stops at the first entry it cannot map
            match = [d for i, d in enumerate(devices) if (str(i) == item if item.isdigit() else d[0] == item)]
            if not match:
                break
            picked.extend(match)
        devices = picked
    return tuple(sorted({capability for _uuid, capability in devices}, key=_numeric))


def _devices(nvml: Any) -> list[tuple[str, str]] | None:
    """(UUID, capability) of every GPU NVML lists, in its index order; None on any NVML error."""
    import ctypes as c

    count = c.c_uint()
    if nvml.nvmlDeviceGetCount_v2(c.byref(count)) != _OK:
        return None
    found = []
    for index in range(count.value):
        handle = c.c_void_p()
        major, minor = c.c_int(), c.c_int()
        uuid = c.create_string_buffer(96)
        if (
            nvml.nvmlDeviceGetHandleByIndex_v2(index, c.byref(handle)) != _OK
            or nvml.nvmlDeviceGetCudaComputeCapability(handle, c.byref(major), c.byref(minor)) != _OK
            or nvml.nvmlDeviceGetUUID(handle, uuid, len(uuid)) != _OK
        ):
            return None
        found.append((uuid.value.decode("ascii", "replace"), f"{major.value}.{minor.value}"))
    return found


def _numeric(capability: str) -> tuple[int, ...]:
    return tuple(int(part) for part in capability.split("."))
