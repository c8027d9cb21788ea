"""From a validated run config to what each component takes: the one place that reads the run
config's blocks on their behalf, shared by training, evaluation and SFT.

    setup = build_run(cfg)                  # threads, seeds, determinism, device, loggers: once
    settings = rollout_settings(cfg)        # the runner's block (RolloutSettings)
    policies = build_policy_set(cfg, agents, setup.device)   # PolicyWorkers on their own blocks
    engine = build_rollout_engine(cfg, bases, lora_ranks)    # the engine on rollout + model blocks
    load_initial_weights(cfg, workers)      # trainer.checkpoint.init_from (a resume wins)

Components never see the whole config: the runner takes `RolloutSettings`, a policy worker its
`WorkerSettings`, the policy map its `MappingConfig`, an engine its `rollout` and `model` blocks.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from omegaconf import DictConfig

from pettingllms.config.schema import (AlgorithmConfig, CheckpointConfig, LoggingConfig, PhaseConfig, RoleLrConfig,
                                       ValidationConfig)
from pettingllms.errors import ConfigError
from pettingllms.policies.mapping import MappingConfig
from pettingllms.policies.settings import WorkerSettings
from pettingllms.rollout.runner import RolloutSettings
from pettingllms.trainer.outputs import RunPlace

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunSetup:
    """What `build_run` settled for this process."""
    device: torch.device  # trainer.device resolved (policy workers and the HF engine)
    threads: int  # torch threads now in use (trainer.threads)


@dataclass(frozen=True)
class LoopSettings:
    """What the trainer loop reads itself (trainer/local.py); the components get their own blocks."""
    experiment: str
    seed: int
    total_steps: int
    batch_size: int  # problems per step (rollout.batch_size)
    algorithm: AlgorithmConfig  # advantages
    phases: Sequence[PhaseConfig]
    role_lr: RoleLrConfig
    checkpoint: CheckpointConfig
    validation: ValidationConfig
    logging: LoggingConfig
    run_name: str = ""  # trainer.run_name: how the stop line says to go on
    stop_signals: Sequence[str] = ("SIGTERM", "SIGUSR1")  # trainer.stop_signals (trainer/stopping.py)
    stop_grace_s: float = 20.0
    max_refill: int = 0  # rollout.max_refill: extra rollouts a dapo-filtered step may run


def quiet_hf_progress() -> None:
    """transformers draws a progress bar per checkpoint save/load; the step bar is enough."""
    try:
        from transformers.utils import logging as hf_logging
        hf_logging.disable_progress_bar()
    except Exception:  # pragma: no cover - older/newer transformers without it
        pass


def build_run(cfg: DictConfig) -> RunSetup:
    """Process set-up every entry point needs, in one order: metric sinks checked, torch threads
    (`trainer.threads`: a count, 0 or auto), seeds and determinism, the device."""
    from pettingllms.trainer.loggers import check_loggers
    from pettingllms.utils.models import resolve_device
    from pettingllms.utils.seeding import set_seed
    from pettingllms.utils.threads import apply_threads

    check_loggers(cfg.trainer.logging.logger)
    threads = apply_threads(cfg.trainer.threads)
    set_seed(int(cfg.seed), bool(cfg.trainer.deterministic))
    quiet_hf_progress()
    try:
        device = resolve_device(str(cfg.trainer.device))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return RunSetup(device=device, threads=threads)


def rollout_settings(cfg: DictConfig) -> RolloutSettings:
    return RolloutSettings.of(cfg.rollout, cfg.reward, cfg.algorithm, cfg.mas, cfg.agents, cfg.env)


def make_runner(engine: Any, env_factory: Any, agent_policy: Mapping[str, str], settings: RolloutSettings) -> Any:
    """The runner `settings.strategy` names: the turn-based episode loop (tree / flat) or
    MetaAgent-X's designs x executions (autoevol) or a user's agent program (graph)."""
    if settings.strategy == "autoevol":
        from pettingllms.rollout.autoevol import AutoEvolRollout
        return AutoEvolRollout(engine, env_factory, dict(agent_policy), settings)
    if settings.strategy == "graph":
        from pettingllms.rollout.graph.runner import GraphRollout
        return GraphRollout(engine, env_factory, dict(agent_policy), settings)
    from pettingllms.rollout.runner import Rollout
    return Rollout(engine, env_factory, dict(agent_policy), settings)


def evaluate_on(make_rollout: Any, cfg: DictConfig, problems: list[dict[str, Any]], seed: int) -> dict[str, Any]:
    """Held-out avg@k / pass@k per the `eval` block (validation and `pettingllms.evaluate`)."""
    from pettingllms.trainer.evaluation import evaluate_problems

    chunk = cfg.eval.batch_problems or cfg.rollout.batch_size
    return evaluate_problems(make_rollout, rollout_settings(cfg), problems, int(cfg.eval.k), seed,
                             env_name=str(cfg.env.name), temperature=float(cfg.eval.temperature),
                             chunk=int(chunk), progress_s=float(cfg.eval.progress_s))


def model_dtype(cfg: DictConfig) -> str:
    """model.dtype as it runs here: auto resolved for trainer.device (bf16 or float32, utils/precision.py)."""
    from pettingllms.utils.models import resolve_device
    from pettingllms.utils.precision import resolve_dtype

    return resolve_dtype(str(cfg.model.dtype), resolve_device(str(cfg.trainer.device)))


def worker_settings(cfg: DictConfig, device: torch.device | str | None = None) -> WorkerSettings:
    """A policy worker's blocks; `device` defaults to trainer.device resolved."""
    from pettingllms.utils.models import resolve_device

    tr = cfg.trainer
    return WorkerSettings(
        algorithm=cfg.algorithm, optim=tr.optim, dtype=str(cfg.model.dtype),
        train_dtype=str(cfg.model.train_dtype), gradient_checkpointing=bool(cfg.model.gradient_checkpointing),
        micro_batch_size=int(tr.micro_batch_size), logprob_chunk=int(tr.logprob_chunk),
        total_steps=int(tr.total_steps), temperature=float(cfg.rollout.sampling.temperature),
        seed=int(cfg.seed), device=str(device if device is not None else resolve_device(str(tr.device))),
        train_vision=bool(cfg.model.get("train_vision", False)))


