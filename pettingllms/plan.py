"""Pre-flight plan: `python -m pettingllms.plan --config-name NAME [key=value ...]`.

Prints, without loading a model's weights, where each policy's ranks or worker, each rollout
engine and each Ray rollout worker go, the memory each device needs (weights, gradients, AdamW
state, activations at trainer.micro_batch_size, KV caches; pettingllms/planning.py says which are
exact and which estimates), and a verdict with the knob to turn. The same block opens every
training log.

    python -m pettingllms.plan --config-name math_L2_lora trainer=verl trainer.n_gpus_per_node=8
    python -m pettingllms.plan --config-name quickstart --gpus 1 --gpu-gib 24
Options: --gpus N (GPUs per node to plan for; default: the ones this machine has), --gpu-gib X
(each GPU's memory; default: this machine's first GPU, else 80), --host-gib X (default: this machine's RAM).
Exit 0 when it fits, 1 when it does not, 2 on a bad config.
"""
from __future__ import annotations

import sys
from typing import Any, Optional, Sequence

from pettingllms.errors import ConfigError

GIB = 1024 ** 3


def machine() -> tuple[int, int, int]:
    """(GPUs, bytes of the first GPU or 80 GiB, host RAM bytes) of this machine."""
    import os

    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    gpu_bytes = torch.cuda.get_device_properties(0).total_memory if gpus else 80 * GIB
    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return gpus, int(gpu_bytes), int(host)


def plan_for(cfg: Any, gpus: Optional[int] = None, gpu_bytes: Optional[int] = None,
             host_bytes: Optional[int] = None) -> Any:
    """The Plan of a validated run config (gpus etc.: this machine's where None)."""
    from pettingllms.planning import make_plan
    from pettingllms.trainer.assemble import plan_inputs
    from pettingllms.trainer.components import make_env_factory

    here = machine()
    agents = list(make_env_factory(cfg)().agents)
    return make_plan(plan_inputs(cfg, agents), here[0] if gpus is None else gpus,
                     here[1] if gpu_bytes is None else gpu_bytes, here[2] if host_bytes is None else host_bytes)


def main(argv: Optional[Sequence[str]] = None) -> int:
    from pettingllms.cli.config_loading import load_config

    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        print(__doc__)
        return 0
    opts: dict[str, str] = {}
    overrides: list[str] = []
    try:
        while args:
            a = args.pop(0)
            if a in ("--config-name", "-cn", "--gpus", "--gpu-gib", "--host-gib"):
                if not args:
                    raise ConfigError(f"{a} needs a value")
                opts[a] = args.pop(0)
            elif a.startswith("--config-name="):
                opts["--config-name"] = a.split("=", 1)[1]
            elif a.startswith("-"):
                raise ConfigError(f"unknown option '{a}' (see --help)")
            else:
                overrides.append(a)
        cfg = load_config(opts.get("--config-name", opts.get("-cn", "quickstart")), overrides)
        plan = plan_for(cfg, int(opts["--gpus"]) if "--gpus" in opts else None,
                        int(float(opts["--gpu-gib"]) * GIB) if "--gpu-gib" in opts else None,
                        int(float(opts["--host-gib"]) * GIB) if "--host-gib" in opts else None)
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n".join(plan.lines))
    return 0 if plan.fits else 1


if __name__ == "__main__":
    sys.exit(main())
