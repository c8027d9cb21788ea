"""Resolve the config into policy specs and the agent -> policy map.

L1, L2 and L3 are just three mappings:
- L1: `policies` empty -> one policy "shared" that every agent uses;
- L2: `agents_mode: per_agent_lora` -> one LoRA policy per agent, all on one base;
- L3: `agents_mode: per_agent_model` -> one model per agent;
- explicit `policies` + `agents` maps give any mix (two agents on one policy, a
  third on its own; bases may differ).

Unset per-policy fields fall back to `model.*` and `trainer.optim.*`. Every spec gets a
`model_key`: LoRA policies with the same key share one base model in memory (one
peft model, one named adapter each); a full fine-tuned policy always owns its model.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from pettingllms.config.agents import agent_configs
from pettingllms.config.schema import (LoraConfig, ModelConfig, OptimConfig, PhaseConfig, PolicyConfig,
                                       RoleLrConfig)
from pettingllms.errors import ConfigError

SHARED_POLICY = "shared"
AGENT_MODES = ("explicit", "per_agent_lora", "per_agent_model")


@dataclass(frozen=True)
class MappingConfig:
    """The blocks the agent -> policy map reads (`trainer.assemble.mapping_config` builds it)."""
    policies: Mapping[str, Optional[PolicyConfig]] = field(default_factory=dict)  # `policies`
    agents: Mapping[str, Any] = field(default_factory=dict)  # `agents`: agent -> policy name or AgentConfig block
    agents_mode: str = "explicit"  # explicit | per_agent_lora | per_agent_model
    model: ModelConfig = field(default_factory=ModelConfig)  # base path and LoRA defaults
    optim: OptimConfig = field(default_factory=OptimConfig)  # lr / weight_decay defaults
    phases: Sequence[PhaseConfig] = ()  # trainer.phases
    temperature: float = 0.7  # rollout.sampling.temperature (an agent's own sampling may override it)


@dataclass
class PolicySpec:
    """Everything needed to build one PolicyWorker, with fallbacks already applied."""
    name: str
    base: str  # model path (embedded:..., tiny:..., hub id or local folder)
    lora: Optional[LoraConfig]  # None: full fine-tuning
    lr: float
    weight_decay: float
    offload: bool = False
    agents: list[str] = field(default_factory=list)
    untrained: list[str] = field(default_factory=list)  # its agents with `trainable: false`
    # the trained agents' sampling temperature: the trainer's logprobs are computed at it (None: all untrained)
    temperature: Optional[float] = None
    model_key: str = ""  # specs with the same key share one model in memory (LoRA on one base)

    @property
    def is_lora(self) -> bool:
        return self.lora is not None

    @property
    def frozen(self) -> bool:
        """Every agent of this policy is untrained: it generates, and never gets an optimizer."""
        return bool(self.agents) and set(self.agents) <= set(self.untrained)


@dataclass
class PolicyPlan:
    specs: dict[str, PolicySpec]
    agent_policy: dict[str, str]

    @property
    def untrained(self) -> frozenset[str]:
        return frozenset(a for s in self.specs.values() for a in s.untrained)

    def agents_of(self, policy: str) -> list[str]:
        return list(self.specs[policy].agents)


def _plain(node: Any) -> Any:
    if isinstance(node, DictConfig):
        return OmegaConf.to_container(node, resolve=True)
    return node


def _lora_from(node: Any) -> LoraConfig:
    if isinstance(node, LoraConfig):
        return node
    d = dict(_plain(node) or {})
    unknown = set(d) - set(LoraConfig.__dataclass_fields__)
    if unknown:
        raise ConfigError(f"unknown lora keys: {sorted(unknown)}")
    if "target_modules" in d:
        d["target_modules"] = list(d["target_modules"])
    return LoraConfig(**d)


def _spec(name: str, pcfg: Optional[PolicyConfig], mapping: MappingConfig, force_lora: bool = False) -> PolicySpec:
    pcfg = pcfg if pcfg is not None else PolicyConfig()
    lora = _lora_from(pcfg.lora if pcfg.lora is not None else mapping.model.lora)
    if force_lora:
        lora.enabled = True
    spec = PolicySpec(
        name=name,
        base=str(pcfg.base or mapping.model.path),
        lora=lora if lora.enabled else None,
        lr=float(mapping.optim.lr if pcfg.lr is None else pcfg.lr),
        weight_decay=float(mapping.optim.weight_decay if pcfg.weight_decay is None else pcfg.weight_decay),
        offload=bool(pcfg.offload),
    )
    if spec.lr < 0 or spec.weight_decay < 0:
        raise ConfigError(f"policy '{name}': lr and weight_decay must be >= 0")
    if spec.lora is not None and spec.lora.rank <= 0:
        raise ConfigError(f"policy '{name}': lora.rank must be > 0")
    return spec


def resolve_policies(mapping: MappingConfig, agents: Iterable[str]) -> PolicyPlan:
    """Map the env's `agents` (turn order) to policy specs; raise ConfigError on any gap."""
    agents = list(agents)
    if not agents:
        raise ConfigError("the env has no agents to map to policies")
    if len(set(agents)) != len(agents):
        raise ConfigError(f"duplicate agent names in env: {agents}")
    mode = str(mapping.agents_mode)
    if mode not in AGENT_MODES:
        raise ConfigError(f"agents_mode must be one of {AGENT_MODES}, got '{mode}'")
    policies_cfg = {str(k): v for k, v in dict(mapping.policies or {}).items()}
    blocks = agent_configs(mapping.agents)
    ghosts = sorted(set(blocks) - set(agents))
    if ghosts:
        raise ConfigError(f"`agents:` names {ghosts}, which the env does not have (env agents: {agents})")
    agent_map = {name: str(b.policy) for name, b in blocks.items() if b.policy is not None}

    if mode == "explicit":
        specs, agent_policy = _explicit(mapping, agents, policies_cfg, agent_map)
    else:
        specs, agent_policy = _per_agent(mapping, agents, policies_cfg, agent_map, mode)

    for agent, pol in agent_policy.items():
        specs[pol].agents.append(agent)
        if agent in blocks and not blocks[agent].trainable:
            specs[pol].untrained.append(agent)
    _set_temperatures(specs, blocks, float(mapping.temperature))
    idle = [name for name, s in specs.items() if not s.agents]
    if idle:
        raise ConfigError(f"policies {idle} have no agents mapped to them (agents: {agent_policy})")
    _assign_model_keys(specs, per_agent_model=(mode == "per_agent_model"))
    _check_phases(mapping, specs)
    return PolicyPlan(specs=specs, agent_policy=agent_policy)


