"""One training step of each solver + verifier example on the tiny model: L2 (one adapter per
agent) on examples/openai_math (plain `openai`) and examples/autogen_math (AG2, when the graph extra
is installed), and L3 (one model per agent) on a chat loop written with `openai` (CHAT below). The
program runs unmodified in a child process, its calls go through the trainer's gateway to the real
HF engine, and each becomes a sample of the agent that called, on that agent's policy, with the
engine's own token ids and logprobs; each policy is updated on its agent's samples only; the step's
trajectories name each sample's agent and call. In the chat loop the solver's second call resends
its conversation: its prompt begins with its first call's prompt and sampled reply ids
(rollout/graph/prefix.py). The grader is replaced by a stand-in whose outcome varies under a random
model (the tiny model never solves a problem), so that the groups carry a signal and both policies
really move."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from pettingllms.cli.config_loading import load_config
from pettingllms.envs.graph.env import GraphEnv
from pettingllms.records import read_episodes
from pettingllms.rollout.engines.base import GenerationRequest, render_chat
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


CHAT = '''
def run(problem, clients):  # the solver's chat goes on after the verifier's note
    chat = [{"role": "system", "content": "You are the solver."}, {"role": "user", "content": problem["question"]}]
    draft = clients["solver"].chat.completions.create(model="m", messages=chat).choices[0].message.content
    note = clients["verifier"].chat.completions.create(model="m", messages=[
        {"role": "system", "content": "You are the verifier."}, {"role": "user", "content": draft}])
    chat += [{"role": "assistant", "content": draft},
             {"role": "user", "content": "A verifier says: " + note.choices[0].message.content}]
    return clients["solver"].chat.completions.create(model="m", messages=chat).choices[0].message.content
'''


@pytest.mark.slow
@pytest.mark.parametrize("name, level", [("graph_openai_math", "L2"), ("graph_autogen_math", "L2"),
                                         ("graph_openai_math", "L3")])
def test_one_step_trains_each_agent_on_its_own_calls(tmp_path, monkeypatch, name, level):
    from pettingllms.trainer.local import LocalTrainer

    if name == "graph_autogen_math":
        pytest.importorskip("ag2", reason="the graph extra (PETTINGLLMS_EXTRAS=graph) is not installed")
    overrides = []
    if level == "L3":
        (tmp_path / "chat_program.py").write_text(CHAT)
        monkeypatch.chdir(tmp_path)
        overrides = ["policies=per_agent_model", "env.options.program=chat_program"]
    else:
        monkeypatch.chdir(ROOT)  # env.options.program is imported from the working directory
    monkeypatch.setattr(GraphEnv, "grade", lambda self, answer: float(len(answer or "") % 2))
    cfg = graph_cfg(tmp_path, *overrides, name=name)
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
        lora = {p: w.spec.is_lora for p, w in trainer.workers.items()}
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
    assert lora == ({"solver": False, "verifier": False} if level == "L3" else {"solver": True, "verifier": True})
    if level == "L3":  # the solver's second call extends its first
        for e in episodes:
            first, note, second = e.samples  # solver, verifier, solver again
            assert (second.agent, second.turn, second.info["extends"]) == ("solver", 1, 0)
            head = first.prompt_ids + first.response_ids  # the ids it was sampled with, not re-tokenised
            assert second.prompt_ids[:len(head)] == head and len(second.prompt_ids) > len(head)
            messages = e.trajectory.steps[2].info["messages"]
            assert tok.decode(second.prompt_ids) == render_chat(tok, GenerationRequest(messages=messages))
        assert metrics["graph/prefix_kept"] == len(episodes) and "graph/prefix_misses" not in metrics
    counts = {a: sum(s.agent == a for s in samples) for a in ("solver", "verifier")}
    assert metrics["policy/solver/num_samples"] == counts["solver"]
    assert metrics["policy/verifier/num_samples"] == counts["verifier"]
    assert len({e.trajectory.team_reward for e in episodes}) == 2  # the stand-in grader varied
    for p in ("solver", "verifier"):
        assert not all_equal(before[p], after[p]), f"policy {p} did not move"
    json.dumps(metrics)  # metrics stay plain numbers
