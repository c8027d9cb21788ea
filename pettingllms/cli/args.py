"""Argument handling shared by `pettingllms.train` and `pettingllms.evaluate`.

The command line mirrors Hydra's: `--config-name NAME key=value ...`, plus
`--dry-run` (or Hydra's `--cfg job`) to print the composed, validated config and
exit. Config problems print one line and exit with status 2.
"""
from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from omegaconf import DictConfig

from pettingllms.cli.config_loading import (CONFIG_GROUPS, config_dir, experiment_names, group_options,
                                            load_config, to_yaml)
from pettingllms.config import ConfigError

EXIT_CONFIG_ERROR = 2


@dataclass
class CliArgs:
    config_name: str
    overrides: list[str] = field(default_factory=list)
    config_dir: Path | None = None
    dry_run: bool = False
    help: bool = False


def usage(prog: str, default_config: str, what: str) -> str:
    cdir = config_dir()
    groups = "\n".join(f"    {g}: {', '.join(group_options(g, cdir)) or '(none)'}" for g in CONFIG_GROUPS)
    return (
        f"usage: python -m {prog} [--config-name NAME] [--config-dir DIR] [--dry-run] [key=value ...]\n\n"
        f"{what}\n\n"
        f"options:\n"
        f"  --config-name, -cn NAME  experiment config in {cdir} (default: {default_config})\n"
        f"  --config-dir, -cd DIR    another configs folder\n"
        f"  --dry-run, --cfg job     print the composed config and exit\n"
        f"  -h, --help               this help\n\n"
        f"experiments: {', '.join(experiment_names(cdir))}\n"
        f"config groups (pick with group=option, e.g. env=sudoku):\n{groups}\n"
        f"any field is set with dotted keys, e.g. trainer.total_steps=5 rollout.k=8 seed=1\n")


def parse_args(argv: Sequence[str], default_config: str) -> CliArgs:
    args = CliArgs(config_name=default_config)
    it = iter(argv)
    for a in it:
        if a in ("-h", "--help"):
            args.help = True
        elif a in ("--dry-run", "--dry_run"):
            args.dry_run = True
        elif a == "--cfg":
            kind = next(it, "job")
            if kind not in ("job", "all"):
                raise ConfigError(f"--cfg {kind}: only 'job' is supported")
            args.dry_run = True
        elif a in ("--config-name", "-cn"):
            args.config_name = _value(it, a)
        elif a.startswith("--config-name="):
            args.config_name = a.split("=", 1)[1]
        elif a in ("--config-dir", "-cd", "--config-path", "-cp"):
            args.config_dir = Path(_value(it, a)).resolve()
        elif a.startswith(("--config-dir=", "--config-path=")):
            args.config_dir = Path(a.split("=", 1)[1]).resolve()
        elif a.startswith("-") and not a.startswith("~"):
            raise ConfigError(f"unknown option '{a}' (see --help)")
        else:
            args.overrides.append(a)
    if args.config_name.endswith(".yaml"):
        args.config_name = args.config_name[: -len(".yaml")]
    return args


def _value(it, flag: str) -> str:
    v = next(it, None)
    if v is None:
        raise ConfigError(f"{flag} needs a value")
    return v


def run_main(argv: Sequence[str] | None, *, prog: str, default_config: str, what: str,
             body: Callable[[DictConfig], int | None]) -> int:
    """Parse, compose, validate, then run `body(cfg)`; config errors exit 2 with one line."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parse_args(argv, default_config)
        if args.help:
            print(usage(prog, default_config, what))
            return 0
        cfg = load_config(args.config_name, args.overrides, args.config_dir)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    if args.dry_run:
        print(to_yaml(cfg), end="")
        return 0
    try:
        rc = body(cfg)
    except ConfigError as e:  # raised by components checking their own blocks
        print(f"error: {e}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    return int(rc or 0)
