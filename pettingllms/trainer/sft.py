"""Supervised fine-tuning on the policy workers (the MetaAgent-X cold start).

Data: JSONL rows {agent, messages, reply, ...}. Each row becomes a Sample whose prompt is the
messages rendered exactly as the rollout engines render them (`engines.base.prompt_ids`) and whose response is
the reply's tokens plus EOS; the loss is the token-mean NLL of the response only
(`PolicyWorker.sft_update`). Rows go to their agent's policy (L1: one shared model learns both
roles; L2/L3: one adapter / model per role). Writes the trainer's run folder layout: config,
metrics.jsonl (one row per optimizer step), and a checkpoint that `trainer.checkpoint.init_from` accepts.
With `trainer.checkpoint.init_from` set, SFT starts from that checkpoint's weights (e.g. more epochs on a cold start).
"""
from __future__ import annotations

import json
import logging
import math
import random
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pettingllms.errors import ConfigError
from pettingllms.records import Sample, read_jsonl
from pettingllms.trainer import checkpoint as ckpt_io
from pettingllms.trainer import components as comp
from pettingllms.trainer.outputs import new_run_dir

log = logging.getLogger(__name__)


def load_rows(cfg: DictConfig, agents: list[str]) -> list[dict[str, Any]]:
    path = Path(str(cfg.sft.data))
    if not path.exists():
        raise ConfigError(f"sft.data={path}: no such file (build it with "
                          f"scripts/dataprocess/build_autoevol_sft.py)")
    wanted = set(cfg.sft.agents or agents)
    unknown = sorted(wanted - set(agents))
    if unknown:
        raise ConfigError(f"sft.agents names {unknown}; the env's agents are {agents}")
    rows = []
    for i, row in enumerate(read_jsonl(path)):
        if not isinstance(row.get("messages"), list) or not isinstance(row.get("reply"), str):
            raise ConfigError(f"sft.data={path}: row {i} needs 'messages' (a list) and 'reply' (text)")
        if row.get("agent") not in agents:
            raise ConfigError(f"sft.data={path}: row {i} has agent {row.get('agent')!r}; agents are {agents}")
        if row["agent"] in wanted:
            rows.append(row)
    return rows[: cfg.sft.limit] if cfg.sft.limit is not None else rows


def row_sample(row: dict[str, Any], tokenizer: Any, max_prompt_tokens: int, index: int) -> Sample:
    """Prompt = the engine's rendering of the messages (left-truncated like the engine's); response
    = the reply's tokens + EOS (the model learns to stop)."""
    from pettingllms.rollout.engines.base import GenerationRequest, prompt_ids

    prompt = prompt_ids(tokenizer, GenerationRequest(messages=row["messages"]), max_prompt_tokens)
    reply = tokenizer(row["reply"], add_special_tokens=False)["input_ids"] + [int(tokenizer.eos_token_id)]
    return Sample(agent=str(row["agent"]), turn=0, problem_id=str(row.get("problem_id", index)),
                  episode_id=f"sft/{index}", prompt_ids=list(prompt),
                  response_ids=list(reply), logprobs=[], text=row["reply"],
                  info={"source": row.get("source", ""), "synthetic": bool(row.get("synthetic", False))})


def run_sft(cfg: DictConfig, run_dir: Path | None = None) -> Path:
    """Train every policy on its agents' rows for sft.epochs; returns the run folder (`run_dir`,
    Hydra's run folder from the command line, else a new one under trainer.output_dir)."""
    from pettingllms.trainer import assemble
    from pettingllms.utils.models import load_tokenizer

    setup = assemble.build_run(cfg)  # threads (trainer.threads), seeds and device as for training
    agents = list(comp.make_env_factory(cfg)().agents)
    rows = load_rows(cfg, agents)
    if not rows:
        raise ConfigError(f"sft.data={cfg.sft.data}: no rows for agents {list(cfg.sft.agents or agents)}")
    run_dir = Path(run_dir) if run_dir is not None else new_run_dir(assemble.run_place(cfg))
    policies = assemble.build_policy_set(cfg, agents, setup.device)
    assemble.load_initial_weights(cfg, policies.workers)  # e.g. more epochs on an earlier SFT checkpoint
    tokenizers: dict[str, Any] = {}
    per_policy: dict[str, list[Sample]] = {name: [] for name in policies.workers}
    for i, row in enumerate(rows):
        name = policies.agent_policy[row["agent"]]
        base = str(policies.workers[name].spec.base)
        tok = tokenizers.get(base) or tokenizers.setdefault(base, load_tokenizer(base))
        per_policy[name].append(row_sample(row, tok, assemble.prompt_limit(cfg), i))
    size = max(1, int(cfg.sft.batch_size))
    total = int(cfg.sft.epochs) * sum(math.ceil(len(v) / size) for v in per_policy.values())  # the loop's steps
    outputs = assemble.run_outputs(cfg, run_dir, line=lambda m: (
        f"sft step {m['step']}/{total} epoch {m['epoch']} {m['sft/policy']}: nll {m.get('sft/nll', float('nan')):.4f} "
        f"({int(m.get('sft/num_tokens', 0))} tokens)"))
    history: list[dict[str, Any]] = []
    rng = random.Random(int(cfg.seed))
    step, t_run = 0, time.perf_counter()
    try:
        for epoch in range(int(cfg.sft.epochs)):
            batches = []
            for name, samples in per_policy.items():
                order = list(range(len(samples)))
                rng.shuffle(order)
                batches += [(name, [samples[j] for j in order[i: i + size]]) for i in range(0, len(order), size)]
            rng.shuffle(batches)  # interleave the policies' steps
            for name, batch in batches:
                step += 1
                report = policies.workers[name].sft_update(batch)
                metrics = {"step": step, "epoch": epoch, "sft/policy": name,
                           **{f"sft/{k}": v for k, v in report.items()},
                           "time/elapsed_s": time.perf_counter() - t_run}
                history.append(metrics)
                outputs.log_metrics(metrics)  # the console line is the one RunOutputs was given
        state = {"data": {}, "metrics": history, "sft": {"rows": len(rows), "data": str(cfg.sft.data)}}
        ckpt = ckpt_io.save_checkpoint(run_dir, step, dict(policies.workers), state)
        (run_dir / "sft_summary.json").write_text(json.dumps(
            {"rows": len(rows), "steps": step, "checkpoint": str(ckpt),
             "first_nll": history[0]["sft/nll"] if history else None,
             "last_nll": history[-1]["sft/nll"] if history else None}, indent=1))
    finally:
        outputs.close()
        policies.close()
    print(f"run folder: {run_dir}\ncheckpoint: {ckpt}", flush=True)
    return run_dir
