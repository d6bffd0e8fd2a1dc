"""Compute capabilities from the NVIDIA driver (kernlock.environments.gpus): what CUDA would see, without importing
torch.

The GPU side (NVML's answer equals torch's on an H200) runs in gpu/capability_demo.py; here, the rules that need
no GPU: a hidden device list, and a machine without the driver.
"""

from __future__ import annotations

import ctypes.util
import subprocess
import sys

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


@pytest.mark.subprocess
@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has an NVIDIA driver")
def test_without_the_driver_nvml_gives_no_answer_and_imports_nothing_heavy(monkeypatch: pytest.MonkeyPatch):
    """No libnvidia-ml (this CPU machine): None, so `kernlock env` falls back to torch's answer as before; the
    probe itself imports only ctypes."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert nvml_capabilities() is None
    code = "import sys; from kernlock.environments.gpus import nvml_capabilities; "
    code += "nvml_capabilities(); print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
