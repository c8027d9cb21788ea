"""Supervised fine-tuning: `python -m pettingllms.sft --config-name autoevol_sft key=value ...`.

    python -m pettingllms.sft --config-name autoevol_sft                     # the MetaAgent-X cold start
    python -m pettingllms.sft --config-name autoevol_sft sft.epochs=1 --dry-run
The checkpoint it writes is what `trainer.checkpoint.init_from` takes.
"""
from __future__ import annotations

import sys
from typing import Sequence

from omegaconf import DictConfig

from pettingllms.cli.app import JobInfo, run_main


def _sft(cfg: DictConfig, job: JobInfo | None = None) -> int:
    from pettingllms.trainer.sft import run_sft

    run_sft(cfg, run_dir=job.output_dir if job else None)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(argv, prog="pettingllms.sft", default_config="autoevol_sft",
                    what="Supervised fine-tuning (token-level NLL on each row's reply) of the policies.",
                    kind="train", body=_sft)


if __name__ == "__main__":
    sys.exit(main())
