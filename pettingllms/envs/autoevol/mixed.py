"""`autoevol_mixed`: MetaAgent-X on math and code together (the published co-training recipe).

Each problem carries its `task` (math or code) and is graded by that family's grader, exactly as
`autoevol` with `task: math` / `task: code` would grade it; every other rule (designs x executions,
rewards, groups) is autoevol's.

Problems (`compose_problems`, used by pettingllms.trainer.components.load_problems): the train
split takes rows of `math_data` and `code_data` (the math and code envs' data sets) so that a
fraction `math_ratio` of them is math: the largest such mix of the two splits, math rows first,
then code, each in its own order (training shuffles per epoch with its seed, so a batch holds
math_ratio math problems in expectation). The test split is both test splits whole (math, then
code), so an evaluation reports both families. Rows gain `task` and an id prefixed by the family.
"""
from __future__ import annotations

import logging
import math as _math
from collections import Counter
from typing import Any, Callable

from pettingllms.envs.autoevol.env import AutoEvolEnv
from pettingllms.envs.base import register_env
from pettingllms.envs.code.env import CodeSingleEnv

log = logging.getLogger(__name__)


def mix_counts(n_math: int, n_code: int, math_ratio: float) -> tuple[int, int]:
    """How many math and code rows the train split takes: the largest mix with that ratio."""
    r = float(math_ratio)
    if not 0.0 <= r <= 1.0:
        raise ValueError(f"autoevol_mixed: math_ratio must be in [0, 1], got {r}")
    if r == 0.0 or n_math == 0:
        return 0, n_code if r < 1.0 else 0
    if r == 1.0 or n_code == 0:
        return n_math if r > 0.0 else 0, 0
    total = min(n_math / r, n_code / (1.0 - r))
    return min(n_math, _math.floor(total * r + 1e-9)), min(n_code, _math.floor(total * (1.0 - r) + 1e-9))


def apps_share(codes: list[dict[str, Any]], apps_ratio: float, code_data: str) -> list[dict[str, Any]]:
    """The code training rows with `apps_ratio` of them from APPS (largest such mix, APPS first)."""
    if apps_ratio <= 0.0:
        return codes
    apps = [r for r in codes if r.get("source") == "apps"]
    others = [r for r in codes if r.get("source") != "apps"]
    if not apps:
        held = ", ".join(f"{n} {src}" for src, n in sorted(Counter(str(r.get("source")) for r in codes).items()))
        log.warning("autoevol_mixed: apps_ratio=%s but the code data set '%s' has no APPS rows (APPS comes "
                    "from the hub's codeparrot/apps test.jsonl or a local copy under $PETTINGLLMS_HUB_DIR); the "
                    "code share uses its rows as they are: %s", apps_ratio, code_data, held or "none")
        return codes
    n_apps, n_other = mix_counts(len(apps), len(others), apps_ratio)
    return apps[:n_apps] + others[:n_other]


@register_env("autoevol_mixed")
class AutoEvolMixedEnv(AutoEvolEnv):
    def __init__(self, max_turns: int = 1, math_ratio: float = 0.5, math_data: str = "math",
                 code_data: str = "code", task: str = "mixed", apps_ratio: float = 0.0,
                 **options: Any) -> None:
        if task != "mixed":
            raise ValueError(f"autoevol_mixed: task is per problem (math or code); got task={task!r}")
        mix_counts(1, 1, math_ratio)  # checks the ratios
        mix_counts(1, 1, apps_ratio)
        self.apps_ratio = float(apps_ratio)
        self.math_ratio, self.math_data, self.code_data = float(math_ratio), str(math_data), str(code_data)
        super().__init__(max_turns=max_turns, task="math", **options)
        self._code_grader = CodeSingleEnv(**dict(self.opts.grader))

    def reset(self, problem: dict[str, Any], seed: int) -> None:
        task = problem.get("task") if isinstance(problem, dict) else None
        if task not in ("math", "code"):
            raise ValueError(f"autoevol_mixed: a problem needs task 'math' or 'code', got {task!r}")
        self.opts.task = task
        self._code = self._code_grader if task == "code" else None
        super().reset(problem, seed)

    @classmethod
    def compose_problems(cls, options: dict[str, Any], split: str, limit: int | None,
                         load: Callable[[str, str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
        ratio = float(options.get("math_ratio", 0.5))
        maths = [{**r, "task": "math", "id": f"math/{r['id']}"}
                 for r in load(str(options.get("math_data", "math")), split)] if ratio > 0 else []
        codes = [{**r, "task": "code", "id": f"code/{r['id']}"}
                 for r in load(str(options.get("code_data", "code")), split)] if ratio < 1 else []
        if split == "train":
            codes = apps_share(codes, float(options.get("apps_ratio", 0.0)), str(options.get("code_data", "code")))
            n_math, n_code = mix_counts(len(maths), len(codes), ratio)
            maths, codes = maths[:n_math], codes[:n_code]
        rows = maths + codes
        return rows[:limit] if limit is not None else rows
