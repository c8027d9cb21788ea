"""`trainer.backend=verl`: each policy trains on a verl FSDP worker group on Ray; the rollout
engine(s) stay as with `local` (HF in this process, or our vLLM engine with rollout.engine=vllm),
so two policies never collide on verl's hybrid-engine actor names or IPC paths.

Only `build_policies` and `close` differ from `local`: the policy workers are
`pettingllms.policies.verl.VerlPolicyWorker`s, and the Ray cluster they run on is shut down
with the backend (when this run started it). Full fine-tuned policies sync their engines through
files under `trainer.verl.sync_dir` (default: `<run folder>/weight_sync`, which a crashed run of
the same folder may have left behind and this run therefore clears).
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig

from pettingllms.trainer.backends.local import LocalBackend


class VerlBackend(LocalBackend):
    name = "verl"

    def __init__(self, cfg: DictConfig, env_factory: Callable[[], Any]) -> None:
        from pettingllms.trainer.assemble import verl_settings

        super().__init__(cfg, env_factory)
        self.settings = verl_settings(cfg)
        self.cluster: Any = None

    def build_policies(self, agents: list[str]) -> Any:
        from pettingllms.policies import resolve_policies
        from pettingllms.policies.verl import build_verl_policies
        from pettingllms.policies.verl.setup import RayCluster
        from pettingllms.trainer.assemble import mapping_config

        mapping = mapping_config(self.cfg)
        # Every policy's worker group shares each rank's bundle: the ask is checked before placing.
        self.cluster = RayCluster.start(self.settings, colocate=len(resolve_policies(mapping, agents).specs))
        try:
            self.policies = build_verl_policies(mapping, self.settings, agents, self.cluster, self._sync_dir())
        except BaseException:
            self.cluster.shutdown()
            raise
        return self.policies

    def _sync_dir(self) -> Path | None:
        configured = str(self.settings.verl.sync_dir)
        if configured:
            return Path(configured)
        if self.run_dir is None:  # evaluation: no run folder, engines in this process
            return None
        folder = Path(self.run_dir) / "weight_sync"
        shutil.rmtree(folder, ignore_errors=True)  # this run's folder: anything there is stale
        return folder

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.cluster is not None:
                self.cluster.shutdown()
                self.cluster = None
            if self.run_dir is not None and not str(self.settings.verl.sync_dir):
                shutil.rmtree(Path(self.run_dir) / "weight_sync", ignore_errors=True)
