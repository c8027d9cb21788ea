"""Supervised cold-start rows for a grid env's plan agent (sudoku, sokoban, plan_path).

Where the untrained model cannot score at all (sudoku_easy: docs/results/easy_levels.md), every
AT-GRPO group is flat and RL has nothing to climb; a short SFT on solved *train* problems gives
it a starting point. A row is exactly what the plan agent is shown at turn 1 of a real episode:
the env resets on the problem, the tool agent's turn is played with a reply the policy itself
generated (so the prompt shows the teammate's output as rollouts will), and the env's observation
for `plan` is taken. The row's reply is `Actions: ` and the game solver's shortest solution.

Only plan rows: a tool row would be a solver program, and a tool that prints the solution hands
every later plan turn its answer. Test problems are never used (the builder reads the train split).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from pettingllms.envs.grid.env import GridTaskEnv

SOURCE = "reference_solver"


def reset_envs(make_env: Callable[[], Any], problems: Sequence[dict[str, Any]], seed: int) -> list[GridTaskEnv]:
    """One env per problem, reset (turn 1, the tool to act)."""
    envs = []
    for i, problem in enumerate(problems):
        env = make_env()
        if not isinstance(env, GridTaskEnv) or tuple(env.agents) != ("tool", "plan"):
            raise ValueError(f"cold-start rows need a tool + plan grid env, got {type(env).__name__} "
                             f"with agents {tuple(getattr(env, 'agents', ()))}")
        env.reset(problem, seed + i)
        envs.append(env)
    return envs


def plan_row(env: GridTaskEnv, tool_reply: str) -> dict[str, Any] | None:
    """Play the tool's turn with `tool_reply`, then the plan agent's prompt and the reference
    answer as one SFT row; None when the state has no known solution (nothing to teach)."""
    env.step("tool", tool_reply)
    actions = env.reference_actions(env.state)
    if not actions:
        return None
    return {"agent": "plan", "problem_id": str(env.problem.get("id", "")),
            "messages": env.observation("plan"), "reply": "Actions: " + env.format_actions(actions),
            "source": SOURCE, "synthetic": True}


def cold_start_rows(make_env: Callable[[], Any], problems: Sequence[dict[str, Any]],
                    tool_reply: Callable[[list[list[dict[str, str]]]], list[str]],
                    seed: int = 0) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Rows for `problems`; `tool_reply(prompts)` returns one tool reply per prompt (the policy's
    own generations in the builder, scripted replies in tests). Also returns counts."""
    envs = reset_envs(make_env, problems, seed)
    replies = tool_reply([env.observation("tool") for env in envs])
    if len(replies) != len(envs):
        raise ValueError(f"tool_reply gave {len(replies)} replies for {len(envs)} prompts")
    rows, unsolvable, tool_solved = [], 0, 0
    for env, reply in zip(envs, replies):
        row = plan_row(env, reply)
        if row is None:
            unsolvable += 1
            continue
        tool_solved += bool(env.last.get("tool", {}).get("solved"))
        rows.append(row)
    return rows, {"problems": len(envs), "rows": len(rows), "unsolvable": unsolvable,
                  "tool_replies_solving": tool_solved}
