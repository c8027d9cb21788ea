"""The episode loop: env turns -> engine calls -> Samples and committed trajectories.

One loop serves every strategy (strategies/): all problems advance together;
for turn t and agent a (in env.agents order) every live track sends one request,
and all of them go to the engine in ONE generate call. Each completion is
scored on its own deep copy of the track's committed env, so K candidates get
K different rewards and the next agent observes exactly the env that was
stepped. Samples of every agent that acted are kept, the final turn included.
"""
from __future__ import annotations

import copy
import hashlib
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from pettingllms.algorithms.config_access import cfg_get
from pettingllms.algorithms.grouping import group_key, normalize_group_by
from pettingllms.envs.base import MultiAgentEnv, StepResult
from pettingllms.records import Batch, Episode, Sample, Step
from pettingllms.rollout.engines.base import Completion, GenerationRequest, RolloutEngine, SamplingParams
from pettingllms.rollout.strategies import Strategy, get_strategy


def derive_seed(*parts: Any) -> int:
    """A stable 31-bit seed from any parts (independent of PYTHONHASHSEED)."""
    digest = hashlib.blake2b(repr(parts).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % (2 ** 31 - 1)


@dataclass
class _Track:
    """One committed line of play: an env, its episode record, and whether it ended."""
    problem_key: str
    index: int  # episode index within its problem (flat), 0 for tree
    env: MultiAgentEnv
    episode: Episode
    done: bool = False


@dataclass
class _Branch:
    env: MultiAgentEnv
    result: StepResult
    team_reward: float
    local_reward: float
    reward: float


@dataclass
class _Settings:
    strategy: Strategy
    k: int
    sampling: dict[str, Any]
    team_weight: float
    local_weight: float
    group_by: tuple[str, ...]
    env_workers: int


def _sampling_dict(node: Any) -> dict[str, Any]:
    out = {}
    for name in ("temperature", "top_p", "top_k", "max_new_tokens", "stop"):
        value = cfg_get(node, name, None)
        if value is not None:
            out[name] = [str(s) for s in value] if name == "stop" else value
    return out


def unique_keys(problems: list[dict[str, Any]]) -> list[str]:
    """Problem ids, made unique within the batch so two draws of one problem never share a group."""
    keys, seen = [], set()
    for i, p in enumerate(problems):
        base = str(p.get("id", i)) if isinstance(p, Mapping) else str(i)
        key = base if base not in seen else f"{base}#{i}"
        seen.add(key)
        keys.append(key)
    return keys


class Rollout:
    """Plays a batch of problems with the configured strategy and returns a Batch.

    `cfg` is the composed config (see pettingllms/config.py) or anything with its
    attributes: rollout.{strategy,k,sampling,env_workers}, reward.{team_weight,
    local_weight}, algorithm.group_by.
    """

    def __init__(self, engine: RolloutEngine, env_factory: Callable[[], MultiAgentEnv],
                 agent_policy: Mapping[str, str], cfg: Any) -> None:
        self.engine = engine
        self.env_factory = env_factory
        self.agent_policy = dict(agent_policy)
        self.cfg = cfg

    def _settings(self, k: int | None) -> _Settings:
        cfg = self.cfg
        k = int(k if k is not None else cfg_get(cfg, "rollout.k", 4))
        if k < 1:
            raise ValueError(f"rollout.k must be >= 1, got {k}")
        return _Settings(
            strategy=get_strategy(str(cfg_get(cfg, "rollout.strategy", "tree"))),
            k=k,
            sampling=_sampling_dict(cfg_get(cfg, "rollout.sampling", None)),
            team_weight=float(cfg_get(cfg, "reward.team_weight", 1.0)),
            local_weight=float(cfg_get(cfg, "reward.local_weight", 0.0)),
            group_by=normalize_group_by(cfg_get(cfg, "algorithm.group_by", None)),
            env_workers=int(cfg_get(cfg, "rollout.env_workers", 1)),
        )

    def run(self, problems: list[dict[str, Any]], seed: int, k: int | None = None, *,
            step: int = 0, keys: list[str] | None = None) -> Batch:
        """Play every problem to the end (env.done or max_turns); return all episodes.

        `keys` (one per problem, unique) replaces the problem keys derived here: a caller that
        splits one batch across workers passes the whole batch's keys, so groups and seeds stay
        what they would be in one process."""
        st = self._settings(k)
        keys = unique_keys(problems) if keys is None else list(keys)
        if len(keys) != len(problems) or len(set(keys)) != len(keys):
            raise ValueError("Rollout.run: keys must be unique, one per problem")
        tracks = self._start(problems, keys, seed, st)
        if not tracks:
            return Batch(step=step)
        agents = tuple(tracks[0].env.agents)
        max_turns = max(int(getattr(tr.env, "max_turns", 1)) for tr in tracks)
        workers = max(1, st.env_workers)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for turn in range(max_turns):
                playing = [tr for tr in tracks if not tr.done]
                if not playing:
                    break
                for tr in playing:
                    tr.episode.trajectory.num_turns = turn + 1
                for agent in agents:
                    acting = [tr for tr in playing if not tr.done]
                    if not acting:
                        break
                    self._act(acting, turn, agent, seed, st, pool)
                for tr in playing:
                    if not tr.done:
                        tr.env.end_turn()
                        tr.done = bool(tr.env.done) or turn + 1 >= int(getattr(tr.env, "max_turns", max_turns))
        for tr in tracks:
            traj = tr.episode.trajectory
            traj.team_reward = float(tr.env.team_reward())
            traj.success = bool(tr.env.success)
            st.strategy.finish(tr.episode, st.team_weight, st.local_weight)
        return Batch(step=step, episodes=[tr.episode for tr in tracks])

    def _start(self, problems: list[dict[str, Any]], keys: list[str], seed: int, st: _Settings) -> list[_Track]:
        tracks: list[_Track] = []
        agents: tuple[str, ...] | None = None
        for problem, key in zip(problems, keys):
            env = self.env_factory()
            env.reset(problem, derive_seed(seed, key, "reset"))
            if agents is None:
                agents = tuple(env.agents)
                missing = [a for a in agents if a not in self.agent_policy]
                if missing:
                    raise ValueError(f"agent_policy has no policy for agent(s) {missing} of env '{env.name}'")
            elif tuple(env.agents) != agents:
                raise ValueError(f"env_factory made envs with different agents: {agents} vs {tuple(env.agents)}")
            for j, track_env in enumerate(st.strategy.start(env, st.k)):
                episode_id = f"{key}/{st.strategy.name}{j}"
                episode = Episode(problem_id=key, episode_id=episode_id, env=env.name, problem=dict(problem))
                tracks.append(_Track(problem_key=key, index=j, env=track_env, episode=episode,
                                     done=bool(track_env.done)))
        return tracks

    def _act(self, acting: list[_Track], turn: int, agent: str, seed: int, st: _Settings,
             pool: ThreadPoolExecutor) -> None:
        """One (turn, agent) step for every live track: one engine call, K branches each."""
        n = st.strategy.samples_per_request(st.k)
        policy = self.agent_policy[agent]
        requests = [
            GenerationRequest(
                messages=tr.env.observation(agent),
                policy=policy,
                params=SamplingParams(n=n, seed=derive_seed(seed, tr.problem_key, tr.index, turn, agent),
                                      **st.sampling),
                request_id=f"{tr.episode.episode_id}/t{turn}/{agent}",
            )
            for tr in acting
        ]
        outputs = self.engine.generate(requests)
        _check_outputs(requests, outputs)
        jobs = [(tr, c) for tr, comps in zip(acting, outputs) for c in comps]
        # Each branch is an independent deep copy and results come back in job
        # order, so thread timing cannot change the outcome.
        branches = list(pool.map(lambda job: self._step_branch(job[0], agent, turn, job[1].text, st), jobs))
        pos = 0
        for tr, comps in zip(acting, outputs):
            mine = branches[pos:pos + len(comps)]
            pos += len(comps)
            rng = random.Random(derive_seed(seed, tr.problem_key, tr.index, turn, agent, "commit"))
            chosen = st.strategy.choose([b.reward for b in mine], rng)
            key = group_key(tr.problem_key, turn, agent, st.group_by)
            for i, (c, b) in enumerate(zip(comps, mine)):
                tr.episode.samples.append(_sample(tr, agent, turn, policy, c, b, key,
                                                  candidate=tr.index * n + i, committed=(i == chosen)))
            best = mine[chosen]
            tr.env = best.env
            tr.episode.trajectory.steps.append(Step(
                agent=agent, turn=turn, action=comps[chosen].text, local_reward=best.local_reward,
                team_reward=best.team_reward, observation=best.env.render(), info=dict(best.result.info)))
            tr.done = bool(best.env.done)

    def _step_branch(self, tr: _Track, agent: str, turn: int, text: str, st: _Settings) -> _Branch:
        env = copy.deepcopy(tr.env)
        try:
            result = env.step(agent, text)
            local = float(result.local_reward)
            team = float(env.team_reward())
        except Exception as e:  # an env bug, not a model error: fail loudly with context
            raise RuntimeError(f"env '{env.name}' failed stepping agent '{agent}' at turn {turn} "
                               f"of problem '{tr.problem_key}': {e!r}") from e
        return _Branch(env=env, result=result, team_reward=team, local_reward=local,
                       reward=st.team_weight * team + st.local_weight * local)


def _check_outputs(requests: list[GenerationRequest], outputs: list[list[Completion]]) -> None:
    if len(outputs) != len(requests):
        raise RuntimeError(f"engine returned {len(outputs)} results for {len(requests)} requests")
    for req, comps in zip(requests, outputs):
        if len(comps) != req.params.n:
            raise RuntimeError(f"engine returned {len(comps)} completions for request "
                               f"'{req.request_id}' with n={req.params.n}")


def _sample(tr: _Track, agent: str, turn: int, policy: str, c: Completion, b: _Branch,
            key: tuple, candidate: int, committed: bool) -> Sample:
    return Sample(
        agent=agent, turn=turn, problem_id=tr.problem_key, episode_id=tr.episode.episode_id,
        prompt_ids=list(c.prompt_ids), response_ids=list(c.response_ids), logprobs=list(c.logprobs),
        text=c.text, finish_reason=c.finish_reason, policy=policy,
        candidate=candidate, committed=committed, group_key=key,
        team_reward=b.team_reward, local_reward=b.local_reward, reward=b.reward,
        info=dict(b.result.info),
    )
