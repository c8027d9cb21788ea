"""The config schema. Hydra composes YAML from `configs/`; these dataclasses type it.

A leaf module (it imports no other part of the project but `mas.budgets`): components import
their own block's type from here. Every composed config is merged onto `ExperimentConfig` by
`pettingllms.config.validate`, so a misspelt key fails at once with one message naming it.
Free-form blocks (`env.options`) are checked by the component that owns them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from pettingllms.mas.budgets import MasBudgets


@dataclass
class LoraConfig:
    enabled: bool = False
    rank: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])


@dataclass
class ModelConfig:
    path: str = "embedded:smollm2-135m-instruct"  # embedded:NAME, a hub id, or a local HF folder
    # weights and compute for generation, the (LoRA) frozen base, logprobs and the reference model;
    # auto: bf16 where the hardware computes bf16 natively, else float32 (utils/precision.py)
    dtype: str = "auto"
    train_dtype: str = "float32"  # trainable weights (full fine-tuning master copy / adapters)
    lora: LoraConfig = field(default_factory=LoraConfig)
    gradient_checkpointing: bool = False
    # vision-language models: the vision tower trains too (full fine-tuning only; LoRA adapts the
    # language model). Off: the tower stays as loaded.
    train_vision: bool = False


@dataclass
class SamplingConfig:
    temperature: float = 0.7
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 128
    stop: list[str] = field(default_factory=list)
    min_p: float = 0.0  # drop tokens less likely than min_p x the most likely one; 0 disables
    repetition_penalty: float = 1.0  # > 1: tokens already in the prompt or reply less likely; 1 disables
    # Qwen3-style chat templates' thinking switch (passed to apply_chat_template); None: the template's default
    enable_thinking: Optional[bool] = None


@dataclass
class AgentConfig:
    """One agent's entry in `agents`: a policy name alone (`reasoner: shared`) or this block
    (pettingllms/config/agents.py reads both)."""
    policy: Optional[str] = None  # None: as if the agent had no entry (the only policy, or agents_mode's)
    sampling: dict[str, Any] = field(default_factory=dict)  # rollout.sampling fields it overrides in training
    eval_sampling: dict[str, Any] = field(default_factory=dict)  # overridden on top in evaluation
    trainable: bool = True  # false: its samples are generated but never trained on


@dataclass
class VLLMConfig:
    """rollout.engine=vllm (pettingllms/rollout/engines/vllm.py)."""
    # auto: true on CPU (~10 s start-up, no graph compile), false on CUDA (CUDA graphs: faster decode)
    enforce_eager: Any = "auto"
    tensor_parallel_size: int = 1  # GPUs per engine (a model that does not fit one GPU)
    gpu_memory_utilization: float = 0.4  # GPU share for weights + KV cache (the trainer uses the rest)
    sleep_mode: bool = False  # GPU: free the KV cache while policies train, wake before the next rollout
    cpu_kvcache_gib: int = 4  # CPU build: KV cache size (VLLM_CPU_KVCACHE_SPACE), per engine
    # CPU build: compute threads of an in-process engine. 0: this process's torch thread count
    # (trainer.threads; a Ray worker's CPUs), unpinned; -1: vLLM's own default (it pins to one core
    # per physical core minus one reserved for a scheduler process, and cuts torch to 1 thread)
    cpu_threads: int = 0
    max_model_len: Optional[int] = None  # None: rollout.max_prompt_tokens + sampling.max_new_tokens
    max_num_seqs: int = 256
    logprobs_mode: str = "processed_logprobs"  # logprobs under the distribution sampled from
    # CPU build: how prompts are prefilled so that a seeded request never has a prefill split
    # over scheduler steps (vLLM then rewinds its generator, which a CPU generator cannot do).
    # whole: chunked prefill off, each prompt in one step (step budget max(max_model_len, 4096)
    # tokens, vLLM's own CPU default); budget: chunked prefill on with a step budget of
    # max_num_seqs * max_model_len tokens (activation memory grows with it). GPUs: vLLM's defaults.
    cpu_prefill: str = "whole"


@dataclass
class OpenAIConfig:
    """rollout.engine=openai: any OpenAI-compatible server (pettingllms/rollout/engines/openai.py)."""
    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = ""  # served model name; empty: the server's first model
    api_key_env: str = "OPENAI_API_KEY"  # the key is read from this env var (never from config)
    timeout_s: float = 120.0
    max_concurrency: int = 16  # requests in flight at once
    policy_models: dict[str, str] = field(default_factory=dict)  # policy -> served model (L2/L3)


@dataclass
class RolloutConfig:
    engine: str = "hf"  # hf | vllm | openai | auto (vLLM where installed and faster, else hf)
    strategy: str = "tree"  # tree (AT-GRPO) | flat (K independent episodes) | autoevol (MetaAgent-X) | graph
    k: int = 4  # candidates per (problem, turn, agent)
    batch_size: int = 4  # problems per training step
    max_prompt_tokens: int = 1024  # longer prompts are truncated from the left
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    env_workers: int = 2  # threads stepping env branches (sandbox work runs in subprocesses)
    max_refill: int = 0  # algorithm.group_filter=dapo: extra rollouts a step may run to refill its groups
    # hf engine only: device, max_batch_size, threads, lean_forward (false: Llama models take
    # transformers' forward instead of the engine's own; same numbers, slower), cpu_kernels (false:
    # decode steps keep oneDNN's GEMM and the matmul attention instead of our C++ kernels)
    engine_options: dict[str, Any] = field(default_factory=dict)
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    openai: OpenAIConfig = field(default_factory=OpenAIConfig)


@dataclass
class EnvConfig:
    name: str = "math"
    max_turns: int = 2
    data: str = ""  # dataset folder name under data_root; defaults to the env's own
    data_root: str = "datasets"
    train_limit: Optional[int] = None
    test_limit: Optional[int] = None
    # puzzle side for envs with sizes (sudoku: 4, 6, 9, 12, 16); picks that side's data
    # (sudoku -> sudoku_<N>, sudoku_easy -> sudoku_<N>_easy); None: the data's own mix
    map_size: Optional[int] = None
    options: dict[str, Any] = field(default_factory=dict)  # checked by the env's constructor
    # who acts in each turn, in order: agent names, or a list of names that act in parallel (they see
    # the same state); empty: env.agents one after another (rollout/runner.py turn_groups)
    turn_order: list[Any] = field(default_factory=list)
    parallel: bool = False  # every agent of a turn acts in parallel (the reference's `parallel: true`)


@dataclass
class RewardConfig:
    """A candidate's reward: team_weight * team reward + local_weight * the acting agent's own
    (local) reward, the paper's team + local mix; docs/algorithm.md says why both are on."""
    team_weight: float = 1.0
    local_weight: float = 0.5


