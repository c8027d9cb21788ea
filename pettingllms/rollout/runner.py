"""The episode loop: env turns -> engine calls -> Samples and committed trajectories.

One loop serves every strategy (strategies/): all problems advance together;
for turn t and agent a (in env.agents order, or env.turn_order) every live track
sends one request, and all of them go to the engine in ONE generate call. Each
completion is scored on its own deep copy of the track's committed env, so K
candidates get K different rewards and the next agent observes exactly the env
that was stepped. Agents grouped to act in parallel (env.turn_order / env.parallel)
all observe the same state and share one generate call; each is scored on that
state, then their chosen actions are applied in the group's order. Samples of
every agent that acted are kept, the final turn included.
"""
from __future__ import annotations

import copy
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from pettingllms.algorithms.grouping import DEFAULT_GROUP_BY, group_key, normalize_group_by
from pettingllms.config.agents import sampling_block
from pettingllms.config.schema import AlgorithmConfig, EnvConfig, MasConfig, RewardConfig, RolloutConfig
from pettingllms.errors import ConfigError
from pettingllms.envs.base import MultiAgentEnv, StepResult
from pettingllms.mas.budgets import MasBudgets
from pettingllms.records import Batch, Episode, Sample, Step
from pettingllms.rollout.engines.base import Completion, GenerationRequest, RolloutEngine, SamplingParams
from pettingllms.rollout.strategies import Strategy, get_strategy
from pettingllms.rollout.strategies.base import mixed_reward
from pettingllms.utils.counters import counted
from pettingllms.utils.seeding import sampling_seed as derive_seed
from pettingllms.utils.vision import message_images


@dataclass(frozen=True)
class RolloutSettings:
    """What a runner needs from the run config: the `rollout` block's episode settings, the
    `reward` mix and `algorithm.group_by`; MetaAgent-X's runner also reads the designer's token
    budget and the MAS budgets. Build it from the blocks with `RolloutSettings.of`."""
    strategy: str = "tree"  # tree | flat | autoevol
    k: int = 4
    sampling: dict[str, Any] = field(default_factory=dict)  # SamplingParams fields
    team_weight: float = 1.0
    local_weight: float = 0.5
    group_by: tuple[str, ...] = DEFAULT_GROUP_BY
    env_workers: int = 2
    designer_max_new_tokens: int = 768  # autoevol: a design is a whole program
    mas_budgets: MasBudgets = field(default_factory=MasBudgets)  # autoevol
    design_format: str = "pettingllms"  # autoevol: mas.design_format
    mas_reward: str = "pettingllms"  # autoevol: mas.reward (pettingllms | published)
    # agents.<name>.sampling / eval_sampling: the fields each agent overrides (SamplingParams names)
    agent_sampling: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    agent_eval_sampling: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    eval_temperature: float | None = None  # set: an evaluation rollout (eval.temperature)
    turn_order: tuple[Any, ...] = ()  # env.turn_order (names, or lists of names acting in parallel)
    parallel: bool = False  # env.parallel: every agent of a turn in one parallel group

    @classmethod
    def of(cls, rollout: RolloutConfig, reward: RewardConfig, algorithm: AlgorithmConfig,
           mas: MasConfig | None = None, agents: Any = None, env: EnvConfig | None = None) -> "RolloutSettings":
        from pettingllms.config.agents import agent_configs

        mas = mas or MasConfig()
        blocks = agent_configs(agents or {})
        order = tuple(tuple(str(a) for a in e) if isinstance(e, Sequence) and not isinstance(e, str) else str(e)
                      for e in (env.turn_order if env is not None else ()) or ())
        return cls(strategy=str(rollout.strategy), k=int(rollout.k), sampling=sampling_dict(rollout.sampling),
                   team_weight=float(reward.team_weight), local_weight=float(reward.local_weight),
                   group_by=normalize_group_by(algorithm.group_by), env_workers=int(rollout.env_workers),
                   designer_max_new_tokens=int(mas.designer_sampling.max_new_tokens),
                   mas_budgets=MasBudgets.from_cfg(mas.budgets), design_format=str(mas.design_format),
                   mas_reward=str(mas.reward),
                   agent_sampling={a: sampling_dict(b.sampling) for a, b in blocks.items() if b.sampling},
                   agent_eval_sampling={a: sampling_dict(b.eval_sampling) for a, b in blocks.items()
                                        if b.eval_sampling},
                   turn_order=order, parallel=bool(env.parallel) if env is not None else False)

    def sampling_for(self, agent: str) -> dict[str, Any]:
        """The SamplingParams fields `agent` samples with: rollout.sampling, then its own
        `sampling`; in evaluation then eval.temperature and its `eval_sampling`."""
        mine = {**self.sampling, **self.agent_sampling.get(agent, {})}
        if self.eval_temperature is not None:
            mine = {**mine, "temperature": float(self.eval_temperature), **self.agent_eval_sampling.get(agent, {})}
        return mine


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
    """One run call's settings: the built strategy, its k, and the rest as configured."""
    strategy: Strategy
    k: int
    cfg: RolloutSettings