def _explicit(mapping, agents, policies_cfg, agent_map):
    if not policies_cfg:
        specs = {SHARED_POLICY: _spec(SHARED_POLICY, None, mapping)}
    else:
        specs = {str(name): _spec(str(name), p, mapping) for name, p in policies_cfg.items()}
    if not agent_map:
        if len(specs) != 1:
            raise ConfigError(
                f"several policies {sorted(specs)} but no `agents:` map; map each agent "
                f"({agents}) to a policy")
        only = next(iter(specs))
        return specs, {a: only for a in agents}
    extra = sorted(set(agent_map) - set(agents))
    if extra:
        raise ConfigError(f"`agents:` names {extra}, which the env does not have (env agents: {agents})")
    missing = [a for a in agents if a not in agent_map]
    if missing:
        raise ConfigError(f"env agents {missing} are not mapped to a policy in `agents:`")
    for agent, pol in agent_map.items():
        if pol not in specs:
            raise ConfigError(
                f"agent '{agent}' is mapped to unknown policy '{pol}' (known: {sorted(specs)})")
    return specs, {a: agent_map[a] for a in agents}


def _per_agent(mapping, agents, policies_cfg, agent_map, mode):
    # One policy per agent, named after it; `policies.<agent>` may override its settings.
    unknown = sorted(set(policies_cfg) - set(agents))
    if unknown:
        raise ConfigError(
            f"agents_mode={mode}: `policies` entries {unknown} are not env agents ({agents})")
    bad = {a: p for a, p in agent_map.items() if a != p}
    if bad:
        raise ConfigError(
            f"agents_mode={mode} maps each agent to its own policy; remove `agents:` {bad} "
            f"or use agents_mode=explicit")
    extra = sorted(set(agent_map) - set(agents))
    if extra:
        raise ConfigError(f"`agents:` names {extra}, which the env does not have (env agents: {agents})")
    force_lora = mode == "per_agent_lora"
    specs = {a: _spec(a, policies_cfg.get(a), mapping, force_lora=force_lora) for a in agents}
    if force_lora:
        bases = {s.base for s in specs.values()}
        if len(bases) > 1:
            raise ConfigError(
                f"agents_mode=per_agent_lora puts every adapter on one base, got bases {sorted(bases)}; "
                f"use agents_mode=explicit for adapters on different bases")
    return specs, {a: a for a in agents}


