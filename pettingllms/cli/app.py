"""Hydra's own command line for `pettingllms.train` and `pettingllms.evaluate`.

Everything after the program name goes to `hydra.main` (multirun `-m`, `hydra.run.dir`,
`hydra.sweep.dir`, `hydra/launcher=joblib`, `--cfg`, `--info`, `--shell-completion`, ...),
after a pre-flight that Hydra cannot do for us:

* every job of the command (each point of a `-m` sweep) is composed and validated with
  `load_config` first, so a misspelt key or bad value prints one line and exits 2 instead
  of a Hydra traceback;
* value overrides are handed to Hydra as `++key=value`: YAML files need not list every
  schema field, the schema (`pettingllms.config`) supplies the defaults;
* the run folder defaults to `<trainer.output_dir>/<experiment>/<run>/` (Hydra's run dir;
  a sweep's jobs go to `<sweep dir>/<job number>/`), so resume keeps finding its folder.

`--config-dir/-cd DIR` and `hydra.searchpath=[file:///abs/dir,pkg://module/dir]` (an override
or the primary config's `hydra:` block) add folders to the config search path, as in Hydra:
the primary config and `group=option` files may come from them or from `configs/`. The
`--config-dir` folder is searched first, so its files shadow ours (Hydra 1.3 itself would put
it after the main config path: here it becomes hydra.main's config_path and `configs/` is
passed as Hydra's --config-dir); `hydra.searchpath` entries follow `configs/`, as in Hydra.
The pre-flight composes with the same search path (`config_loading.SearchPath`).

Kept from before: `--config-name/-cn`, `--dry-run` (prints each job's validated config with
every schema default filled in) and `--help`.
"""
from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from omegaconf import DictConfig

from pettingllms.cli.config_loading import (CONFIG_GROUPS, SearchPath, experiment_names, group_options,
                                            load_config, quote, search_path, to_yaml)
from pettingllms.config.validate import validate
from pettingllms.errors import ConfigError, WriteFailed

EXIT_CONFIG_ERROR = 2
MAX_PREFLIGHT_JOBS = 256  # a bigger sweep is checked on its first jobs; each job validates again

# Hydra's flags (hydra/_internal/utils.py:get_args_parser) by how many values they take.
_HYDRA_VALUE_FLAGS = {"--cfg", "-c", "--package", "-p", "--experimental-rerun"}
_HYDRA_BOOL_FLAGS = {"--run", "-r", "--multirun", "-m", "--resolve", "--hydra-help", "--version",
                     "--shell-completion", "-sc"}
