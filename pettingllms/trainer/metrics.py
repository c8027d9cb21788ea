"""Per-step metrics computed from a Batch and the policy workers' update reports.

Names (all floats unless noted). reward/*, episode/*, advantage/*, groups/*, tokens/* and
samples/* cover the step's first rollout; with refills (algorithm.group_filter=dapo) the refill
rollouts' own are refill/reward/* and refill/episode/*, and sandbox/*, judge/* count every rollout.
  reward/mean, reward/<agent>/mean   mean reward over every sampled candidate (what the
                                     policy produces on average; the quantity GRPO raises)
  episode/team_reward, episode/success_rate, episode/turns   committed trajectories
  advantage/{mean,std,abs_mean,nonzero_frac,min,max}
  groups/count, groups/mixed_frac    share of groups whose rewards are not all equal
                                     (only those carry a learning signal)
  groups/zero_var_frac/<agent>       share of the groups holding <agent>'s samples whose
                                     rewards are all equal (or that hold one sample /
                                     episode): 1.0 means the agent got no signal this step
  advantage/abs_mean/<agent>         mean |advantage| of <agent>'s samples
  tokens/{prompt,response,response_mean}, samples/count, samples/truncated_frac
  sandbox/runs, sandbox/errors, sandbox/errors/<kind>   programs run in the sandbox this
                                     step and how many it stopped, by kind (timeout, memory,
                                     crash, refused, ...; see sandbox.error_kind)
  judge/errors, judge/errors/<kind>  math answers the judge failed on (counted "not equal")
                                     (both from Batch.counters: utils/counters.py)
  policy/<name>/<key>                what PolicyWorker.update returned
  train/<key>                        mean of policy/*/<key> over updated policies
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Iterable

from pettingllms.algorithms.advantages import stat_values
from pettingllms.records import Batch, Sample
from pettingllms.utils.counters import counter_delta  # noqa: F401 - the counter metrics live there


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def _std(xs: list[float]) -> float:
    if len(xs) < 2:
        return 0.0
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


def refill_metrics(batches: list[Batch], agents: Iterable[str] = ()) -> dict[str, float]:
    """refill/reward/* and refill/episode/* over a step's refill rollouts (every batch after the
    first); nothing when there were none."""
    if len(batches) < 2:
        return {}
    refills = Batch(step=batches[0].step, episodes=[e for b in batches[1:] for e in b.episodes])
    return {f"refill/{k}": v for k, v in batch_metrics(refills, agents).items()
            if k.startswith(("reward/", "episode/"))}


def summed_counters(batches: list[Batch]) -> dict[str, float]:
    """The counters (sandbox/*, judge/*) of every rollout of the step, summed."""
    out: dict[str, float] = defaultdict(float)
    for b in batches:
        for k, v in b.counters.items():
            out[k] += float(v)
    return dict(out)


def _real(samples: Iterable[Sample]) -> list[Sample]:
    return [s for s in samples if not s.info.get("padding", False)]


def batch_metrics(batch: Batch, agents: Iterable[str] = ()) -> dict[str, float]:
    samples = _real(batch.samples)
    m: dict[str, float] = {}
    rewards = [float(s.reward) for s in samples]
    m["reward/mean"] = _mean(rewards)
    m["reward/std"] = _std(rewards)
    by_agent: dict[str, list[float]] = defaultdict(list)
    for s in samples:
        by_agent[s.agent].append(float(s.reward))
    for agent in list(agents) or sorted(by_agent):
        m[f"reward/{agent}/mean"] = _mean(by_agent.get(agent, []))

    eps = batch.episodes
    m["episode/count"] = float(len(eps))
    m["episode/team_reward"] = _mean([float(e.trajectory.team_reward) for e in eps])
    m["episode/success_rate"] = _mean([1.0 if e.trajectory.success else 0.0 for e in eps])
    m["episode/turns"] = _mean([float(e.trajectory.num_turns) for e in eps])

    adv = [float(s.advantage) for s in samples]
    m["advantage/mean"] = _mean(adv)
    m["advantage/std"] = _std(adv)
    m["advantage/abs_mean"] = _mean([abs(a) for a in adv])
    m["advantage/nonzero_frac"] = _mean([1.0 if a != 0.0 else 0.0 for a in adv])
    m["advantage/min"] = min(adv) if adv else float("nan")
    m["advantage/max"] = max(adv) if adv else float("nan")

    groups: dict[tuple, list[float]] = defaultdict(list)
    for s in samples:
        groups[tuple(s.group_key)].append(float(s.reward))
    m["groups/count"] = float(len(groups))
    m["groups/mixed_frac"] = _mean([1.0 if len(set(r)) > 1 else 0.0 for r in groups.values()])

    m.update(agent_signal_metrics(samples, list(agents) or sorted(by_agent)))

    m["samples/count"] = float(len(samples))
    m["samples/truncated_frac"] = _mean([1.0 if s.finish_reason == "length" else 0.0 for s in samples])
    m["tokens/prompt"] = float(sum(len(s.prompt_ids) for s in samples))
    m["tokens/response"] = float(sum(len(s.response_ids) for s in samples))
    m["tokens/response_mean"] = _mean([float(len(s.response_ids)) for s in samples])
    return m


def policy_metrics(reports: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Prefix each worker's report with its policy name and average shared keys."""
    m: dict[str, float] = {}
    pooled: dict[str, list[float]] = defaultdict(list)
    for name, report in reports.items():
        for k, v in report.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            m[f"policy/{name}/{k}"] = float(v)
            if not k.startswith("timing/"):
                pooled[k].append(float(v))
    for k, vs in pooled.items():
        m[f"train/{k}"] = _mean(vs)
    return m


def timing_sum(reports: dict[str, dict[str, Any]], suffix: str) -> float:
    """Sum a timing key (e.g. 'logprob_s') across workers' reports, 0 if none reports it."""
    total = 0.0
    for report in reports.values():
        for k, v in report.items():
            if k.endswith(suffix) and isinstance(v, (int, float)):
                total += float(v)
    return total


def agent_signal_metrics(samples: list[Sample], agents: list[str]) -> dict[str, float]:
    """Per agent: how many of its groups were flat (no learning signal) and how large its
    advantages were. A group counts for every agent with a sample in it."""
    groups: dict[tuple, list[Sample]] = defaultdict(list)
    for s in samples:
        groups[tuple(s.group_key)].append(s)
    flat: dict[str, list[float]] = defaultdict(list)
    for members in groups.values():
        values = stat_values(members)
        zero = 1.0 if len(values) < 2 or max(values) == min(values) else 0.0
        for agent in {s.agent for s in members}:
            flat[agent].append(zero)
    m: dict[str, float] = {}
    for agent in agents:
        m[f"groups/zero_var_frac/{agent}"] = _mean(flat.get(agent, []))
        m[f"advantage/abs_mean/{agent}"] = _mean([abs(float(s.advantage)) for s in samples if s.agent == agent])
    return m


def starved_agents(history: list[dict[str, Any]], agents: Iterable[str], steps: int) -> list[tuple[str, int]]:
    """(agent, streak) for agents whose groups all had zero variance in each of the last
    `steps` logged steps (and again every further `steps`); read from the metrics history,
    so a resumed run counts the same way. `steps` <= 0 disables the check."""
    out = []
    if steps <= 0:
        return out
    for agent in agents:
        key, streak = f"groups/zero_var_frac/{agent}", 0
        for row in reversed(history):
            if row.get(key) != 1.0:
                break
            streak += 1
        if streak and streak % steps == 0:
            out.append((agent, streak))
    return out


def sandbox_warning(m: dict[str, float]) -> str | None:
    """A line to log when sandbox errors are more than half of this step's runs."""
    runs, errors = m.get("sandbox/runs", 0.0), m.get("sandbox/errors", 0.0)
    if runs <= 0 or errors * 2 <= runs:
        return None
    kinds = ", ".join(f"{k.rsplit('/', 1)[1]} {int(v)}" for k, v in sorted(m.items())
                      if k.startswith("sandbox/errors/"))
    return (f"{int(errors)} of {int(runs)} sandbox runs this step were stopped by the sandbox "
            f"({kinds}); their rewards are zero, not the model's doing")
