"""One L2 training step of each solver + verifier example on the tiny model (examples/openai_math,
plain `openai`; examples/autogen_math, AG2 when the graph extra is installed): the program runs unmodified in a child process, its calls go through the trainer's
gateway to the real HF engine, and each becomes a sample of the agent that called, on that agent's
adapter, with the engine's own token ids and logprobs; each adapter is updated on its agent's
samples only; the step's trajectories name each sample's agent and call. The grader is replaced by
a stand-in whose outcome varies under a random model (the tiny model never solves a problem), so
that the groups carry a signal and both adapters really move."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from pettingllms.cli.config_loading import load_config
from pettingllms.envs.graph.env import GraphEnv
from pettingllms.records import read_episodes
from pettingllms.rollout.graph.runner import PROGRAM_STEP
from pettingllms.utils.models import load_tokenizer
from policy_helpers import all_equal

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = [{"id": f"q{i}", "question": f"What is {i} + 5?", "answer": str(i + 5), "source": "toy"}
            for i in range(4)]


def graph_cfg(tmp_path, *overrides, name="graph_openai_math"):
    data = tmp_path / "datasets" / "graph_toy"
    data.mkdir(parents=True)
    pd.DataFrame(PROBLEMS).to_parquet(data / "train.parquet")
    pd.DataFrame(PROBLEMS[:2]).to_parquet(data / "test.parquet")
    return load_config(name, [
        "model=tiny", "env.data=graph_toy", f"env.data_root={tmp_path / 'datasets'}", "rollout.k=2",
        "rollout.batch_size=2", "rollout.sampling.max_new_tokens=8", "rollout.max_prompt_tokens=256",
        "trainer.total_steps=1", f"trainer.output_dir={tmp_path / 'outputs'}", "trainer.logging.progress_bar=false",
        "trainer.logging.log_tensorboard=false", "trainer.micro_batch_size=16", "trainer.deterministic=true",
        "trainer.checkpoint.save_freq=0", "trainer.validation.val_freq=0", "trainer.optim.lr=1.0e-2",
        "trainer.optim.warmup_steps=0", *overrides])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["graph_openai_math", "graph_autogen_math"])
def test_one_l2_step_trains_each_agent_on_its_own_calls(tmp_path, monkeypatch, name):
    from pettingllms.trainer.local import LocalTrainer

    if name == "graph_autogen_math":
        pytest.importorskip("ag2", reason="the graph extra (PETTINGLLMS_EXTRAS=graph) is not installed")
    monkeypatch.chdir(ROOT)  # env.options.program is imported from the working directory
    monkeypatch.setattr(GraphEnv, "grade", lambda self, answer: float(len(answer or "") % 2))
    cfg = graph_cfg(tmp_path, name=name)
    trainer = LocalTrainer(cfg)
    try:
        inner = trainer.backend.engine.inner
        made: dict[tuple, tuple] = {}
        generate = inner.generate

        def recording(requests):
            out = generate(requests)
            for req, comps in zip(requests, out):
                for c in comps:
                    made[(req.policy, tuple(c.response_ids))] = (tuple(c.prompt_ids), tuple(c.logprobs))
            return out

        monkeypatch.setattr(inner, "generate", recording)
        assert trainer.agent_policy == {"solver": "solver", "verifier": "verifier"}
        before = {p: w.trainable_state() for p, w in trainer.workers.items()}
        metrics = trainer.fit()[-1]
        after = {p: w.trainable_state() for p, w in trainer.workers.items()}
        run_dir = trainer.run_dir
    finally:
        trainer.close()
    episodes = read_episodes(run_dir / "trajectories" / "step_1.jsonl")
    assert len(episodes) == 2 * 2  # batch_size problems x k executions
    tok = load_tokenizer(str(cfg.model.path))
    samples = [s for e in episodes for s in e.samples]
    for e in episodes:
        last = e.trajectory.steps[-1]
        assert last.agent == PROGRAM_STEP and last.info["ok"], last.info
        assert [s.agent for s in e.samples][:2] == ["solver", "verifier"]  # the example's call order
        assert [s.info["call"] for s in e.samples] == list(range(len(e.samples)))
    for s in samples:
        # the agent is the one that called: its own system prompt is in the prompt it was sampled from
        assert f"You are the {s.agent}." in tok.decode(s.prompt_ids)
        assert s.policy == s.agent and s.group_key == (s.problem_id, s.turn, s.agent)
        # the engine's ids and logprobs, as generated (nothing re-tokenised)
        assert made[(s.policy, tuple(s.response_ids))] == (tuple(s.prompt_ids), tuple(s.logprobs))
    counts = {a: sum(s.agent == a for s in samples) for a in ("solver", "verifier")}
    assert metrics["policy/solver/num_samples"] == counts["solver"]
    assert metrics["policy/verifier/num_samples"] == counts["verifier"]
    assert len({e.trajectory.team_reward for e in episodes}) == 2  # the stand-in grader varied
    for p in ("solver", "verifier"):
        assert not all_equal(before[p], after[p]), f"adapter {p} did not move"
    json.dumps(metrics)  # metrics stay plain numbers