def mapping_config(cfg: DictConfig) -> MappingConfig:
    return MappingConfig(policies=dict(cfg.policies or {}), agents=dict(cfg.agents or {}),
                         agents_mode=str(cfg.agents_mode), model=cfg.model, optim=cfg.trainer.optim,
                         phases=list(cfg.trainer.phases), temperature=float(cfg.rollout.sampling.temperature))


def build_policy_set(cfg: DictConfig, agents: Sequence[str], device: torch.device | str | None = None) -> Any:
    """The PolicySet for the env's agents (one PolicyWorker per policy)."""
    from pettingllms.policies import build_policies

    return build_policies(mapping_config(cfg), worker_settings(cfg, device), agents)


def build_rollout_engine(cfg: DictConfig, bases: Mapping[str, str],
                         lora_ranks: Mapping[str, int] | None = None) -> Any:
    """The engine `rollout.engine` names, serving these policies (name -> base model path; empty:
    the `policies` block's, or one policy "shared" on model.path)."""
    from pettingllms.rollout.engines import build_engine, engine_policies
    from pettingllms.utils.models import resolve_device

    try:
        return build_engine(cfg.rollout, cfg.model, device=str(resolve_device(str(cfg.trainer.device))),
                            seed=int(cfg.seed), policies=dict(bases) or engine_policies(cfg.policies, cfg.model.path),
                            lora_ranks=lora_ranks)
    except NotImplementedError as e:  # a backend that is declared but not built yet
        raise ConfigError(str(e)) from None


def rollout_gpu_need(cfg: DictConfig) -> tuple[str, int]:
    """(rollout.engine, GPUs one engine takes: rollout.vllm.tensor_parallel_size for vllm/auto, 0 for
    an hf engine set to the CPU, else 1), for `ray.gpus_per_worker=auto` (utils.placement.rollout_worker_gpus)."""
    engine = str(cfg.rollout.engine)
    if engine == "hf" and str((cfg.rollout.engine_options or {}).get("device", cfg.trainer.device)) == "cpu":
        return engine, 0
    return engine, int(cfg.rollout.vllm.tensor_parallel_size) if engine in ("vllm", "auto") else 1


def plan_inputs(cfg: DictConfig, agents: Sequence[str]) -> Any:
    """The pre-flight plan's inputs (pettingllms/planning.py) for these agents."""
    from pettingllms.planning import PlanInputs
    from pettingllms.policies import resolve_policies

    tr, ro = cfg.trainer, cfg.rollout
    return PlanInputs(
        backend=str(tr.backend), engine=str(ro.engine), specs=dict(resolve_policies(mapping_config(cfg), agents).specs),
        dtype=str(cfg.model.dtype), train_dtype=str(cfg.model.train_dtype), micro_batch=int(tr.micro_batch_size),
        checkpointing=bool(cfg.model.gradient_checkpointing), logprob_chunk=int(tr.logprob_chunk),
        max_prompt_tokens=int(ro.max_prompt_tokens), max_new_tokens=int(ro.sampling.max_new_tokens),
        kl=float(cfg.algorithm.kl_coef), device=str(tr.device), n_per_node=int(tr.n_gpus_per_node),
        nnodes=int(tr.nnodes), batch_size=int(ro.batch_size), k=int(ro.k), workers=int(cfg.ray.num_rollout_workers),
        gpus_per_worker=cfg.ray.gpus_per_worker, tp=int(ro.vllm.tensor_parallel_size),
        gpu_memory_utilization=float(ro.vllm.gpu_memory_utilization), engine_gpus=rollout_gpu_need(cfg)[1])


