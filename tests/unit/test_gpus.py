"""Compute capabilities from the NVIDIA driver (kernlock.environments.gpus): what CUDA would see, without importing
torch.

The GPU side (NVML's answer equals torch's on an H200) runs in gpu/capability_demo.py; here, the rules that need
no GPU: a hidden device list, and a machine without the driver.
"""

from __future__ import annotations

import pytest

from kernlock.environments.gpus import nvml_capabilities


@pytest.mark.parametrize("visible", ["", "-1", " -1,0"])
def test_cuda_visible_devices_that_hide_every_gpu_mean_no_capability(visible: str, monkeypatch: pytest.MonkeyPatch):
    """CUDA sees no device for an empty or negative first entry: no capability, and no driver call is needed."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert nvml_capabilities() == ()


def test_mig_device_lists_are_left_to_torch(monkeypatch: pytest.MonkeyPatch):
    """A MIG instance list cannot be mapped onto NVML's device list: the answer is None (the caller asks torch)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-GPU-5c4d6a2e/1/0")
    assert nvml_capabilities() is None
