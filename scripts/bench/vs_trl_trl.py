#!/usr/bin/env python
"""The TRL side of scripts/bench/vs_trl.py: one GRPOTrainer run on the task vs_trl.py wrote.

    <python with trl> scripts/bench/vs_trl_trl.py --task TASK.json --out RESULT.json

Run by vs_trl.py, usually in TRL's own venv, which has neither our dependencies nor our
package: the reward loads only the math env's judge (pettingllms/envs/math/verify.py, plain
Python plus math-verify) from the repository by file path, and applies the env's rule (last
\\boxed{} or else the last number, at most MAX_ANSWER_CHARS, judged equal to the gold answer).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import sys
import tempfile
import time
from pathlib import Path


def load_judge(repo: str):
    spec = importlib.util.spec_from_file_location("pettingllms_math_verify",
                                                  Path(repo) / "pettingllms/envs/math/verify.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_reward(judge, log: list[float]):
    def math_reward(completions, answer, **_):
        out = []
        for completion, gold in zip(completions, answer):
            text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
            pred = judge.extract_answer(text, False)
            ok = pred is not None and len(pred) <= judge.MAX_ANSWER_CHARS and judge.answers_equal(gold, pred)
            out.append(1.0 if ok else 0.0)
        log.extend(out)
        return out
    return math_reward


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", required=True, help="task JSON written by vs_trl.py")
    p.add_argument("--out", required=True, help="where to write this run's timings (JSON)")
    args = p.parse_args(argv)
    task = json.loads(Path(args.task).read_text())

    import torch
    torch.set_num_threads(int(task["threads"]))
    import peft
    import transformers
    import trl
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    rewards: list[float] = []
    n = task["batch"] * task["k"]
    dtype = task.get("dtype", "bfloat16")  # vs_trl.py's --dtype, resolved for this box
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="pettingllms-vs-trl-trl-"), use_cpu=True, seed=int(task["seed"]),
        max_steps=int(task["steps"]), num_generations=int(task["k"]),
        # one generation of batch x k completions per optimizer step, trained in micro-batches
        per_device_train_batch_size=int(task["micro_batch"]),
        gradient_accumulation_steps=n // int(task["micro_batch"]),
        max_completion_length=int(task["max_new_tokens"]), temperature=float(task["temperature"]),
        top_p=float(task["top_p"]), top_k=0, learning_rate=float(task["lr"]), lr_scheduler_type="constant",
        warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, beta=0.0, num_iterations=1,
        epsilon=task["clip"][0], epsilon_high=task["clip"][1], loss_type="dapo", scale_rewards="group",
        shuffle_dataset=False, gradient_checkpointing=False, model_init_kwargs={"dtype": getattr(torch, dtype)},
        bf16=dtype == "bfloat16",  # TRL turns bf16 autocast on unless told: off where fp32 is the box's best
        logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True, dataloader_num_workers=0,
    )
    peft_config = None if task["full"] else peft.LoraConfig(
        r=int(task["lora_rank"]), lora_alpha=int(task["lora_alpha"]), lora_dropout=0.0,
        target_modules=list(task["lora_targets"]), task_type="CAUSAL_LM")
    data = Dataset.from_list([{"prompt": r["prompt"], "answer": r["answer"]} for r in task["rows"]])
    t0 = time.perf_counter()
    trainer = GRPOTrainer(model=task["model_path"], reward_funcs=[make_reward(load_judge(task["repo"]), rewards)],
                          args=config, train_dataset=data, peft_config=peft_config)
    setup_s = time.perf_counter() - t0

    current = {"generate_s": 0.0, "score_s": 0.0, "gen_tokens": 0, "update_tokens": 0}

    def timed(name, fn, counts=False):
        def wrapper(*a, **kw):
            t = time.perf_counter()
            out = fn(*a, **kw)
            current[name] += time.perf_counter() - t
            if counts:  # the whole generation batch, padding excluded
                current["gen_tokens"] += int(out["completion_mask"].sum())
                current["update_tokens"] += int(out["completion_mask"].sum() + out["prompt_mask"].sum())
            return out
        return wrapper

    trainer._generate = timed("generate_s", trainer._generate)
    trainer._generate_and_score_completions = timed("score_s", trainer._generate_and_score_completions, True)
    steps: list[dict] = []

    class StepTimer(TrainerCallback):
        def on_train_begin(self, *a, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, *a, **kw):
            now = time.perf_counter()
            step_s, self.t = now - self.t, now
            steps.append({"step_s": step_s, "generate_s": current["generate_s"],
                          "env_s": current["score_s"] - current["generate_s"],
                          "update_s": step_s - current["score_s"], "logprob_s": 0.0,
                          "gen_tokens": current["gen_tokens"], "update_tokens": current["update_tokens"],
                          "reward": sum(rewards) / max(1, len(rewards))})
            rewards.clear()
            current.update(generate_s=0.0, score_s=0.0, gen_tokens=0, update_tokens=0)

    trainer.add_callback(StepTimer())
    trainer.train()
    result = {"side": "trl", "setup_s": setup_s, "steps": steps,
              "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
              "threads": torch.get_num_threads(),
              "params": sum(p.numel() for p in trainer.model.parameters()),
              "versions": {"python": sys.version.split()[0], "trl": trl.__version__, "torch": torch.__version__,
                           "transformers": transformers.__version__, "peft": peft.__version__}}
    Path(args.out).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
