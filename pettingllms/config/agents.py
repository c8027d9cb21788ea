"""The `agents` block read once: each entry a policy name or an `AgentConfig` block (the policy
map and the runner read it through `agent_configs`). Sampling values are checked here for every
block that holds them, so `rollout.sampling` and `agents.<name>.sampling` obey one set of rules;
how an agent's blocks combine is `RolloutSettings.sampling_for` (rollout/runner.py).
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Mapping

from omegaconf import DictConfig, ListConfig, OmegaConf

from pettingllms.config.schema import AgentConfig, SamplingConfig
from pettingllms.errors import ConfigError

SAMPLING_KEYS = tuple(f.name for f in fields(SamplingConfig))
_AGENT_KEYS = tuple(f.name for f in fields(AgentConfig))

# (field, test, what is allowed); None values mean "unset" and are skipped
_SAMPLING_RULES = (
    ("temperature", lambda v: v >= 0, "must be >= 0 (0 is greedy)"),
    ("top_p", lambda v: 0 < v <= 1, "must be in (0, 1]"),
    ("top_k", lambda v: v >= 0, "must be >= 0 (0 disables)"),
    ("max_new_tokens", lambda v: v >= 1, "must be >= 1"),
    ("min_p", lambda v: 0 <= v < 1, "must be in [0, 1) (0 disables)"),
    ("repetition_penalty", lambda v: v > 0, "must be > 0 (1 disables)"),
    ("enable_thinking", lambda v: isinstance(v, bool), "must be true, false or null (the template's default)"),
)


def _plain(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, (DictConfig, ListConfig)) else node


def check_sampling(key: str, values: Mapping[str, Any]) -> None:
    """One ConfigError line for an unknown field or a bad value of a sampling block at `key`."""
    unknown = sorted(set(values) - set(SAMPLING_KEYS))
    if unknown:
        raise ConfigError(f"unknown sampling keys {unknown} in '{key}'; known: {', '.join(SAMPLING_KEYS)}")
    for name, ok, allowed in _SAMPLING_RULES:
        value = values.get(name)
        if value is None:
            continue
        try:
            good = bool(ok(value))
        except TypeError:
            good = False
        if not good:
            raise ConfigError(f"invalid value {value!r} for '{key}.{name}'; {allowed}")


def agent_configs(agents: Any) -> dict[str, AgentConfig]:
    """`agents` as typed blocks: `name: policy` becomes AgentConfig(policy=policy)."""
    out = {}
    for name, entry in dict(_plain(agents) or {}).items():
        name = str(name)
        if entry is None or isinstance(entry, str):
            out[name] = AgentConfig(policy=entry)
            continue
        if not isinstance(entry, Mapping):
            raise ConfigError(f"'agents.{name}' must be a policy name or a block with "
                              f"{', '.join(_AGENT_KEYS)}; got {entry!r}")
        unknown = sorted(set(entry) - set(_AGENT_KEYS))
        if unknown:
            raise ConfigError(f"unknown keys {unknown} in 'agents.{name}'; known: {', '.join(_AGENT_KEYS)}")
        cfg = AgentConfig(**{k: v for k, v in entry.items() if v is not None or k == "policy"})
        for block in ("sampling", "eval_sampling"):
            value = getattr(cfg, block)
            if not isinstance(value, Mapping):
                raise ConfigError(f"'agents.{name}.{block}' must be a block of sampling keys; got {value!r}")
            check_sampling(f"agents.{name}.{block}", value)
            setattr(cfg, block, dict(value))
        if not isinstance(cfg.trainable, bool):
            raise ConfigError(f"invalid value {cfg.trainable!r} for 'agents.{name}.trainable'; must be true or false")
        if cfg.policy is not None and not isinstance(cfg.policy, str):
            raise ConfigError(f"invalid value {cfg.policy!r} for 'agents.{name}.policy'; a policy name")
        out[name] = cfg
    return out


def sampling_block(sampling: Any) -> dict[str, Any]:
    """A SamplingConfig (or mapping of its fields) as a plain dict of the fields that are set."""
    if isinstance(sampling, (DictConfig, Mapping)):
        values = dict(_plain(sampling))
    else:
        values = {k: getattr(sampling, k) for k in SAMPLING_KEYS if hasattr(sampling, k)}
    return {k: v for k, v in values.items() if k in SAMPLING_KEYS}
