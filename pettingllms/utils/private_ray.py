"""The one place the project starts or joins Ray (trainer.backend=ray and trainer.backend=verl).

`start_ray(None or "local", ...)` starts a private single-machine Ray that lives as long as the
run; `start_ray("auto" | "HOST:PORT", ...)` joins a cluster started with `ray start`.
`stop_ray()` stops what `start_ray` started. Callers pass the resources they computed
(num_cpus, num_gpus); this module owns how the Ray is reached: auth, token and addresses.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Optional

from pettingllms.errors import ConfigError

LOCAL = "local"


def start_ray(address: Optional[str] = LOCAL, *, num_cpus: Optional[int] = None,
              num_gpus: Optional[int] = None, log_to_driver: bool = True,
              env_vars: Optional[dict[str, str]] = None,
              logging_level: int = logging.INFO, setting: str = "ray.address") -> bool:
    """Start a private Ray (address None or "local") or join a cluster; False if Ray was
    already initialised in this process (then nothing is started and the caller does not own it).
    `setting` names the config key the address came from, for the error message."""
    import ray

    if ray.is_initialized():
        return False
    runtime_env: dict[str, Any] = {"env_vars": dict(env_vars)} if env_vars else {}
    address = str(address or LOCAL)
    if address == LOCAL:
        # A private single-machine Ray needs no token; set before Ray reads its auth mode.
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        ray.init(address=LOCAL, num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False,
                 log_to_driver=log_to_driver, runtime_env=runtime_env or None,
                 logging_level=logging_level)
        return True
    try:
        ray.init(address=address, log_to_driver=log_to_driver, runtime_env=runtime_env or None,
                 logging_level=logging_level)
    except ConnectionError as e:
        raise ConfigError(f"{setting}={address}: no Ray cluster to join ({e}); start one with "
                          f"`ray start --head` or use {setting}={LOCAL}") from None
    return True


def stop_ray() -> None:
    """Stop (or leave) the Ray this process started or joined."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
