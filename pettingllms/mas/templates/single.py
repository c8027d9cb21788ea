# Pattern: one agent. The smallest valid design.
from pettingllms.mas.dsl import *

solver = Agent("solver", "Solve the problem step by step. Put the final answer in \\boxed{}.")


def workflow(question: str) -> str:
    return solver(question)
