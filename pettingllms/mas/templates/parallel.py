# Pattern: parallel branches. Their LLM calls go out in one batch; the outputs come back as a list.
from pettingllms.mas.dsl import *

algebra = Agent("algebraist", "Solve the problem with algebra. Put the final answer in \\boxed{}.")
arithmetic = Agent("calculator", "Solve the problem by direct computation. Put the final answer in \\boxed{}.")


def workflow(question: str) -> str:
    answers = parallel([algebra, arithmetic], question)
    return majority_vote(answers) or answers[0]
