"""Group keys: which samples are compared with each other.

A group is the set of samples whose rewards are normalised together. AT-GRPO
groups by (problem, turn, agent): the K candidates one agent drew from one
committed state. `algorithm.group_by` picks any subset of those fields for the
paper's grouping ablation; the empty subset puts the whole batch in one group.

Keys always list their fields in the canonical order (problem, turn, agent),
whatever order the config names them in, so equal choices give equal keys.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

from pettingllms.records import Group, GroupKey, Sample

GROUP_FIELDS: tuple[str, ...] = ("problem", "turn", "agent")
DEFAULT_GROUP_BY: tuple[str, ...] = GROUP_FIELDS


def normalize_group_by(group_by: Iterable[str] | None) -> tuple[str, ...]:
    """Check `group_by` and return its fields in canonical order.

    None means the AT-GRPO default (all three fields); an empty list means one
    batch-wide group.
    """
    if group_by is None:
        return DEFAULT_GROUP_BY
    if isinstance(group_by, str):  # a bare string is almost always a config slip
        raise ValueError(f"algorithm.group_by must be a list of fields, got the string {group_by!r}")
    fields = [str(f) for f in group_by]
    unknown = sorted(set(fields) - set(GROUP_FIELDS))
    if unknown:
        raise ValueError(f"algorithm.group_by has unknown field(s) {unknown}; choose from {list(GROUP_FIELDS)}")
    if len(set(fields)) != len(fields):
        raise ValueError(f"algorithm.group_by repeats a field: {fields}")
    return tuple(f for f in GROUP_FIELDS if f in fields)


def group_key(problem_id: str, turn: int, agent: str, group_by: Iterable[str] | None = None) -> GroupKey:
    """The group key of one sample, e.g. ("gsm8k-17", 0, "tool") for the default."""
    values = {"problem": problem_id, "turn": turn, "agent": agent}
    return tuple(values[f] for f in normalize_group_by(group_by))


def sample_group_key(sample: Sample, group_by: Iterable[str] | None = None) -> GroupKey:
    return group_key(sample.problem_id, sample.turn, sample.agent, group_by)


_USE_STORED: Any = object()  # sentinel: group by the key the rollout stored on each sample


def group_samples(samples: Sequence[Sample], group_by: Iterable[str] | None = _USE_STORED) -> list[Group]:
    """Split samples into groups, in order of each group's first sample.

    By default the key stored on each sample (`sample.group_key`, set by the
    rollout from `algorithm.group_by`) is used; pass `group_by` to recompute keys
    (for an ablation over already-collected samples). Samples keep their input
    order inside a group, so the result is deterministic.
    """
    recompute = group_by is not _USE_STORED
    if recompute:
        fields = normalize_group_by(group_by)
    groups: dict[GroupKey, list[Sample]] = {}
    for s in samples:
        key = group_key(s.problem_id, s.turn, s.agent, fields) if recompute else tuple(s.group_key)
        groups.setdefault(key, []).append(s)
    return [Group(key=k, samples=v) for k, v in groups.items()]
