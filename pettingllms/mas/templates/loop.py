# Pattern: loop with a stop condition. Retry until the answer contains a \boxed{} result.
from pettingllms.mas.dsl import *

solver = Agent("solver", "Solve the problem. Put the final answer in \\boxed{}.")


def has_answer(text: str) -> bool:
    return "\\boxed{" in text


workflow = Loop(solver, until=has_answer, max_iters=3)
