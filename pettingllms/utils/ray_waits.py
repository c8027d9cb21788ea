"""Bounded waits on Ray: placement groups, actor start-up and start-up calls each end, at the
latest after their timeout, in one line naming what was asked, what the cluster has and the
setting to change (never an unbounded `ray.get`). Resource arithmetic: `utils.placement`."""
from __future__ import annotations

import time
from typing import Any, Sequence

from pettingllms.errors import ConfigError
from pettingllms.utils.placement import VerlAsk, node_summary


def cluster_nodes() -> list[dict[str, float]]:
    """Each alive node's total resources (CPU, GPU, memory, ...)."""
    import ray

    return [dict(n.get("Resources", {})) for n in ray.nodes() if n.get("Alive")]


def place_verl_pool(ask: VerlAsk, prefix: str, timeout_s: float, setting: str) -> list[Any]:
    """verl's placement groups (one STRICT_PACK group of `ask.n_per_node` bundles per node, as
    `RayResourcePool.get_placement_groups` makes them), ready within `timeout_s`, sorted as verl
    sorts them; a ConfigError naming the ask otherwise."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from verl.single_controller.ray.base import sort_placement_group_by_node_ip

    name = f"{prefix}verl_group_{'_'.join([str(ask.n_per_node)] * ask.nnodes)}:"
    pgs = [placement_group(bundles=[ask.bundle] * ask.n_per_node, strategy="STRICT_PACK", name=f"{name}{i}")
           for i in range(ask.nnodes)]
    _, pending = ray.wait([pg.ready() for pg in pgs], num_returns=len(pgs), timeout=timeout_s)
    if pending:
        for pg in pgs:
            remove_placement_group(pg)
        raise ConfigError(f"trainer.backend=verl: {len(pending)} of {len(pgs)} placement group(s) not placed within "
                          f"{setting}={timeout_s:g}s: asked {ask.describe()}; the Ray cluster has "
                          f"{node_summary(cluster_nodes())} (busy with other work?); lower trainer.n_gpus_per_node / "
                          f"trainer.nnodes, free the cluster, or raise {setting}")
    return sort_placement_group_by_node_ip(pgs)


def wait_refs(refs: Sequence[Any], timeout_s: float, what: str, setting: str) -> list[Any]:
    """Every ref's value, in order, within `timeout_s`. A failed ref ends the wait at once with
    its first line (the worker's log reaches the console: log_to_driver is on); a timeout ends it
    with a ConfigError naming `what` and `setting`."""
    import ray
    from ray.exceptions import RayActorError, RayError, RayTaskError

    deadline = time.monotonic() + timeout_s
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
        if not ready:
            raise ConfigError(f"{what}: {len(pending)} of {len(refs)} not done within {setting}={timeout_s:g}s "
                              f"(the Ray cluster has {node_summary(cluster_nodes())}); see the worker log above, "
                              f"or raise {setting}")
        try:
            ray.get(ready[0], timeout=max(1.0, deadline - time.monotonic()))
        except RayTaskError as e:
            raise RuntimeError(f"{what} failed: {_first_line(e.cause)}") from None
        except (RayActorError, RayError) as e:
            raise RuntimeError(f"{what} failed: {_first_line(e)}") from None
    return ray.get(list(refs))


def _first_line(e: BaseException) -> str:
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"
