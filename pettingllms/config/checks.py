"""Value checks run by `pettingllms.config.validate`, before any model or data loads.

Each failure is one ConfigError line naming the key, the bad value and what is allowed.
Names (envs, engines, dtypes, embedded models) are read from the registries that own
them, so a new env or engine is checked as soon as it is registered.
"""
from __future__ import annotations

import difflib
import inspect
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from omegaconf import DictConfig, ListConfig, OmegaConf

from pettingllms.errors import ConfigError


def bad_value(key: str, value: Any, allowed: str) -> ConfigError:
    return ConfigError(f"invalid value {value!r} for '{key}'; {allowed}")


def _choice(key: str, value: Any, allowed: Iterable[str]) -> None:
    allowed = sorted(allowed)
    if value in allowed:
        return
    close = difflib.get_close_matches(str(value), allowed, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise ConfigError(f"invalid value {value!r} for '{key}'{hint}; choose one of {', '.join(allowed)}")


def _unknown_option(key: str, owner: str, allowed: Iterable[str]) -> ConfigError:
    allowed = sorted(allowed)
    close = difflib.get_close_matches(key.rsplit(".", 1)[-1], allowed, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ConfigError(f"unknown option '{key}' for {owner}{hint}; known: {', '.join(allowed) or '(none)'}")


# (key, test, what is allowed). None values are skipped: they mean "unset" in the schema.
_RANGES: list[tuple[str, Callable[[Any], bool], str]] = [
    ("seed", lambda v: v >= 0, "must be >= 0"),
    ("model.lora.rank", lambda v: v >= 1, "must be >= 1"),
    ("model.lora.alpha", lambda v: v > 0, "must be > 0"),
    ("model.lora.dropout", lambda v: 0 <= v < 1, "must be in [0, 1)"),
    ("rollout.k", lambda v: v >= 1, "must be >= 1 (candidates per problem, turn and agent)"),
    ("rollout.batch_size", lambda v: v >= 1, "must be >= 1"),
    ("eval.batch_problems", lambda v: v >= 1, "must be >= 1 (or unset: rollout.batch_size)"),
    ("rollout.max_prompt_tokens", lambda v: v >= 1, "must be >= 1"),
    ("rollout.env_workers", lambda v: v >= 1, "must be >= 1"),
    ("rollout.max_refill", lambda v: v >= 0, "must be >= 0 (extra rollouts per step, algorithm.group_filter=dapo)"),
    ("env.max_turns", lambda v: v >= 1, "must be >= 1"),
    ("env.train_limit", lambda v: v >= 1, "must be >= 1 or null"),
    ("env.test_limit", lambda v: v >= 1, "must be >= 1 or null"),
    ("algorithm.eps", lambda v: v >= 0, "must be >= 0"),
    ("algorithm.clip_low", lambda v: 0 <= v < 1, "must be in [0, 1)"),
    ("algorithm.clip_high", lambda v: v >= 0, "must be >= 0"),
    ("algorithm.dual_clip_c", lambda v: v > 1, "must be > 1, or null to disable dual clip"),
    ("algorithm.kl_coef", lambda v: v >= 0, "must be >= 0"),
    ("algorithm.entropy_coef", lambda v: v >= 0, "must be >= 0"),
    ("algorithm.ppo_epochs", lambda v: v >= 1, "must be >= 1"),
    ("algorithm.mini_batches", lambda v: v >= 1, "must be >= 1"),
    ("trainer.total_steps", lambda v: v >= 1, "must be >= 1"),
    ("trainer.optim.lr", lambda v: v > 0, "must be > 0"),
    ("trainer.optim.weight_decay", lambda v: v >= 0, "must be >= 0"),
    ("trainer.optim.betas", lambda v: len(v) == 2 and all(0 <= b < 1 for b in v), "must be two numbers in [0, 1)"),
    ("trainer.optim.warmup_steps", lambda v: v >= 0, "must be >= 0"),
    ("trainer.optim.min_lr_ratio", lambda v: 0 <= v <= 1, "must be in [0, 1]"),
    ("trainer.optim.grad_clip", lambda v: v >= 0, "must be >= 0 (0 disables)"),
    ("trainer.micro_batch_size", lambda v: v >= 1, "must be >= 1"),
    ("trainer.logprob_chunk", lambda v: v >= 1, "must be >= 1"),
    ("trainer.checkpoint.save_freq", lambda v: v >= 0, "must be >= 0 (0: only at the end)"),
    ("trainer.validation.val_freq", lambda v: v >= 0, "must be >= 0 (0: never)"),
    ("trainer.threads", lambda v: _threads_ok(v), "must be a count >= 0 (0 keeps torch's default) or 'auto'"),
    ("trainer.checkpoint.keep_checkpoints", lambda v: v >= 0, "must be >= 0 (0 keeps all)"),
    ("trainer.logging.starvation_warn_steps", lambda v: v >= 0, "must be >= 0 (0: never)"),
    ("trainer.stop_grace_s", lambda v: v > 0, "must be > 0 (seconds a stop may take before the process exits)"),
    ("trainer.stop_signals", lambda v: not any(map(_signal_problem, v)),
     "must list catchable signal names such as SIGTERM, SIGUSR1, SIGUSR2, SIGHUP (not SIGKILL or SIGSTOP)"),
    ("trainer.role_lr.swap_every", lambda v: v >= 0, "must be >= 0 (0: never)"),
    ("ray.num_rollout_workers", lambda v: v >= 1, "must be >= 1"),
    ("ray.max_worker_restarts", lambda v: v >= 0, "must be >= 0 (0: a lost worker stops the run)"),
    ("trainer.verl.place_timeout_s", lambda v: v > 0, "must be > 0 (seconds)"),
    ("rollout.vllm.tensor_parallel_size", lambda v: v >= 1, "must be >= 1 (GPUs per engine)"),
    ("rollout.vllm.enforce_eager", lambda v: v == "auto" or isinstance(v, bool), "must be auto, true or false"),
    ("ray.gpus_per_worker", lambda v: v == "auto" or (not isinstance(v, (str, bool)) and v >= 0),
     "must be 'auto' or a number >= 0"),
    ("trainer.verl.start_timeout_s", lambda v: v > 0, "must be > 0 (seconds)"),
    ("eval.k", lambda v: v >= 1, "must be >= 1"),
    ("eval.limit", lambda v: v >= 1, "must be >= 1 or null"),
    ("eval.temperature", lambda v: v >= 0, "must be >= 0 (0 is greedy)"),
    ("eval.progress_s", lambda v: v >= 0, "must be >= 0 (0: no progress lines)"),
]


def _signal_problem(name: Any) -> str | None:
    """Why `name` cannot be a stop signal (None: it can)."""
    import signal

    if not isinstance(name, str) or not name.startswith("SIG") or not hasattr(signal.Signals, name):
        return "not a signal name"
    if name in ("SIGKILL", "SIGSTOP"):
        return "cannot be caught"
    return None


def _threads_ok(value: Any) -> bool:
    from pettingllms.utils.threads import parse_threads
    try:
        parse_threads(value)
    except ValueError:
        return False
    return True


def _check_ranges(cfg: DictConfig) -> None:
    for key, ok, allowed in _RANGES:
        value = OmegaConf.select(cfg, key)
        if value is not None and not ok(value):
            raise bad_value(key, value, allowed)
    for name, pol in (cfg.policies or {}).items():
        pol = pol or {}
        if pol.get("lr") is not None and not pol.lr > 0:
            raise bad_value(f"policies.{name}.lr", pol.lr, "must be > 0 (or unset: trainer.optim.lr)")
        if pol.get("weight_decay") is not None and not pol.weight_decay >= 0:
            raise bad_value(f"policies.{name}.weight_decay", pol.weight_decay, "must be >= 0")


def _check_agents(cfg: DictConfig) -> None:
    """rollout.sampling and each `agents.<name>` block (pettingllms/config/agents.py); the
    shape of env.turn_order (its names are checked against the env's agents when it runs)."""
    from pettingllms.config.agents import agent_configs, check_sampling, sampling_block

    check_sampling("rollout.sampling", sampling_block(cfg.rollout.sampling))
    agent_configs(cfg.agents)
    for i, entry in enumerate(cfg.env.get("turn_order") or []):
        names = list(entry) if isinstance(entry, (list, tuple, ListConfig)) else [entry]
        if not names or not all(isinstance(n, str) and n for n in names):
            raise bad_value(f"env.turn_order[{i}]", OmegaConf.to_object(entry) if isinstance(entry, ListConfig)
                            else entry, "each entry is an agent name or a non-empty list of agent names")


def _check_dtypes(cfg: DictConfig) -> None:
    from pettingllms.utils.models import DTYPE_NAMES
    from pettingllms.utils.precision import AUTO

    for key, names in (("model.dtype", (AUTO,) + DTYPE_NAMES), ("model.train_dtype", DTYPE_NAMES)):
        _choice(key, str(OmegaConf.select(cfg, key)), names)
        if str(cfg.trainer.backend) != "verl" and str(OmegaConf.select(cfg, key)) in ("float16", "fp16"):
            raise ConfigError(f"{key}=float16 on trainer.backend={cfg.trainer.backend}: its policy workers have no "
                              "GradScaler, so fp16 gradients would underflow; use bfloat16 (or float32), or "
                              "trainer.backend=verl, which scales the loss")


def _looks_local(path: str) -> bool:
    """A filesystem path, not a hub id: hub ids are exactly `org/name` (or a bare `name`)."""
    return path.startswith(("/", ".", "~")) or path.count("/") > 1 or "\\" in path


def check_model_path(key: str, path: str) -> None:
    from pettingllms.utils.models import EMBEDDED_MODELS

    if path.startswith("embedded:"):
        _choice(key, path, [f"embedded:{n}" for n in EMBEDDED_MODELS])
    elif path.startswith("tiny:"):
        if not path[len("tiny:"):]:
            raise bad_value(key, path, "tiny models need a name, e.g. tiny:test")
    elif _looks_local(path) or Path(path).expanduser().exists():
        folder = Path(path).expanduser()
        if not folder.is_dir():
            raise bad_value(key, path, "no such model folder; use a local HF folder, a hub id org/name, "
                                       "embedded:NAME or tiny:NAME")
    elif not path:
        raise bad_value(key, path, "set a model: a local HF folder, a hub id org/name, embedded:NAME or tiny:NAME")


def _check_models(cfg: DictConfig) -> None:
    check_model_path("model.path", str(cfg.model.path))
    for name, pol in (cfg.policies or {}).items():
        if pol is not None and pol.get("base"):
            check_model_path(f"policies.{name}.base", str(pol.base))


def env_option_names(cls: type) -> set[str]:
    """The keyword options an env class accepts: named parameters of every __init__ in its MRO."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        for p in inspect.signature(init).parameters.values():
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self":
                names.add(p.name)
    names.discard("max_turns")  # set by env.max_turns
    return names


def _check_env(cfg: DictConfig) -> None:
    from pettingllms.envs import ENV_REGISTRY

    name = str(cfg.env.name)
    _choice("env.name", name, ENV_REGISTRY)
    allowed = env_option_names(ENV_REGISTRY[name])
    for key in (cfg.env.options or {}):
        if key == "max_turns":
            raise ConfigError("'env.options.max_turns' is not an option; set env.max_turns")
        if key not in allowed:
            raise _unknown_option(f"env.options.{key}", f"env '{name}'", allowed)
    size = cfg.env.get("map_size")
    sizes = getattr(ENV_REGISTRY[name], "map_sizes", ())
    if size is not None and size not in sizes:
        raise bad_value("env.map_size", size, f"env '{name}' has sides {', '.join(map(str, sizes))} (or null)"
                        if sizes else f"env '{name}' has no puzzle sizes; leave it null")


def _check_engine(cfg: DictConfig) -> None:
    from pettingllms.rollout.engines import ENGINE_OPTIONS

    engine = str(cfg.rollout.engine)
    _choice("rollout.engine", engine, ENGINE_OPTIONS)
    allowed = ENGINE_OPTIONS[engine]
    if allowed is None:  # declared, options not listed yet: the engine checks them when built
        return
    for key in (cfg.rollout.engine_options or {}):
        if key not in allowed:
            raise _unknown_option(f"rollout.engine_options.{key}", f"engine '{engine}'", allowed)


# Fields with a closed set of values (the schema comments list them).
_CHOICES = {
    "agents_mode": ("explicit", "per_agent_lora", "per_agent_model"),
    "rollout.strategy": ("tree", "flat", "autoevol", "graph"),
    "rollout.vllm.logprobs_mode": ("processed_logprobs", "raw_logprobs"),
    "rollout.vllm.cpu_prefill": ("whole", "budget"),
    "algorithm.advantage": ("grpo", "agent_norm", "mean_only"),
    "algorithm.loss_agg": ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean"),
    "algorithm.old_logprobs": ("recompute", "engine"),
    "algorithm.group_filter": ("none", "zero_var", "dapo"),
    "trainer.backend": ("local", "ray", "verl"),
    "trainer.optim.lr_schedule": ("cosine", "constant"),
    "trainer.verl.strategy": ("fsdp2", "fsdp"),
    "mas.design_format": ("pettingllms", "workflow"),
    "mas.reward": ("pettingllms", "published"),
    "trainer.verl.attn_implementation": ("auto", "sdpa", "eager", "flash_attention_2", "flash_attention_3"),
}


def _check_choices(cfg: DictConfig) -> None:
    for key, allowed in _CHOICES.items():  # listed in the schema's order, not sorted
        value = OmegaConf.select(cfg, key)
        if value not in allowed:
            close = difflib.get_close_matches(str(value), allowed, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"invalid value {value!r} for '{key}'{hint}; choose one of {', '.join(allowed)}")
    bad = [g for g in cfg.algorithm.group_by if g not in ("problem", "turn", "agent")]
    if bad:
        raise ConfigError(f"invalid 'algorithm.group_by' entries {bad}; use a subset of problem, turn, agent")


def _check_schedule(cfg: DictConfig) -> None:
    """trainer.phases in order; env/strategy pairs that only work together."""
    last = None
    for i, phase in enumerate(cfg.trainer.phases):
        if last is not None and int(phase.start_step) <= last:
            raise ConfigError(f"trainer.phases[{i}]: start_step must increase strictly "
                              f"({int(phase.start_step)} after {last})")
        last = int(phase.start_step)
    env, strategy = str(cfg.env.name), str(cfg.rollout.strategy)
    if env.startswith("autoevol") != (strategy == "autoevol"):
        raise ConfigError("env=autoevol and rollout=autoevol go together (MetaAgent-X's designs x "
                          f"executions); got env.name={env}, rollout.strategy={strategy}")
    if strategy == "autoevol" and (cfg.env.get("turn_order") or cfg.env.get("parallel")):
        raise ConfigError("env.turn_order and env.parallel are for turn-based envs; rollout.strategy=autoevol "
                          "plays designs, not turns")
    if (env == "graph") != (strategy == "graph"):
        raise ConfigError("env=graph and rollout=graph go together (K executions of your agent program "
                          f"per problem); got env.name={env}, rollout.strategy={strategy}")
    if env == "graph" and (cfg.env.get("options") or {}).get("local_rewards") and float(cfg.reward.local_weight) \
            and "agent" not in list(cfg.algorithm.group_by):
        # a group's statistics count each execution once (one return per episode); with local
        # rewards the agents of one execution have different returns
        raise ConfigError("env.options.local_rewards gives each agent its own reward: keep 'agent' in "
                          f"algorithm.group_by (got {list(cfg.algorithm.group_by)}) or set reward.local_weight=0")


def check_values(cfg: DictConfig, checks: Optional[list[Callable[[DictConfig], None]]] = None) -> None:
    """Every value check; the first failure raises ConfigError."""
    for check in checks or (_check_choices, _check_ranges, _check_agents, _check_dtypes, _check_env,
                            _check_engine, _check_models, _check_schedule):
        check(cfg)