@dataclass
class AlgorithmConfig:
    name: str = "at_grpo"
    advantage: str = "grpo"  # grpo | agent_norm (Dr. MAS) | mean_only (Dr. GRPO)
    group_by: list[str] = field(default_factory=lambda: ["problem", "turn", "agent"])
    eps: float = 1e-6
    clip_low: float = 0.2
    clip_high: float = 0.28
    dual_clip_c: Optional[float] = 3.0  # None disables dual clip
    kl_coef: float = 0.0  # KL to the initial policy (low_var_kl); 0 disables
    entropy_coef: float = 0.0
    loss_agg: str = "token-mean"  # token-mean | seq-mean-token-sum | seq-mean-token-mean
    ppo_epochs: int = 1
    mini_batches: int = 1  # optimizer steps per epoch
    old_logprobs: str = "recompute"  # recompute | engine
    # none | zero_var (drop groups whose rewards are all equal; a policy left with none is not
    # updated) | dapo (also refill with up to rollout.max_refill extra rollouts); algorithms/filtering.py
    group_filter: str = "none"


@dataclass
class PolicyConfig:
    """One trainable policy. Unset fields fall back to `model` and `trainer.optim`."""
    base: Optional[str] = None  # model path; None means model.path
    lora: Optional[LoraConfig] = None  # None means model.lora
    lr: Optional[float] = None  # None means trainer.optim.lr
    weight_decay: Optional[float] = None
    offload: bool = False  # keep off the hot path while idle (L3)


@dataclass
class PhaseConfig:
    start_step: int = 0
    train_policies: list[str] = field(default_factory=list)  # empty means all


@dataclass
class RoleLrConfig:
    """Per-role learning rates that rotate, for roles sharing one model (MetaAgent-X's stage-wise
    alternation: designer / executor at 1e-9 / 5e-6, swapped every 10 steps)."""
    lrs: dict[str, float] = field(default_factory=dict)  # agent -> lr in the first period; empty: off
    swap_every: int = 0  # steps per period; each period rotates the rates one agent on (2: a swap); 0: never


