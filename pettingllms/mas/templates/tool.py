# Pattern: sandboxed Python tool. A coder writes a program; its printed output is checked by a
# solver that writes the final answer.
from pettingllms.mas.dsl import *

coder = CodeAgent("coder", "Compute the answer to the problem with a short Python program.")
solver = Agent("solver", "Use the program's output to state the final answer in \\boxed{}.")


def workflow(question: str) -> str:
    computed = coder(question)
    return solver(question, [("program output", computed)])
