# Pattern: conditional. Long questions get a planner first; short ones go straight to a solver.
from pettingllms.mas.dsl import *

planner = Agent("planner", "List the steps needed to solve the problem.")
solver = Agent("solver", "Solve the problem. Put the final answer in \\boxed{}.")


def is_long(question: str) -> bool:
    return len(question.split()) > 40


workflow = If(is_long, Sequential(planner, solver), solver)