def run_place(cfg: DictConfig) -> RunPlace:
    tr = cfg.trainer
    return RunPlace(output_dir=str(tr.output_dir), experiment=str(cfg.experiment), run_name=str(tr.run_name or ""),
                    resume=str(tr.checkpoint.resume), allow_changes=bool(tr.checkpoint.resume_allow_changes),
                    config=cfg)


def resolve_run_folder(cfg: DictConfig, run_dir: Path | None = None) -> tuple[Path, Path | None]:
    """The run folder and the checkpoint to resume from (outputs.resolve_run)."""
    from pettingllms.trainer.outputs import resolve_run

    return resolve_run(run_place(cfg), run_dir)


def run_outputs(cfg: DictConfig, run_dir: Path, history: Sequence[dict] = (), resume_step: int | None = None,
                line: Any = None) -> Any:
    """RunOutputs for this run: config.yaml, metrics to every trainer.logging sink, trajectories."""
    from pettingllms.trainer.outputs import RunOutputs

    return RunOutputs(run_dir, cfg, cfg.trainer.logging, int(cfg.trainer.total_steps), history,
                      resume_step=resume_step, line=line)


def loop_settings(cfg: DictConfig) -> LoopSettings:
    tr = cfg.trainer
    return LoopSettings(experiment=str(cfg.experiment), seed=int(cfg.seed), total_steps=int(tr.total_steps),
                        batch_size=int(cfg.rollout.batch_size), algorithm=cfg.algorithm, phases=list(tr.phases),
                        role_lr=tr.role_lr, checkpoint=tr.checkpoint, validation=tr.validation, logging=tr.logging,
                        run_name=str(tr.run_name or ""), stop_signals=[str(s) for s in tr.stop_signals],
                        stop_grace_s=float(tr.stop_grace_s), max_refill=int(cfg.rollout.max_refill))


def backend_name(cfg: DictConfig) -> str:
    """trainer.backend: local | ray | verl (trainer.backends.make_backend builds it)."""
    return str(cfg.trainer.backend)


def rollout_worker_threads(cfg: DictConfig, current: int) -> int:
    """A Ray rollout worker's torch threads (`trainer.threads`; see utils.threads.worker_threads)."""
    from pettingllms.utils.threads import worker_threads

    return worker_threads(cfg.trainer.threads, cfg.ray.cpus_per_worker, current)


def verl_settings(cfg: DictConfig) -> Any:
    """verl's workers: the local worker's settings (its device is the driver's CPU, where the initial
    LoRA adapter is made; verl places its ranks itself, from `device` as configured)."""
    from pettingllms.policies.verl.setup import VerlSettings

    tr = cfg.trainer
    return VerlSettings(worker=worker_settings(cfg, "cpu"), verl=tr.verl, n_gpus_per_node=int(tr.n_gpus_per_node),
                        nnodes=int(tr.nnodes), device=str(tr.device))


@dataclass(frozen=True)
class DemoConfig:
    """What the MetaAgent-X demo's weights and engine depend on (ui/weights.py, ui/serve.py)."""
    base: str  # model.path
    checkpoint: str  # mas.checkpoint: auto | none | a run folder or checkpoint
    output_dir: str  # trainer.output_dir, where `auto` looks for cold starts
    engine: str  # rollout.engine
    server: str = ""  # rollout.openai.base_url where the engine is a server (openai), else ""


def demo_config(cfg: DictConfig) -> DemoConfig:
    engine = str(cfg.rollout.engine)
    server = str(cfg.rollout.openai.base_url) if engine == "openai" else ""
    return DemoConfig(base=str(cfg.model.path), checkpoint=str(cfg.mas.checkpoint).strip(),
                      output_dir=str(cfg.trainer.output_dir), engine=engine, server=server)


def prompt_limit(cfg: DictConfig) -> int:
    """rollout.max_prompt_tokens: SFT rows are cut as the engines cut prompts."""
    return int(cfg.rollout.max_prompt_tokens)


def load_initial_weights(cfg: DictConfig, workers: Mapping[str, Any]) -> None:
    """trainer.checkpoint.init_from: start the policies from a checkpoint's weights (optimizer,
    schedule and update count stay fresh), e.g. the SFT cold start."""
    from pettingllms.trainer import checkpoint as ckpt_io

    source = str(cfg.trainer.checkpoint.init_from)
    if not source:
        return
    init = ckpt_io.resolve_checkpoint(source, "trainer.checkpoint.init_from")
    ckpt_io.load_policies(init, dict(workers), weights_only=True)
    log.info("policies start from %s", init)