_INFO_CHOICES = {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"}


@dataclass
class JobInfo:
    """What the entry point's body learns from Hydra about its job."""
    output_dir: Path  # Hydra's run folder for this job (train: the run folder)
    multirun: bool


@dataclass
class Command:
    config_name: str
    config_dir: Path | None  # --config-dir: added to the search path, ahead of configs/
    hydra_flags: list[str]
    overrides: list[str]
    dry_run: bool = False
    help: bool = False

    @property
    def multirun(self) -> bool:
        return "-m" in self.hydra_flags or "--multirun" in self.hydra_flags

    def has_flag(self, *names: str) -> bool:
        return any(f.split("=", 1)[0] in names for f in self.hydra_flags)


def split_argv(argv: Sequence[str], default_config: str) -> Command:
    """Separate our flags, Hydra's flags and overrides (in any order, as recipes append)."""
    cmd = Command(default_config, None, [], [])
    args = list(argv)
    i = 0

    def value(flag: str) -> str:
        nonlocal i
        if i + 1 >= len(args):
            raise ConfigError(f"{flag} needs a value")
        i += 1
        return args[i]

    while i < len(args):
        a = args[i]
        name, eq, inline = a.partition("=") if a.startswith("-") else (a, "", "")
        if a in ("-h", "--help"):
            cmd.help = True
        elif a in ("--dry-run", "--dry_run"):
            cmd.dry_run = True
        elif name in ("--config-name", "-cn"):
            cmd.config_name = inline if eq else value(a)
        elif name in ("--config-dir", "-cd", "--config-path", "-cp"):
            cmd.config_dir = Path(inline if eq else value(a)).resolve()
        elif name in _HYDRA_VALUE_FLAGS:
            cmd.hydra_flags += [a] if eq else [a, value(a)]
        elif a in _HYDRA_BOOL_FLAGS:
            cmd.hydra_flags.append(a)
        elif name in ("--info", "-i"):
            cmd.hydra_flags.append(a)
            if not eq and i + 1 < len(args) and args[i + 1] in _INFO_CHOICES:
                i += 1
                cmd.hydra_flags.append(args[i])
        elif a.startswith("-") and not a.startswith("~"):
            raise ConfigError(f"unknown option '{a}' (see --help)")
        else:
            cmd.overrides.append(a)
        i += 1
    if cmd.config_name.endswith(".yaml"):
        cmd.config_name = cmd.config_name[: -len(".yaml")]
    return cmd


def usage(prog: str, default_config: str, what: str, sp: SearchPath | None = None) -> str:
    sp = sp or search_path(default_config)
    groups = "\n".join(f"    {g}: {', '.join(group_options(g, sp)) or '(none)'}" for g in CONFIG_GROUPS)
    return (
        f"usage: python -m {prog} [--config-name NAME] [--config-dir DIR] [--dry-run] [-m] [key=value ...]\n\n"
        f"{what}\n\n"
        f"options:\n"
        f"  --config-name, -cn NAME  experiment config in {', '.join(map(str, sp.primary_dirs))} "
        f"(default: {default_config})\n"
        f"  --config-dir, -cd DIR    add a configs folder to the search path, ahead of {sp.project}\n"
        f"                           (its experiments, group options and shadowing files)\n"
        f"  --dry-run                print each job's validated config (all defaults filled in) and exit\n"
        f"  -m, --multirun           sweep: seed=0,1,2 algorithm=at_grpo,grpo (one job per combination)\n"
        f"  --cfg job|hydra|all      print Hydra's composed config and exit (--resolve to resolve it)\n"
        f"  --info [all|defaults|searchpath|plugins|...]   Hydra's information about the composition\n"
        f"  --shell-completion, -sc  eval \"$(python -m {prog} -sc install=bash)\" for tab completion\n"
        f"  --hydra-help             Hydra's own help (launchers, sweepers, hydra.* settings)\n"
        f"  -h, --help               this help\n\n"
        f"experiments: {', '.join(experiment_names(sp))}\n"
        f"config groups (pick with group=option, e.g. env=sudoku):\n{groups}\n"
        f"any field is set with dotted keys, e.g. trainer.total_steps=5 rollout.k=8 seed=1;\n"
        f"~key restores a field's default; hydra.run.dir=DIR / hydra.sweep.dir=DIR place the run;\n"
        f"hydra.searchpath=[file:///abs/dir,pkg://module/dir] adds config folders after {sp.project.name}/;\n"
        f"hydra/launcher=joblib runs a sweep's jobs in parallel processes.\n")


# ---------------------------------------------------------------------- overrides
def _parse(overrides: Sequence[str]):
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        return OverridesParser.create().parse_overrides(list(overrides))
    except HydraException as e:
        first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        raise ConfigError(f"bad override: {first}") from None


def expand_jobs(overrides: Sequence[str], multirun: bool) -> list[list[str]]:
    """The job overrides of each point of the sweep (one job without -m)."""
    parsed = _parse(overrides)
    axes: list[list[str]] = []
    for ov in parsed:
        if ov.is_hydra_override():
            continue
        if ov.is_sweep_override():
            if not multirun:
                raise ConfigError(f"'{ov.input_line}' is a sweep: add -m (--multirun) to run one job per value")
            try:
                values = list(ov.sweep_string_iterator())
            except Exception:  # glob(...) needs Hydra's config loader: each job validates itself
                continue
            axes.append([f"{ov.get_key_element()}={v}" for v in values])
        else:
            axes.append([ov.input_line])
    return [list(job) for job in itertools.islice(itertools.product(*axes), MAX_PREFLIGHT_JOBS)]


def hydra_overrides(overrides: Sequence[str]) -> list[str]:
    """Rewrite value overrides as `++key=value` (set or add); groups, deletions and hydra.* as typed."""
    out = []
    for ov in _parse(overrides):
        line = ov.input_line
        if ov.is_hydra_override() or ov.is_delete() or (ov.key_or_group in CONFIG_GROUPS and ov.package is None):
            out.append(line)
        else:
            out.append("++" + line.lstrip("+"))
    return out


def _key(override: str) -> str:
    return override.lstrip("+").split("=", 1)[0]


def _user_set(overrides: Sequence[str], key: str) -> bool:
    return any(_key(o) == key for o in overrides)


def command_search_path(cmd: Command) -> SearchPath:
    """--config-dir, configs/ and the hydra.searchpath override's entries (Hydra takes the first one)."""
    given = [o for o in cmd.overrides if _key(o) == "hydra.searchpath"]
    entries = _parse(given[:1])[0].value() if given else None
    return search_path(cmd.config_name, cmd.config_dir, entries)


def with_search_path(overrides: Sequence[str], sp: SearchPath) -> list[str]:
    """The user's hydra.searchpath replaced by the resolved one the pre-flight composed with."""
    return [o for o in overrides if _key(o) != "hydra.searchpath"] + sp.searchpath_overrides()


def default_output_dirs(cmd: Command, cfgs: list[DictConfig], kind: str) -> list[str]:
    """hydra.run.dir / hydra.sweep.dir settings, unless the command sets them.

    train: `<output_dir>/<experiment>/<run>` where <run> is trainer.run_name or a fresh
    timestamp (the folder a checkpoint to resume lives in, for trainer.checkpoint.resume=PATH);
    evaluate (and the demo entry points): `<output_dir>/<experiment>/<kind>/<timestamp>`. A sweep's jobs are numbered
    folders inside, so they never share one.
    """
    from pettingllms.trainer.assemble import run_place
    from pettingllms.trainer.outputs import default_run_folder, fresh_dir

    first = run_place(cfgs[0])
    experiment_dir = Path(first.output_dir) / first.experiment
    key = "hydra.sweep.dir" if cmd.multirun else "hydra.run.dir"
    out: list[str] = []
    if not _user_set(cmd.overrides, key):
        if kind != "train":  # eval, serve, demo: a fresh folder for Hydra's log and record
            root = fresh_dir(experiment_dir / kind)
        elif cmd.multirun:  # each job checks its own numbered folder (resume or refuse to overwrite)
            root = experiment_dir / first.run_name if first.run_name else fresh_dir(experiment_dir)
        else:
            root = default_run_folder(first)
        out.append(f"{key}={quote(root)}")
    if cmd.multirun and not _user_set(cmd.overrides, "hydra.sweep.subdir"):
        out.append("hydra.sweep.subdir=${hydra.job.num}")
    return out


def check_resume_folder(cmd: Command, cfgs: list[DictConfig]) -> None:
    """resume=auto needs a folder that a rerun finds again: a run name or an explicit dir."""
    placed = _user_set(cmd.overrides, "hydra.sweep.dir" if cmd.multirun else "hydra.run.dir")
    from pettingllms.trainer.assemble import run_place

    for place in map(run_place, cfgs):
        if place.resume == "auto" and not place.run_name and not placed:
            raise ConfigError("trainer.checkpoint.resume=auto needs a stable run folder: set trainer.run_name or "
                              "hydra.run.dir (or pass trainer.checkpoint.resume=PATH to a checkpoint folder)")


# ---------------------------------------------------------------------- entry
def run_main(argv: Sequence[str] | None, *, prog: str, default_config: str, what: str, kind: str,
             body: Callable[[DictConfig, JobInfo], int | None]) -> int:
    """Pre-flight (one-line errors, exit 2), then hand the command to `hydra.main`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        cmd = split_argv(argv, default_config)
        sp = command_search_path(cmd)
        if cmd.help:
            print(usage(prog, default_config, what, sp))
            return 0
        passthrough = cmd.has_flag("--shell-completion", "-sc", "--info", "-i", "--hydra-help", "--version")
        extra: list[str] = []
        if not passthrough:
            cfgs = [load_config(cmd.config_name, job, sp) for job in expand_jobs(cmd.overrides, cmd.multirun)]
            if cmd.dry_run:
                print("\n---\n".join(to_yaml(c) for c in cfgs), end="")
                return 0
            if kind == "train":
                check_resume_folder(cmd, cfgs)
            extra = default_output_dirs(cmd, cfgs, kind)
        overrides = with_search_path(cmd.overrides if passthrough else hydra_overrides(cmd.overrides), sp)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    ours = ["--config-dir", str(sp.hydra_config_dir)] if sp.hydra_config_dir else []  # see SearchPath.main
    hydra_argv = cmd.hydra_flags + ours + [f"hydra.job.name={prog.rsplit('.', 1)[-1]}"] + extra + overrides
    return _run_hydra(prog, sp.main, cmd.config_name, hydra_argv, Task(body))


class Task:
    """The function Hydra runs per job (a class so that joblib's processes can unpickle it)."""

    def __init__(self, body: Callable[[DictConfig, JobInfo], int | None]) -> None:
        self.body = body

    def __call__(self, raw: DictConfig) -> int:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
        job = JobInfo(Path(hc.runtime.output_dir), hc.mode == RunMode.MULTIRUN)
        try:
            return int(self.body(validate(raw), job) or 0)
        except ConfigError as e:  # raised by components checking their own blocks
            print(f"error: {e}", file=sys.stderr, flush=True)
            raise SystemExit(EXIT_CONFIG_ERROR) from None
        except WriteFailed as e:  # a results file on a full disk (training handles its own writes)
            from pettingllms.trainer.stopping import EXIT_IO_ERROR

            print(f"error: {e}", file=sys.stderr, flush=True)
            raise SystemExit(EXIT_IO_ERROR) from None


def _run_hydra(prog: str, cdir: Path, config_name: str, argv: list[str], task: Task) -> int:
    import hydra

    main = hydra.main(config_path=str(cdir), config_name=config_name, version_base="1.3")(task)
    saved = sys.argv
    sys.argv = [prog] + argv  # hydra.main reads its command line from sys.argv
    try:
        main()
    finally:
        sys.argv = saved
    return 0