def sampling_dict(sampling: Any) -> dict[str, Any]:
    """A `SamplingConfig` block (or a mapping of its fields) as SamplingParams keyword arguments:
    the fields that are set (every SamplingConfig field is a SamplingParams field)."""
    values = {k: v for k, v in sampling_block(sampling).items() if v is not None}
    if "stop" in values:
        values["stop"] = [str(s) for s in values["stop"]]
    return values


def turn_groups(turn_order: Sequence[Any], parallel: bool, agents: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """Who acts in a turn, in order: groups of agents that act in parallel (one agent: alone).
    Empty `turn_order`: the env's agents in its order. Every env agent must appear exactly once."""
    order = [tuple(e) if isinstance(e, (tuple, list)) else (e,) for e in turn_order] or [(a,) for a in agents]
    named = [a for g in order for a in g]
    unknown = sorted(set(named) - set(agents))
    twice = sorted({a for a in named if named.count(a) > 1})
    missing = [a for a in agents if a not in named]
    if unknown or twice or missing:
        raise ConfigError(f"env.turn_order {[list(g) for g in order]} must name each of the env's agents "
                          f"{list(agents)} once (unknown: {unknown}, twice: {twice}, missing: {missing})")
    if parallel:
        return (tuple(named),)
    return tuple(order)


def unique_keys(problems: list[dict[str, Any]]) -> list[str]:
    """Problem ids, made unique within the batch so two draws of one problem never share a group."""
    keys, seen = [], set()
    for i, p in enumerate(problems):
        base = str(p.get("id", i)) if isinstance(p, Mapping) else str(i)
        key = base if base not in seen else f"{base}#{i}"
        seen.add(key)
        keys.append(key)
    return keys


def checked_keys(problems: list[dict[str, Any]], keys: list[str] | None, who: str) -> list[str]:
    """The batch's problem keys: `keys` as a caller that split the batch passed them (checked:
    one per problem, unique), else derived here."""
    keys = unique_keys(problems) if keys is None else list(keys)
    if len(keys) != len(problems) or len(set(keys)) != len(keys):
        raise ValueError(f"{who}: keys must be unique, one per problem")
    return keys


def reset_envs(problems: list[dict[str, Any]], keys: list[str], env_factory: Callable[[], Any],
               env_type: type, strategy: str, seed: int,
               prepare: Callable[[Any], None] | None = None) -> list[tuple[str, Any]]:
    """(key, env) per problem for the strategies that own their env type (autoevol, graph): each
    env made, checked to be `env_type`, prepared, and reset with the problem's seed."""
    envs = []
    for problem, key in zip(problems, keys):
        env = env_factory()
        if not isinstance(env, env_type):
            raise ValueError(f"rollout.strategy={strategy} needs env.name={strategy}, got '{env.name}'")
        if prepare is not None:
            prepare(env)
        env.reset(problem, derive_seed(seed, key, "reset"))
        envs.append((key, env))
    return envs


class Rollout:
    """Plays a batch of problems with the strategy `settings` name (tree or flat) and returns a Batch."""

    def __init__(self, engine: RolloutEngine, env_factory: Callable[[], MultiAgentEnv],
                 agent_policy: Mapping[str, str], settings: RolloutSettings) -> None:
        self.engine = engine
        self.env_factory = env_factory
        self.agent_policy = dict(agent_policy)
        self.settings = settings

    def _settings(self, k: int | None) -> _Settings:
        k = int(k if k is not None else self.settings.k)
        if k < 1:
            raise ValueError(f"rollout.k must be >= 1, got {k}")
        return _Settings(get_strategy(self.settings.strategy), k, self.settings)

    @counted  # Batch.counters: the sandbox / judge events of this run (one run at a time per process)
    def run(self, problems: list[dict[str, Any]], seed: int, k: int | None = None, *,
            step: int = 0, keys: list[str] | None = None) -> Batch:
        """Play every problem to the end (env.done or max_turns); return all episodes.

        `keys` (one per problem, unique) replaces the problem keys derived here: a caller that
        splits one batch across workers passes the whole batch's keys, so groups and seeds stay
        what they would be in one process."""
        st = self._settings(k)
        keys = checked_keys(problems, keys, "Rollout.run")
        tracks = self._start(problems, keys, seed, st)
        if not tracks:
            return Batch(step=step)
        groups = turn_groups(st.cfg.turn_order, st.cfg.parallel, tuple(tracks[0].env.agents))
        max_turns = max(int(getattr(tr.env, "max_turns", 1)) for tr in tracks)
        workers = max(1, st.cfg.env_workers)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for turn in range(max_turns):
                playing = [tr for tr in tracks if not tr.done]
                if not playing:
                    break
                for tr in playing:
                    tr.episode.trajectory.num_turns = turn + 1
                for group in groups:
                    acting = [tr for tr in playing if not tr.done]
                    if not acting:
                        break
                    self._act(acting, turn, group, seed, st, pool)
                for tr in playing:
                    if not tr.done:
                        tr.env.end_turn()
                        tr.done = bool(tr.env.done) or turn + 1 >= int(getattr(tr.env, "max_turns", max_turns))
        for tr in tracks:
            traj = tr.episode.trajectory
            traj.team_reward = float(tr.env.team_reward())
            traj.success = bool(tr.env.success)
            st.strategy.finish(tr.episode, st.cfg.team_weight, st.cfg.local_weight)
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

    def _act(self, acting: list[_Track], turn: int, group: tuple[str, ...], seed: int, st: _Settings,
             pool: ThreadPoolExecutor) -> None:
        """One (turn, group) step for every live track: every agent of the group observes the
        track's committed env, all requests go in one engine call, K branches each."""
        n = st.strategy.samples_per_request(st.k)
        owners = [(tr, agent) for agent in group for tr in acting]
        requests = [
            GenerationRequest(
                messages=tr.env.observation(agent),
                policy=self.agent_policy[agent],
                params=SamplingParams(n=n, seed=derive_seed(seed, tr.problem_key, tr.index, turn, agent),
                                      **st.cfg.sampling_for(agent)),
                request_id=f"{tr.episode.episode_id}/t{turn}/{agent}",
            )
            for tr, agent in owners
        ]
        outputs = self.engine.generate(requests)
        check_outputs(requests, outputs)
        jobs = [(tr, agent, c) for (tr, agent), comps in zip(owners, outputs) for c in comps]
        # Each branch is an independent deep copy and results come back in job
        # order, so thread timing cannot change the outcome.
        branches = list(pool.map(lambda job: self._step_branch(job[0], job[1], turn, job[2].text, st), jobs))
        picks: dict[int, list[tuple[str, str, _Branch]]] = {id(tr): [] for tr in acting}
        pos = 0
        for (tr, agent), req, comps in zip(owners, requests, outputs):
            mine = branches[pos:pos + len(comps)]
            pos += len(comps)
            rng = random.Random(derive_seed(seed, tr.problem_key, tr.index, turn, agent, "commit"))
            chosen = st.strategy.choose([b.reward for b in mine], rng)
            key = group_key(tr.problem_key, turn, agent, st.cfg.group_by)
            images = message_images(req.messages)
            for i, (c, b) in enumerate(zip(comps, mine)):
                tr.episode.samples.append(_sample(tr, agent, turn, self.agent_policy[agent], c, b, key, images,
                                                  candidate=tr.index * n + i, committed=(i == chosen)))
            picks[id(tr)].append((agent, comps[chosen].text, mine[chosen]))
        for tr in acting:
            self._commit(tr, turn, picks[id(tr)], st)

    def _commit(self, tr: _Track, turn: int, picks: list[tuple[str, str, _Branch]], st: _Settings) -> None:
        """The track goes on from the first agent's chosen branch; the other agents of a parallel
        group (each scored on the shared state) then have their chosen actions applied on it, in order."""
        tr.env = env = picks[0][2].env
        for i, (agent, text, b) in enumerate(picks):
            if i > 0:
                if env.done:
                    break
                b = self._stepped(env, tr, agent, turn, text, st)
            tr.episode.trajectory.steps.append(Step(
                agent=agent, turn=turn, action=text, local_reward=b.local_reward, team_reward=b.team_reward,
                observation=env.render(), info=dict(b.result.info)))
        tr.done = bool(env.done)

    def _step_branch(self, tr: _Track, agent: str, turn: int, text: str, st: _Settings) -> _Branch:
        return self._stepped(copy.deepcopy(tr.env), tr, agent, turn, text, st)

    @staticmethod
    def _stepped(env: MultiAgentEnv, tr: _Track, agent: str, turn: int, text: str, st: _Settings) -> _Branch:
        """`env` stepped in place by `agent`'s action, with its rewards."""
        try:
            result = env.step(agent, text)
            local = float(result.local_reward)
            team = float(env.team_reward())
        except Exception as e:  # an env bug, not a model error: fail loudly with context
            raise RuntimeError(f"env '{env.name}' failed stepping agent '{agent}' at turn {turn} "
                               f"of problem '{tr.problem_key}': {e!r}") from e
        return _Branch(env=env, result=result, team_reward=team, local_reward=local,
                       reward=mixed_reward(team, local, st.cfg.team_weight, st.cfg.local_weight))


def check_outputs(requests: list[GenerationRequest], outputs: list[list[Completion]]) -> None:
    if len(outputs) != len(requests):
        raise RuntimeError(f"engine returned {len(outputs)} results for {len(requests)} requests")
    for req, comps in zip(requests, outputs):
        if len(comps) != req.params.n:
            raise RuntimeError(f"engine returned {len(comps)} completions for request "
                               f"'{req.request_id}' with n={req.params.n}")


def _sample(tr: _Track, agent: str, turn: int, policy: str, c: Completion, b: _Branch,
            key: tuple, images: list, candidate: int, committed: bool) -> Sample:
    return Sample(
        agent=agent, turn=turn, problem_id=tr.problem_key, episode_id=tr.episode.episode_id,
        prompt_ids=list(c.prompt_ids), response_ids=list(c.response_ids), logprobs=list(c.logprobs),
        text=c.text, finish_reason=c.finish_reason, policy=policy,
        candidate=candidate, committed=committed, group_key=key,
        team_reward=b.team_reward, local_reward=b.local_reward, reward=b.reward,
        info=dict(b.result.info), images=list(images),
    )
