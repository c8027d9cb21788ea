"""Group filtering (`algorithm.group_filter`): which groups a step trains on.

A group (the samples sharing `sample.group_key`, see grouping.py) whose real rewards are all
equal, or which holds a single real sample (or episode), has zero variance: its advantages
are 0, so training on it spends an update on no signal (and still moves the weights through
the KL and entropy terms and the optimizer's state).

none      train on every sample (the default).
zero_var  drop the zero-variance groups; a policy left with no sample is not updated.
dapo      DAPO's dynamic sampling (arXiv 2503.14476): drop them, then run extra rollouts on
          further problems (up to `rollout.max_refill`) while fewer groups carry signal than the
          step's first rollout had groups, and keep at most that many (in rollout order).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from pettingllms.algorithms.advantages import is_padding, stat_values
from pettingllms.records import Sample

GROUP_FILTERS = ("none", "zero_var", "dapo")


def split_groups(samples: Sequence[Sample]) -> tuple[list[list[Sample]], list[list[Sample]]]:
    """(groups with reward variance, zero-variance groups), each in order of first sample.
    Padding samples go with their group but never count towards its variance."""
    groups: dict[tuple, list[Sample]] = {}
    for s in samples:
        groups.setdefault(tuple(s.group_key), []).append(s)
    signal, flat = [], []
    for members in groups.values():
        values = stat_values([s for s in members if not is_padding(s)])
        (signal if len(values) >= 2 and max(values) > min(values) else flat).append(members)
    return signal, flat


def filter_batches(batches: Sequence[Sequence[Sample]], mode: str) -> tuple[list[Sample], dict[str, float]]:
    """The samples to train on from the step's rollouts (the first, then any refills), and
    metrics: groups seen, kept and dropped, samples dropped, refills run. Groups are split per
    rollout, so a problem drawn again by a refill never merges with its earlier group."""
    if mode not in GROUP_FILTERS:
        raise ValueError(f"unknown algorithm.group_filter {mode!r}; choose from {list(GROUP_FILTERS)}")
    if mode == "none":
        return [s for b in batches for s in b], {}
    kept: list[list[Sample]] = []
    seen = dropped = dropped_samples = 0
    for samples in batches:
        signal, flat = split_groups(samples)
        seen += len(signal) + len(flat)
        dropped += len(flat)
        dropped_samples += sum(len(g) for g in flat)
        kept += signal
    target = sum(map(len, split_groups(batches[0]))) if batches else 0
    if mode == "dapo":
        kept = kept[:target]  # DAPO keeps a batch of the first rollout's size
    metrics = {"filter/groups_seen": float(seen), "filter/groups_dropped": float(dropped),
               "filter/groups_kept": float(len(kept)), "filter/samples_dropped": float(dropped_samples),
               "filter/dropped_frac": dropped / seen if seen else 0.0,
               "filter/refills": float(len(batches) - 1)}
    return [s for g in kept for s in g], metrics


def refill_batches(first: Any, mode: str, max_refill: int, more: Callable[[int], Any]) -> list[Any]:
    """The step's rollouts: `first`, then with dapo `more(i)` (the i-th extra rollout, on further
    problems) while fewer groups carry signal than `first` has groups, at most `max_refill` times."""
    batches = [first]
    if mode != "dapo":
        return batches
    signal, flat = split_groups(first.samples)
    target, have = len(signal) + len(flat), len(signal)
    while have < target and len(batches) - 1 < max_refill:
        batches.append(more(len(batches) - 1))
        have += len(split_groups(batches[-1].samples)[0])
    return batches
