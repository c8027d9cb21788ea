"""Which weights the demo runs: the MetaAgent-X cold start when there is one, else the base model.

    demo_weights(cfg) -> DemoWeights        (reads mas.checkpoint)
    build_demo_engine(cfg, weights) -> the rollout engine serving `weights.roles`' policies

`mas.checkpoint`:
    auto     the newest complete checkpoint under <trainer.output_dir>/autoevol_sft/ (where
             scripts/train/autoeval/sft_cold_start.sh writes) made on this model.path; none there:
             the base model
    none     the base model ("" too)
    PATH     that checkpoint, or that run folder's latest one (it must fit model.path)
A checkpoint holds either one shared policy (designer and executor are one model, L1) or one
policy per role (`designer`, `executor`). A LoRA policy reaches the engine as its adapter
(`engine.update_weights`, as after a training step); a full fine-tuned one is served from its
saved HF folder (`policies/<name>/model`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pettingllms.errors import ConfigError
from pettingllms.trainer.checkpoint import latest_checkpoint, resolve_checkpoint

COLD_START_EXPERIMENT = "autoevol_sft"  # configs/autoevol_sft.yaml's experiment: the recipe's output folder
ROLES = ("designer", "executor")


@dataclass
class SavedPolicy:
    name: str
    kind: str  # lora | full
    base: str  # the model path it was trained on
    folder: Path  # <checkpoint>/policies/<name>


@dataclass
class DemoWeights:
    roles: dict[str, str]  # designer / executor -> engine policy name
    policies: dict[str, SavedPolicy | None]  # engine policy -> its saved weights (None: the base)
    base: str  # model.path
    checkpoint: Path | None = None
    note: str = ""  # one line for the page and the log
    skipped: list[str] = field(default_factory=list)  # auto: checkpoints passed over, and why


def _saved_policies(ckpt: Path) -> dict[str, SavedPolicy]:
    out = {}
    for folder in sorted((ckpt / "policies").glob("*/policy.json")):
        meta = json.loads(folder.read_text())
        out[folder.parent.name] = SavedPolicy(folder.parent.name, str(meta.get("kind")),
                                              str(meta.get("base")), folder.parent)
    return out


def _fit(ckpt: Path, base: str) -> tuple[DemoWeights | None, str]:
    """The demo's weights from `ckpt`, or (None, why it does not fit this model)."""
    saved = _saved_policies(ckpt)
    if set(saved) == {"shared"}:
        roles = {role: "shared" for role in ROLES}
    elif set(ROLES) <= set(saved):
        roles = {role: role for role in ROLES}
    else:
        return None, (f"it holds policies {sorted(saved)}; the demo serves one shared policy or one "
                      f"per role ({', '.join(ROLES)})")
    policies = {name: saved[name] for name in set(roles.values())}
    other = sorted({p.base for p in policies.values() if p.base != base})
    if other:
        return None, f"it was trained on {', '.join(other)}, not model.path={base}"
    bad = sorted(p.kind for p in policies.values() if p.kind not in ("lora", "full"))
    if bad:
        return None, f"unknown policy kind {bad}"
    kinds = "/".join(sorted({"LoRA adapter" if p.kind == "lora" else "full weights" for p in policies.values()}))
    layout = "one shared policy" if set(policies) == {"shared"} else "one policy per role"
    note = f"cold-start checkpoint {ckpt} ({kinds}, {layout}, on {base})"
    return DemoWeights(roles, policies, base, ckpt, note), ""


def _base(base: str, why: str) -> DemoWeights:
    return DemoWeights({role: "shared" for role in ROLES}, {"shared": None}, base, None,
                       f"base model {base} ({why})")


def demo_weights(cfg: Any) -> DemoWeights:
    from pettingllms.trainer.assemble import demo_config

    demo = demo_config(cfg)
    base, choice = demo.base, demo.checkpoint
    if choice in ("", "none"):
        return _base(base, "mas.checkpoint=none")
    if choice != "auto":
        ckpt = resolve_checkpoint(choice, "mas.checkpoint")
        weights, why = _fit(ckpt, base)
        if weights is None:
            raise ConfigError(f"mas.checkpoint={choice}: {why}")
        return weights
    root = Path(demo.output_dir) / COLD_START_EXPERIMENT
    found = [c for c in (latest_checkpoint(run) for run in root.iterdir() if run.is_dir())
             if c is not None] if root.is_dir() else []
    skipped = []
    for ckpt in sorted(found, key=lambda c: (c / "COMPLETE").stat().st_mtime, reverse=True):
        weights, why = _fit(ckpt, base)
        if weights is not None:
            weights.skipped = skipped
            return weights
        skipped.append(f"{ckpt}: {why}")
    fallback = _base(base, f"no cold-start checkpoint for it under {root}")
    fallback.skipped = skipped
    return fallback


def build_demo_engine(cfg: Any, weights: DemoWeights) -> Any:
    """The engine of rollout.engine with `weights` in place (ConfigError when it cannot take them)."""
    from pettingllms.rollout.engines.weights import read_adapter
    from pettingllms.trainer.assemble import build_rollout_engine, demo_config

    engine_name = demo_config(cfg).engine
    paths, ranks = {}, {}
    for name, saved in weights.policies.items():
        if saved is None or saved.kind == "lora":
            paths[name] = weights.base
        elif engine_name == "openai":
            raise ConfigError(f"{weights.checkpoint}: policy {name!r} holds full weights, which cannot be sent "
                              f"to a running server; serve {saved.folder / 'model'} (MODEL=...), use "
                              f"ENGINE=hf, or mas.checkpoint=none")
        else:
            paths[name] = str(saved.folder / "model")
        if saved is not None and saved.kind == "lora":
            ranks[name] = int(json.loads((saved.folder / "adapter" / "adapter_config.json").read_text())["r"])
    engine = build_rollout_engine(cfg, paths, lora_ranks=ranks or None)
    try:
        for name, saved in weights.policies.items():
            if saved is not None and saved.kind == "lora":
                engine.update_weights(read_adapter(saved.folder / "adapter", name))
    except Exception as e:
        engine.close()
        if isinstance(e, ConfigError):
            raise
        hint = (" (a vLLM server takes adapters when started with --enable-lora and "
                "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)" if engine_name == "openai" else "")
        raise ConfigError(f"the {engine_name} engine did not take the adapter of {weights.checkpoint}: "
                          f"{type(e).__name__}: {str(e)[:300]}{hint}; or set mas.checkpoint=none") from None
    return engine
