"""Train: `python -m pettingllms.train --config-name NAME key=value ...` (console: pettingllms-train).

    python -m pettingllms.train --config-name quickstart
    python -m pettingllms.train --config-name math_L1_prompt trainer.total_steps=5 rollout.k=8
    python -m pettingllms.train --config-name quickstart --dry-run     # print the config, exit
    python -m pettingllms.train --config-name quickstart trainer.run_name=a trainer.checkpoint.resume=auto
    python -m pettingllms.train -m seed=0,1,2 algorithm=at_grpo,grpo hydra/launcher=joblib
The command line is Hydra's (see pettingllms/cli/app.py); the run folder is Hydra's run dir.
"""
from __future__ import annotations

import logging
import sys
from typing import Sequence

from omegaconf import DictConfig

from pettingllms.cli.app import JobInfo, run_main

log = logging.getLogger("pettingllms.train")


def _log_plan(cfg: DictConfig) -> None:
    """The pre-flight plan (python -m pettingllms.plan) at the top of the training log."""
    from pettingllms.errors import ConfigError
    from pettingllms.plan import plan_for

    try:
        lines = plan_for(cfg).lines
    except ConfigError:
        raise
    except Exception as e:  # an estimate: never the reason a run does not start
        log.warning("pre-flight plan not made (%s: %s)", type(e).__name__, e)
        return
    for line in lines:
        log.info("%s", line)


def _train(cfg: DictConfig, job: JobInfo | None = None) -> int:
    from pettingllms.trainer.local import train

    _log_plan(cfg)
    train(cfg, run_dir=job.output_dir if job else None)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(argv, prog="pettingllms.train", default_config="quickstart",
                    what="Train multi-agent LLM policies (AT-GRPO and baselines) from a Hydra config.",
                    kind="train", body=_train)


if __name__ == "__main__":
    sys.exit(main())