def _set_temperatures(specs: dict[str, PolicySpec], blocks: Mapping[str, Any], default: float) -> None:
    """A policy's logprobs are computed at one temperature: its trained agents must sample at it."""
    for spec in specs.values():
        temps = {a: float(blocks[a].sampling.get("temperature", default)) if a in blocks else default
                 for a in spec.agents if a not in spec.untrained}
        if len(set(temps.values())) > 1:
            raise ConfigError(f"agents {sorted(temps)} train policy '{spec.name}' but sample at temperatures "
                              f"{temps}; the trainer computes a policy's logprobs at one temperature: give them "
                              "one temperature or policies of their own")
        spec.temperature = next(iter(temps.values()), None)


def _assign_model_keys(specs: dict[str, PolicySpec], per_agent_model: bool) -> None:
    # An offloaded policy owns its model: it can only leave memory if nobody else uses it.
    for s in specs.values():
        shared = s.is_lora and not per_agent_model and not s.offload
        s.model_key = f"lora-base:{s.base}" if shared else f"own:{s.name}"


def _check_phases(mapping: MappingConfig, specs: dict[str, PolicySpec]) -> None:
    last = None
    for i, ph in enumerate(mapping.phases):
        start = int(ph.start_step)
        names = list(ph.train_policies or [])
        unknown = sorted(set(names) - set(specs))
        if unknown:
            raise ConfigError(f"trainer.phases[{i}] names unknown policies {unknown} (known: {sorted(specs)})")
        if last is not None and start <= last:
            raise ConfigError("trainer.phases must have strictly increasing start_step")
        last = start


def trainable_policies(phases: Sequence[PhaseConfig], step: int, names: Iterable[str]) -> set[str]:
    """Which policies train at `step`: the latest phase with start_step <= step decides;
    an empty `train_policies` (or no phase yet) means all of them."""
    names = list(names)
    chosen = None
    for ph in list(phases or []):
        if int(ph.start_step) <= step:
            chosen = ph
    if chosen is None:
        return set(names)
    wanted = list(chosen.train_policies or [])
    return set(wanted) if wanted else set(names)


def role_lrs_at(role_lr: RoleLrConfig, step: int) -> dict[str, float] | None:
    """trainer.role_lr at `step` (numbered from 1): agent -> lr, or None when unset.

    Period p = (step - 1) // swap_every rotates the configured rates p places along the listed
    agents, so with two agents they swap every `swap_every` steps.
    """
    lrs = dict(role_lr.lrs or {})
    if not lrs:
        return None
    agents, rates = list(lrs), [float(v) for v in lrs.values()]
    every = int(role_lr.swap_every or 0)
    shift = ((int(step) - 1) // every) % len(agents) if every > 0 else 0
    return {a: rates[(i - shift) % len(agents)] for i, a in enumerate(agents)}