@dataclass
class VerlConfig:
    """trainer.backend=verl: how verl's FSDP workers run (their device is trainer.device). GPU runs
    differ from the CPU runs that CI tests only in config values (trainer.device, attention,
    padding removal, offload)."""
    strategy: str = "fsdp2"  # fsdp2 | fsdp
    # auto: flash_attention_2 on CUDA where flash_attn is installed, else sdpa (said once in the log)
    attn_implementation: str = "auto"
    use_remove_padding: bool = False  # true: packed sequences (flash attention, or sdpa with position_ids)
    param_offload: bool = False
    optimizer_offload: bool = False
    ray_address: str = ""  # "": a local Ray started for the run; "auto" or host:port: join a cluster
    # Full fine-tuning's engine sync files; every node with an engine must see it. "": <run folder>/weight_sync
    sync_dir: str = ""
    place_timeout_s: float = 60.0  # verl's placement groups not placed by then: one line, exit 2 (never a hang)
    start_timeout_s: float = 900.0  # ranks not started (model built) by then: one line, exit 2


@dataclass
class RayConfig:
    """trainer.backend=ray (pettingllms/trainer/backends/ray.py)."""
    address: str = "local"  # local: start a private Ray; auto: join `ray start`; or HOST:PORT
    num_rollout_workers: int = 1  # Ray actors, each with its own engine and env/sandbox pool
    cpus_per_worker: float = 1.0
    # auto: none on a cluster without GPUs (or for rollout.engine=openai), else the engine's GPUs
    # (rollout.vllm.tensor_parallel_size for vllm, 1 for hf) or an equal share of the cluster's
    gpus_per_worker: Any = "auto"
    num_cpus: Optional[int] = None  # local Ray only: CPUs it may use (None: all)
    step_timeout_s: float = 1800.0  # a rollout worker slower than this is recreated (never a hang)
    # rollout workers recreated per run after one died or hung (then: checkpoint and stop, exit 75)
    max_worker_restarts: int = 3
    env_vars: dict[str, str] = field(default_factory=dict)  # extra env vars for the workers
    worker_imports: list[str] = field(default_factory=list)  # modules each worker imports first (custom envs)


@dataclass
class OptimConfig:
    """The optimizer and its schedule, per policy update (policies may override lr / weight_decay)."""
    lr: float = 1e-5
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    warmup_steps: int = 0
    lr_schedule: str = "cosine"  # cosine | constant
    min_lr_ratio: float = 0.1
    grad_clip: float = 1.0


@dataclass
class CheckpointConfig:
    save_freq: int = 0  # 0: only at the end
    keep_checkpoints: int = 0  # keep only the newest N checkpoints; 0 keeps all
    resume: str = "none"  # none | auto | PATH to a checkpoint folder
    resume_allow_changes: bool = False  # resume with a changed config (recorded in config_changes.jsonl)
    init_from: str = ""  # start the policies' weights from this checkpoint (e.g. the SFT cold start)


@dataclass
class ValidationConfig:
    """Held-out evaluation during training (the `eval` block says how: split, k, limit)."""
    val_freq: int = 0  # 0: never during training
    val_before: bool = False  # also validate the untrained policy; the run ends printing before -> after


@dataclass
class LoggingConfig:
    # metric sinks: console, jsonl (always on), tensorboard, wandb, mlflow (trainer/loggers.py)
    logger: list[str] = field(default_factory=lambda: ["console", "jsonl", "tensorboard"])
    project: str = "pettingllms"  # W&B project (runs grouped by `experiment`); an MLflow tag
    log_tensorboard: bool = True  # false drops tensorboard from `logger`
    progress_bar: bool = True
    save_trajectories: bool = True  # trajectories/step_<N>.jsonl every step
    starvation_warn_steps: int = 5  # warn when an agent's groups had zero variance this many steps in a row; 0: never


