"""Run verl's FSDP engine on CPU: a CPU platform for verl's platform registry.

verl 0.9.1 registers CUDA, NPU and ROCm platforms only, so on a CPU-only machine its
workers fall back to "nvidia" and fail on the first `torch.cuda` call. Importing this
module registers a `cpu` platform (device "cpu", the plain "gloo" backend, a device
module with the `torch.cuda`-style calls verl makes) and turns off pinned memory in
FSDP2's CPU offload, which needs CUDA.

It reaches Ray workers through the runtime env: `worker_env()` sets
VERL_USE_EXTERNAL_MODULES (verl imports the listed modules in its own `__init__`, i.e.
in every process that imports verl) and VERL_PLATFORM=cpu (the platform verl picks).
On a GPU the same code path runs without these two variables.
"""
from __future__ import annotations

import os
import types
from contextlib import contextmanager
from typing import Any, Optional

import torch

PLATFORM = "cpu"
MODULE = __name__


class _CpuDeviceModule(types.SimpleNamespace):
    """`torch.cpu` plus the `torch.cuda` calls verl makes on its device module."""

    def __getattr__(self, name: str) -> Any:  # anything else: torch.cpu's own
        return getattr(torch.cpu, name)

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "cpu"

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def set_device(device: Any) -> None:
        return None

    @staticmethod
    def synchronize(device: Any = None) -> None:
        return None

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def ipc_collect() -> None:
        return None

    @staticmethod
    def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
        return None

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        import psutil
        vm = psutil.virtual_memory()
        return int(vm.available), int(vm.total)

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return 0

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        return None


CPU_DEVICE = _CpuDeviceModule()


def _platform_class():
    from verl.plugin.platform import PlatformBase

    class PlatformCPU(PlatformBase):
        """verl on CPU: one "device" per process, gloo collectives, no IPC."""

        device_name = "cpu"
        vendor_name = "cpu"
        device_module = CPU_DEVICE

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            # Only chosen through VERL_PLATFORM=cpu, never by auto-detection on a GPU host.
            return False

        def current_device(self):
            # verl passes this to `.to(...)` and `torch.device(...)`; an int would mean cuda:N.
            return torch.device("cpu")

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: Optional[int] = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0):
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        @contextmanager
        def nvtx_range(self, msg: str):
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            return "CPU"

        def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
            return {}

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> Any:
            return None

    return PlatformCPU


def _unpinned_offload() -> None:
    """FSDP2's CPUOffloadPolicy(pin_memory=True) needs CUDA; on CPU keep the offload, unpinned."""
    from verl.workers.engine.fsdp import transformer_impl

    policy = getattr(transformer_impl, "CPUOffloadPolicy", None)
    if policy is None or getattr(policy, "_pettingllms_unpinned", False):
        return

    class UnpinnedCPUOffloadPolicy(policy):
        _pettingllms_unpinned = True

        def __init__(self, pin_memory: bool = False, **kwargs: Any) -> None:
            super().__init__(pin_memory=False, **kwargs)

    transformer_impl.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy


_registered = False


def register() -> None:
    """Register the platform with verl (idempotent; cheap: imports verl's platform module only)."""
    global _registered
    if _registered:
        return
    from verl.plugin.platform import PlatformRegistry

    PlatformRegistry.register(platform=PLATFORM)(_platform_class())
    _registered = True


def active() -> bool:
    return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM


def patch_engine() -> None:
    """Engine-level CPU fixes; called by our worker before verl builds its engine."""
    if active():
        _unpinned_offload()


def worker_env(use_cpu: bool) -> dict[str, str]:
    """Env vars for verl's Ray workers (and this process) to run on CPU."""
    if not use_cpu:
        return {}
    return {"VERL_PLATFORM": PLATFORM, "VERL_USE_EXTERNAL_MODULES": MODULE}


def activate_here(use_cpu: bool) -> None:
    """Make this process (the driver) use the CPU platform too, before verl picks one."""
    if not use_cpu:
        return
    os.environ.update(worker_env(True))
    register()


# verl imports this module from its own __init__ (VERL_USE_EXTERNAL_MODULES) in each worker.
if active():
    register()
