"""Typed records that flow through one training step.

Sample   one agent action (one of K candidates), with the real token ids and the
         sampler's logprobs. This is the unit of training data.
Step     one *committed* action of an episode, as shown in traces.
Trajectory  the committed path of one episode: its steps and final outcome.
Episode  a problem, its trajectory and every sample drawn while playing it.
Group    the samples that share one group key (what advantages normalise over).
Batch    everything one training step produced (episodes, and the sandbox / judge counts).

All records are plain dataclasses so they cross process boundaries and
serialise to JSONL for traces.
"""
from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal, TypedDict, Union

GroupKey = tuple  # e.g. ("gsm8k-17", 0, "tool"); fields chosen by algorithm.group_by


class TextPart(TypedDict):
    type: Literal["text"]
    text: str


class ImagePart(TypedDict):
    type: Literal["image"]
    image: Any  # a PIL image or an HxWx3 uint8 array


ContentPart = Union[TextPart, ImagePart]


class Message(TypedDict):
    """One chat message: text, or parts (images for vision-language models)."""
    role: str
    content: Union[str, list[ContentPart]]


@dataclass
class Sample:
    agent: str
    turn: int
    problem_id: str
    episode_id: str
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]  # per response token, under the distribution actually sampled from
    text: str = ""
    finish_reason: str = ""
    policy: str = ""
    candidate: int = 0  # index among the K candidates drawn from the same prompt
    committed: bool = False  # tree strategy: this candidate's branch was kept
    group_key: GroupKey = ()
    # reward parts: reward = team_weight * team_reward + local_weight * local_reward (the
    # flat strategy then replaces reward by its episode's return; see rollout/strategies/flat.py)
    team_reward: float = 0.0
    local_reward: float = 0.0
    reward: float = 0.0
    advantage: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)
    # the prompt's images in order (PIL images; their hashes once written to or read from JSONL,
    # where each image is a file: see `save_images`)
    images: list[Any] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        # field by field (as asdict does) but images by hash: asdict would deep-copy the pictures
        d = {f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "images"}
        d["group_key"] = list(self.group_key)
        d["images"] = [im if isinstance(im, str) else image_hash(im) for im in self.images]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Sample":
        d = dict(d)
        d["group_key"] = tuple(d.get("group_key", ()))
        return cls(**d)


@dataclass
class Step:
    agent: str
    turn: int
    action: str
    local_reward: float
    team_reward: float
    observation: str = ""  # rendered env state after the action
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Trajectory:
    steps: list[Step] = field(default_factory=list)
    team_reward: float = 0.0
    success: bool = False
    num_turns: int = 0


@dataclass
class Episode:
    problem_id: str
    episode_id: str
    env: str
    trajectory: Trajectory = field(default_factory=Trajectory)
    samples: list[Sample] = field(default_factory=list)
    problem: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = {}
        for f in dataclasses.fields(self):  # as asdict, but samples by their own to_dict
            value = getattr(self, f.name)
            d[f.name] = ([s.to_dict() for s in value] if f.name == "samples" else
                         dataclasses.asdict(value) if dataclasses.is_dataclass(value) else copy.deepcopy(value))
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Episode":
        traj = d.get("trajectory") or {}
        steps = [Step(**s) for s in traj.get("steps", [])]
        return cls(
            problem_id=d["problem_id"],
            episode_id=d["episode_id"],
            env=d["env"],
            trajectory=Trajectory(**{**traj, "steps": steps}),
            samples=[Sample.from_dict(s) for s in d.get("samples", [])],
            problem=d.get("problem", {}),
        )


@dataclass
class Group:
    key: GroupKey
    samples: list[Sample]


@dataclass
class Batch:
    step: int
    episodes: list[Episode] = field(default_factory=list)
    # events counted while the batch was played, as metrics (`sandbox/runs`,
    # `sandbox/errors/<kind>`, `judge/errors`, ...): filled by the runner that stepped the envs
    # (pettingllms/utils/counters.py), summed over Ray workers
    counters: dict[str, float] = field(default_factory=dict)

    @property
    def samples(self) -> list[Sample]:
        return [s for e in self.episodes for s in e.samples]

    def samples_for_agents(self, agents: Iterable[str]) -> list[Sample]:
        wanted = set(agents)
        return [s for s in self.samples if s.agent in wanted]


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):  # numpy / torch scalars
        return o.item()
    if isinstance(o, (set, tuple)):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def image_hash(image: Any) -> str:
    from pettingllms.utils.vision import image_hash as content_hash
    return content_hash(image)


def save_images(folder: str | Path, episodes: Iterable[Episode]) -> int:
    """Write each distinct image of the episodes' samples once, as `<hash>.png` in `folder` (the
    JSONL names them by hash); returns how many files were written."""
    folder, written, seen = Path(folder), 0, set()
    for episode in episodes:
        for s in episode.samples:
            for im in s.images:
                if isinstance(im, str) or (h := image_hash(im)) in seen:
                    continue
                seen.add(h)
                path = folder / f"{h}.png"
                if not path.exists():
                    folder.mkdir(parents=True, exist_ok=True)
                    im.save(path, format="PNG")
                    written += 1
    return written


def write_jsonl(path: str | Path, rows: Iterable[Any]) -> None:
    """Write records (dataclasses with to_dict, or dicts) one JSON object per line; the file is
    whole or not there (a failed write raises WriteFailed, pettingllms.utils.diskio)."""
    from pettingllms.utils.diskio import write_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for row in rows:
        d = row.to_dict() if hasattr(row, "to_dict") else (
            dataclasses.asdict(row) if dataclasses.is_dataclass(row) else row)
        lines.append(json.dumps(d, default=_json_default, ensure_ascii=False) + "\n")
    write_atomic(path, "".join(lines))


def read_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    with Path(path).open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def read_episodes(path: str | Path) -> list[Episode]:
    return [Episode.from_dict(d) for d in read_jsonl(path)]