@dataclass
class TrainerConfig:
    backend: str = "local"  # local | ray | verl
    n_gpus_per_node: int = 1  # backend=verl: ranks per node (GPUs; processes on CPU)
    nnodes: int = 1  # backend=verl: nodes of the Ray cluster
    verl: VerlConfig = field(default_factory=VerlConfig)
    # policy workers (verl's ranks too) and the HF engine: auto (cuda if present; verl: if the Ray
    # cluster has a GPU) | cpu | cuda[:N]
    device: str = "auto"
    threads: Any = 0  # torch threads: a count, 0 keeps torch's default, auto = the cores free now
    deterministic: bool = False
    total_steps: int = 20
    micro_batch_size: int = 8  # sequences per forward/backward
    logprob_chunk: int = 1024  # tokens per logits chunk (never batch x length x vocab at once)
    output_dir: str = "outputs"
    run_name: str = ""  # empty: a timestamp
    phases: list[PhaseConfig] = field(default_factory=list)  # freeze/unfreeze schedule
    role_lr: RoleLrConfig = field(default_factory=RoleLrConfig)  # per-role lr alternation
    optim: OptimConfig = field(default_factory=OptimConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    # signals that stop the run cleanly (drop the rollout, checkpoint, one line; Ctrl-C always does)
    stop_signals: list[str] = field(default_factory=lambda: ["SIGTERM", "SIGUSR1"])
    stop_grace_s: float = 20.0  # the most a stop may take (SLURM's KillWait is 30 s by default)


@dataclass
class EvalConfig:
    split: str = "test"
    k: int = 4  # samples per problem for avg@k / pass@k
    limit: Optional[int] = None
    temperature: float = 0.7
    # problems per rollout call (each plays k episodes); None: rollout.batch_size. Larger is
    # faster (wider generate batches) and only changes which sampling seed each problem gets
    batch_problems: Optional[int] = None
    checkpoint: str = ""  # empty: the base model
    progress_s: float = 5.0  # a log line this often while it runs (problems done / total, tok/s); 0: none
    output: str = ""  # results JSON; empty: next to the checkpoint, or outputs/<experiment>/eval/


@dataclass
class SftConfig:
    """Supervised fine-tuning (`python -m pettingllms.sft`): token-level NLL of each row's reply
    given its messages, on the policy workers (LoRA or full), e.g. the MetaAgent-X cold start."""
    data: str = "datasets/autoevol_sft/train.jsonl"  # JSONL rows: agent, messages, reply (+ source, synthetic)
    epochs: int = 2
    batch_size: int = 8  # rows per optimizer step (per policy)
    limit: Optional[int] = None  # use the first N rows
    agents: list[str] = field(default_factory=list)  # train only these agents' rows; empty: all


@dataclass
class SandboxConfig:
    """Where LLM-written code runs (pettingllms/sandbox). Without bubblewrap and without
    Landlock + seccomp nothing contains it: it is refused unless allow_weak is true."""
    allow_weak: bool = False  # run it uncontained there (the exposure is logged in one line)


@dataclass
class MasConfig:
    """MetaAgent-X design execution (pettingllms/mas): budgets and the designer/executor
    sampling used by run_query, the demo and the eval script (training uses rollout.sampling)."""
    budgets: MasBudgets = field(default_factory=MasBudgets)
    max_attempts: int = 3  # designs per query until one runs to an answer (each is recorded)
    # a template (pettingllms/mas/templates) run as one more, labelled attempt when every design
    # failed; empty: off. For demos of untrained designers; never used in training.
    fallback_template: str = ""
    # the weights the demo (serve_ui.sh / serve_demo.sh) runs: auto = the newest cold-start checkpoint
    # made on model.path under <trainer.output_dir>/autoevol_sft, else the base model; none; or a
    # run folder / checkpoint (pettingllms/ui/weights.py)
    checkpoint: str = "auto"
    # the designs' format: pettingllms (our DSL, pettingllms/mas/dsl.py) | workflow (the released
    # Mercury7353/MetaAgent-X model's `workflow` API, pettingllms/mas/workflow_api.py): picks the
    # designer prompt and which imports the design checks accept (docs/metaagent_x.md)
    design_format: str = "pettingllms"
    # autoevol rewards: pettingllms (outcome + format_valid x ran fraction) | published (outcome
    # + 0.4 for a <delivery> tag + 0.4 for a boxed answer / parseable <solution> code); both are
    # recorded in every sample's info, this one is trained on
    reward: str = "pettingllms"
    designer_sampling: SamplingConfig = field(
        default_factory=lambda: SamplingConfig(temperature=0.7, max_new_tokens=768))
    executor_sampling: SamplingConfig = field(
        default_factory=lambda: SamplingConfig(temperature=0.7, max_new_tokens=256))


@dataclass
class ExperimentConfig:
    experiment: str = "default"
    seed: int = 0
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    # policy name -> policy; agent name -> policy name or an AgentConfig block (policy, sampling,
    # eval_sampling, trainable). Empty `policies` means one policy "shared"; an agent without
    # a policy maps to the only policy (L1).
    # agents_mode per_agent_lora / per_agent_model builds one policy per agent (L2 / L3).
    policies: dict[str, PolicyConfig] = field(default_factory=dict)
    agents: dict[str, Any] = field(default_factory=dict)
    agents_mode: str = "explicit"  # explicit | per_agent_lora | per_agent_model
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    sft: SftConfig = field(default_factory=SftConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    mas: MasConfig = field(default_factory=MasConfig)
