"""The one place the project starts or joins Ray (trainer.backend=ray and trainer.backend=verl).

`start_ray(None or "local", ...)` starts a private single-machine Ray that lives as long as the
run; `start_ray("auto" | "HOST:PORT", ...)` joins a cluster started with `ray start`.
`stop_ray()` stops what `start_ray` started. Callers pass the resources they computed
(num_cpus, num_gpus); this module owns how the Ray is reached (docs/security.md):

- the private Ray keeps Ray's token authentication on, with a fresh token per run in a 0600
  file in a 0700 temp dir (`RAY_AUTH_TOKEN_PATH`, which every Ray process inherits), removed
  by `stop_ray` or at exit; and it runs in Ray's single-machine mode (node address
  127.0.0.1), so its GCS, raylet, workers and agents listen on loopback only;
- joining a cluster that accepts a driver without a token logs one warning naming the risk;
  joining one at a loopback address uses single-machine mode too (else Ray swaps the address
  for the node's network address and never finds it).

The private Ray's workers run at the driver's priority: Ray by default renices every worker by
+15 (`worker_niceness`), and the rollout workers do all of a run's generation, so on a box
where anything else runs they got a sliver of a core while the driver waited on them (32
evaluation episodes on one core shared with a nice-10 process: 280 s at +15, 45 s without; local
backend 37 s). A cluster joined keeps its own setting.
"""
from __future__ import annotations

import atexit
import logging
import os
import secrets
import shutil
import tempfile
from typing import Any, Optional

from pettingllms.errors import ConfigError
from pettingllms.utils.net import is_loopback

log = logging.getLogger(__name__)

LOCAL = "local"
# Ray's switch for single-machine mode: node address = loopback, so every listener binds there.
_SINGLE_MACHINE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
_AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", _SINGLE_MACHINE)
_state: dict[str, Any] = {}  # the private Ray's token dir and the env it replaced


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
        _enter_env(token=True)
        try:
            ray.init(address=LOCAL, num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False,
                     log_to_driver=log_to_driver, runtime_env=runtime_env or None,
                     logging_level=logging_level, _system_config={"worker_niceness": 0})
        except BaseException:
            _restore_env()
            raise
        return True
    if is_loopback(address.rpartition(":")[0]):
        _enter_env(token=False)  # else Ray turns a loopback address into the node's own address
    else:
        _reload_ray_auth()  # RAY_AUTH_* as they are now
    try:
        ray.init(address=address, log_to_driver=log_to_driver, runtime_env=runtime_env or None,
                 logging_level=logging_level)
    except ConnectionError as e:
        _restore_env()
        raise ConfigError(f"{setting}={address}: no Ray cluster to join ({e}); start one with "
                          f"`ray start --head` or use {setting}={LOCAL}") from None
    gcs = ray.get_runtime_context().gcs_address
    if accepts_without_token(gcs):
        log.warning("%s=%s: this Ray cluster runs without authentication: anyone who can reach %s "
                    "can run code as you, with your tokens and data; restart it with token auth "
                    "(docs/security.md#joining-a-cluster)", setting, address, gcs)
    return True


def stop_ray() -> None:
    """Stop (or leave) the Ray this process started or joined; remove the private Ray's token."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    _restore_env()


def token_path() -> Optional[str]:
    """The running private Ray's token file, or None."""
    return _state.get("path")


def accepts_without_token(gcs_address: str, timeout_s: float = 5.0) -> bool:
    """True if the GCS at gcs_address answers a request that carries no token."""
    import grpc

    channel = grpc.insecure_channel(gcs_address)
    try:
        call = channel.unary_unary("/ray.rpc.NodeInfoGcsService/GetClusterId",
                                   request_serializer=lambda _: b"", response_deserializer=bytes)
        call(None, timeout=timeout_s)  # no metadata: no token
        return True
    except grpc.RpcError:  # UNAUTHENTICATED, or unreachable without Ray's TLS: not open to us
        return False
    finally:
        channel.close()


def _enter_env(token: bool) -> None:
    """Single-machine mode, and with `token` auth on with a fresh 0600 token; old values kept."""
    _restore_env()  # a token left by a Ray that was not stopped through stop_ray
    _state["env"] = {k: os.environ.get(k) for k in _AUTH_VARS}
    os.environ[_SINGLE_MACHINE] = "0"
    if token:
        folder = tempfile.mkdtemp(prefix="pettingllms-ray-")  # 0700
        path = os.path.join(folder, "auth_token")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))  # 256 bits, as `ray get-auth-token --generate`
        _state.update(folder=folder, path=path)
        os.environ.pop("RAY_AUTH_TOKEN", None)  # it would win over the file
        os.environ.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": path})
    _set_single_machine()
    _reload_ray_auth()


def _restore_env() -> None:
    if "env" not in _state:
        return
    for key, value in _state.pop("env").items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    _set_single_machine()
    _reload_ray_auth()  # the config first, then the file (a draining thread may still read it)
    if "folder" in _state:
        shutil.rmtree(_state.pop("folder"), ignore_errors=True)
    _state.pop("path", None)


def _set_single_machine() -> None:
    """Ray reads its single-machine switch once, at import: read it again from the environment."""
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = ray_constants.env_bool(_SINGLE_MACHINE,
                                                              not ray_constants.IS_WINDOWS_OR_OSX)


def _reload_ray_auth() -> None:
    """Make this process's Ray read RAY_AUTH_* again (it caches them on import)."""
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def _at_exit() -> None:
    if "env" in _state:  # a Ray started (or a loopback one joined) here and not stopped: stop it first
        stop_ray()


atexit.register(_at_exit)  # the token goes even when the run ends without stop_ray
