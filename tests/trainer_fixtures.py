"""Helpers for the trainer tests: a toy env whose reward varies under a random model,
its dataset, a seeded random-token engine, and configs built through the real loader.

VowelEnv ("test_vowels"): agents writer then checker; each agent's local reward is the
share of vowels in its text (rounded to tenths), the team reward is the mean of the
agents' latest rewards. Even a random tiny model gets mixed groups from it, so
advantages are non-zero and the weights really move.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pandas as pd

from pettingllms.cli.config_loading import load_config
from pettingllms.envs.base import ENV_REGISTRY, MultiAgentEnv, StepResult, register_env
from pettingllms.rollout.engines.base import Completion, GenerationRequest, RolloutEngine
from pettingllms.rollout.engines.weights import WeightUpdate

ENV_NAME = "test_vowels"
SANDBOXED_ENV_NAME = "test_vowels_sandboxed"  # same data (env.data=test_vowels)


def vowel_share(text: str) -> float:
    letters = [c for c in text.lower() if c.isalpha()]
    if not letters:
        return 0.0
    return round(sum(c in "aeiou" for c in letters) / len(letters), 1)


class VowelEnv(MultiAgentEnv):
    agents = ("writer", "checker")

    def reset(self, problem: dict[str, Any], seed: int) -> None:
        self.problem = dict(problem)
        self.turn = 0
        self.scores = {a: 0.0 for a in self.agents}
        self.last = ""

    def observation(self, agent: str) -> list[dict[str, str]]:
        return [{"role": "system", "content": f"You are the {agent}. Write words with many vowels."},
                {"role": "user", "content": f"{self.problem['prompt']} Previous: {self.last[:40]}"}]

    def step(self, agent: str, action: str) -> StepResult:
        self.scores[agent] = vowel_share(action)
        self.last = action
        return StepResult(local_reward=self.scores[agent], info={"chars": len(action)})

    @property
    def done(self) -> bool:
        return self.turn >= self.max_turns

    def team_reward(self) -> float:
        return sum(self.scores.values()) / len(self.scores)

    @property
    def success(self) -> bool:
        return self.team_reward() >= 0.3


class SandboxedVowelEnv(VowelEnv):
    """VowelEnv whose checker also runs a program in the sandbox that kills itself with a signal:
    each checker step counts one sandbox run and one sandbox error (a crash; `refused` where the
    sandbox may not run code), in whichever process stepped the env."""

    def step(self, agent: str, action: str) -> StepResult:
        from pettingllms.sandbox import run_python

        result = super().step(agent, action)
        if agent == "checker":
            run_python("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
        return result


if ENV_NAME not in ENV_REGISTRY:
    register_env(ENV_NAME)(VowelEnv)
if SANDBOXED_ENV_NAME not in ENV_REGISTRY:
    register_env(SANDBOXED_ENV_NAME)(SandboxedVowelEnv)


def write_dataset(root: Path, n_train: int = 16, n_test: int = 4) -> Path:
    out = Path(root) / ENV_NAME
    out.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("test", n_test)):
        rows = [{"id": f"{split}-{i}", "prompt": f"Task {i}: say something.",
                 "source": "alpha" if i % 2 == 0 else "beta"} for i in range(n)]
        pd.DataFrame(rows).to_parquet(out / f"{split}.parquet")
    return out


def trainer_cfg(tmp_path: Path, *overrides: str, config: str = "tiny_test"):
    """The tiny_test experiment on the vowel env, writing under tmp_path."""
    data_root = tmp_path / "datasets"
    if not (data_root / ENV_NAME / "train.parquet").exists():
        write_dataset(data_root)
    base = [f"env.name={ENV_NAME}", f"env.data={ENV_NAME}", f"env.data_root={data_root}",
            "~env.options", "env.max_turns=1", f"trainer.output_dir={tmp_path / 'outputs'}", "trainer.logging.progress_bar=false"]
    return load_config(config, base + list(overrides))


class RandomTokenEngine(RolloutEngine):
    """Seeded random token ids (below `vocab`) with made-up logprobs; text is letters of the ids."""

    def __init__(self, vocab: int = 1000, length: int = 6) -> None:
        self.vocab, self.length = vocab, length
        self.loaded: list[str] = []

    def generate(self, requests: list[GenerationRequest]) -> list[list[Completion]]:
        out = []
        for req in requests:
            prompt_ids = [5 + (ord(c) % 200) for c in "".join(m["content"] for m in req.messages)][:64]
            comps = []
            for i in range(req.params.n):
                rng = random.Random(f"{req.params.seed}/{i}")
                ids = [rng.randrange(5, self.vocab) for _ in range(rng.randint(2, self.length))]
                comps.append(Completion(request_id=req.request_id, policy=req.policy, index=i,
                                        prompt_ids=prompt_ids, response_ids=ids,
                                        logprobs=[-1.0] * len(ids),
                                        text="".join("abcdefghijklmnopqrstuvwxyz"[t % 26] for t in ids),
                                        finish_reason="length"))
            out.append(comps)
        return out

    def update_weights(self, update: WeightUpdate) -> None:
        self.loaded.append(update.policy)


def fit(cfg, engine: Any = None) -> list[dict[str, Any]]:
    """Train a LocalTrainer on `cfg` (its engine, or `engine`) to the end; its metrics history."""
    from pettingllms.trainer.local import LocalTrainer

    trainer = LocalTrainer(cfg, engine=engine)
    try:
        return trainer.fit()
    finally:
        trainer.close()


def comparable(metrics: dict[str, Any]) -> dict[str, Any]:
    """A step's metrics without its wall-clock readings (timings, rates, `…_s`), which differ between
    two runs of the same steps; what is left must match exactly when a resumed run is exact."""
    return {k: v for k, v in metrics.items()
            if not k.startswith(("timing/", "time/", "tokens/generated_per_s")) and not k.endswith("_s")}
