"""MetaAgent-X's runner (`rollout.strategy: autoevol`): M designs x N executions per problem.

Same surface as `pettingllms.rollout.runner.Rollout` (`run(problems, seed, k, step) -> Batch`),
so the trainer, advantages, metrics and evaluation use it unchanged. One step:

1. designer: one request per problem, n = M, all problems in ONE engine.generate call
   (rollout.sampling, with mas.designer_sampling.max_new_tokens: a design is a whole program);
2. executor: every (problem, design, execution) whose design has a program becomes a
   `DesignJob`; `pettingllms.mas.executor.run_designs` runs them all in the sandbox under
   `mas.budgets` and batches every node's LLM call across the live executions through the same
   engine (executor policy, rollout.sampling: sampled, so N executions of a design differ);
3. rewards (see pettingllms/envs/autoevol/env.py): each execution is graded by the env; every
   node call of execution j is an executor Sample with reward outcome_j; each design is a
   designer Sample with reward mean_j outcome_j + format terms (`mas.reward: pettingllms`), or
   with the published terms (`mas.reward: published`); both schemes are in every sample's info
   (`reward_pettingllms`, `reward_published`).

Designs are written in `mas.design_format` (the designer prompt and the checks follow it).

One Episode per (problem, design): its designer sample and the executor samples of its N
executions; the trajectory's team reward is the design's mean outcome. With an explicit `k`
(evaluation) each problem gets k designs x 1 execution, i.e. k independent end-to-end samples.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from pettingllms.envs.autoevol.env import AutoEvolEnv, design_source
from pettingllms.mas.executor import DesignJob
from pettingllms.mas.executor import run_designs as run_designs_in_sandbox
from pettingllms.records import Batch, Episode, Sample, Step
from pettingllms.rollout.engines.base import Completion, GenerationRequest, RolloutEngine, SamplingParams
from pettingllms.rollout.runner import RolloutSettings, check_outputs, checked_keys, derive_seed, reset_envs
from pettingllms.utils.counters import counted

DESIGNER, EXECUTOR = "designer", "executor"


@dataclass
class _Design:
    key: str  # problem key
    env: AutoEvolEnv
    index: int  # design index within its problem
    completion: Completion
    source: str | None


def designer_group_key(problem_key: str) -> tuple:
    return (problem_key, DESIGNER)


def executor_group_key(problem_key: str, design: int, rule: str) -> tuple:
    """`question`: all executor samples of a problem together; `design`: per (problem, design)."""
    return (problem_key, EXECUTOR) if rule == "question" else (problem_key, f"d{design}", EXECUTOR)


class AutoEvolRollout:
    """`run_designs` defaults to the sandboxed MAS executor; tests may pass a scripted one."""

    def __init__(self, engine: RolloutEngine, env_factory: Callable[[], AutoEvolEnv],
                 agent_policy: Mapping[str, str], settings: RolloutSettings,
                 run_designs: Callable[..., list] | None = None) -> None:
        self.engine = engine
        self.env_factory = env_factory
        self.agent_policy = dict(agent_policy)
        for agent in (DESIGNER, EXECUTOR):
            if agent not in self.agent_policy:
                raise ValueError(f"rollout.strategy=autoevol needs a policy for agent '{agent}' "
                                 f"(env.name=autoevol); got {sorted(self.agent_policy)}")
        self.settings = settings
        self.run_designs = run_designs or run_designs_in_sandbox

    @counted  # Batch.counters: the designs' sandbox runs (as Rollout.run)
    def run(self, problems: list[dict[str, Any]], seed: int, k: int | None = None, *,
            step: int = 0, keys: list[str] | None = None) -> Batch:
        """`keys` as in Rollout.run: the whole batch's problem keys when a caller splits it."""
        if not problems:
            return Batch(step=step)
        keys = checked_keys(problems, keys, "AutoEvolRollout.run")

        def prepare(env: AutoEvolEnv) -> None:
            env.design_format = self.settings.design_format

        envs = reset_envs(problems, keys, self.env_factory, AutoEvolEnv, "autoevol", seed, prepare)
        opts = envs[0][1].opts
        m, n = (int(k), 1) if k is not None else (int(opts.designs), int(opts.executions))
        designs = self._design(envs, m, seed)
        results = self._execute(designs, n, seed)
        return Batch(step=step, episodes=[self._episode(d, results, n, opts.executor_group)
                                          for d in designs])

    # ------------------------------------------------------------------ phases
    def _design(self, envs: list[tuple[str, AutoEvolEnv]], m: int, seed: int) -> list[_Design]:
        # a design is a program, longer than one node's reply: the designer's own token budget
        sampling = {**self.settings.sampling, "max_new_tokens": self.settings.designer_max_new_tokens}
        policy = self.agent_policy[DESIGNER]
        requests = [GenerationRequest(messages=env.observation(DESIGNER), policy=policy,
                                      params=SamplingParams(n=m, seed=derive_seed(seed, key, DESIGNER),
                                                            **sampling),
                                      request_id=f"{key}/design")
                    for key, env in envs]
        outputs = self.engine.generate(requests)
        check_outputs(requests, outputs)
        return [_Design(key=key, env=env, index=i, completion=c, source=design_source(c.text))
                for (key, env), comps in zip(envs, outputs) for i, c in enumerate(comps)]

    def _execute(self, designs: list[_Design], n: int, seed: int) -> dict[str, Any]:
        jobs = [DesignJob(design_source=d.source, question=d.env.question, job_id=_job_id(d, j),
                          design_format=self.settings.design_format, task=d.env.opts.task)
                for d in designs if d.source is not None for j in range(n)]
        if not jobs:
            return {}
        sampling = SamplingParams(n=1, **self.settings.sampling)
        results = self.run_designs(jobs, self.engine, self.agent_policy[EXECUTOR], sampling,
                                   self.settings.mas_budgets,
                                   derive_seed(seed, EXECUTOR))
        by_id = {r.job_id: r for r in results}
        missing = [j.job_id for j in jobs if j.job_id not in by_id]
        if missing:
            raise RuntimeError(f"run_designs returned no result for jobs {missing[:3]}")
        return by_id

    # ------------------------------------------------------------------ records
    def _episode(self, d: _Design, results: dict[str, Any], n: int, rule: str) -> Episode:
        key, env = d.key, d.env
        episode = Episode(problem_id=key, episode_id=f"{key}/d{d.index}", env=env.name,
                          problem=dict(env.problem))
        published = self.settings.mas_reward == "published"
        outcomes, ran, scores, exec_samples, steps = [], [], [], [], []
        for j in range(n):
            r = results.get(_job_id(d, j))
            ok = bool(r is not None and r.ok and r.answer is not None)
            outcome = env.grade(r.answer) if ok else 0.0
            outcomes.append(outcome)
            ran.append(1.0 if ok else 0.0)
            terms = env.published_terms([t.get("output", "") for t in getattr(r, "trace", [])
                                         if t.get("kind") == "llm"], r.answer if ok else None) \
                if r is not None else (0.0, 0.0)
            scores.append(outcome + sum(terms))
            if r is None:
                continue
            local = sum(terms) if published else 0.0
            steps.append(Step(agent=EXECUTOR, turn=j, action=str(r.answer if ok else r.error),
                              local_reward=outcome, team_reward=outcome,
                              info={"job_id": r.job_id, "ok": ok, "error": r.error,
                                    "nodes": len(r.node_calls)}))
            group = executor_group_key(key, d.index, rule)
            for i, call in enumerate(r.node_calls):
                exec_samples.append(_sample(call.completion, EXECUTOR, i, key, episode.episode_id,
                                            self.agent_policy[EXECUTOR], j, group, outcome, local,
                                            {"job_id": r.job_id, "node_id": call.node_id,
                                             "role": call.role, "design": d.index,
                                             "reward_pettingllms": outcome,
                                             "reward_published": outcome + sum(terms),
                                             "delivery_term": terms[0], "solution_term": terms[1]}))
        mean = sum(outcomes) / n
        ours = env.format_terms(d.completion.text, sum(ran) / n)
        theirs = sum(scores) / n - mean if d.source is not None else -mean  # published: 0 if no design
        fmt = theirs if published else ours
        designer = _sample(d.completion, DESIGNER, 0, key, episode.episode_id,
                           self.agent_policy[DESIGNER], d.index, designer_group_key(key), mean, fmt,
                           {"design_found": d.source is not None, "ran_fraction": sum(ran) / n,
                            "outcomes": outcomes, "reward_pettingllms": mean + ours,
                            "reward_published": mean + theirs, "reward_scheme": self.settings.mas_reward})
        episode.samples = [designer] + exec_samples
        episode.trajectory.steps = [Step(agent=DESIGNER, turn=0, action=d.completion.text, local_reward=fmt,
                                         team_reward=mean, info=dict(designer.info))] + steps
        episode.trajectory.team_reward = mean
        episode.trajectory.success = mean >= 1.0
        episode.trajectory.num_turns = 1
        return episode


def _job_id(d: _Design, j: int) -> str:
    return f"{d.key}/d{d.index}/x{j}"


def _sample(c: Completion, agent: str, turn: int, key: str, episode_id: str, policy: str,
            candidate: int, group: tuple, team: float, local: float, info: dict) -> Sample:
    """team = the outcome part, local = the designer's format terms (0 for the executor);
    the reward is their sum (reward.team_weight / local_weight do not apply here)."""
    return Sample(agent=agent, turn=turn, problem_id=key, episode_id=episode_id,
                  prompt_ids=list(c.prompt_ids), response_ids=list(c.response_ids),
                  logprobs=list(c.logprobs), text=c.text, finish_reason=c.finish_reason, policy=policy,
                  candidate=candidate, committed=True, group_key=group, team_reward=team,
                  local_reward=local, reward=team + local, info=info)
