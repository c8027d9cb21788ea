# Pattern: debate. Two agents answer, then revise seeing each other's answers; a judge decides.
from pettingllms.mas.dsl import *

proponent = Agent("debater", "Solve the problem. If others disagree, check their reasoning and "
                  "defend or fix your answer. Put the final answer in \\boxed{}.")
skeptic = Agent("skeptic", "Solve the problem carefully, looking for mistakes in the others' "
                "answers. Put the final answer in \\boxed{}.")
judge = Agent("judge", "Read the debate and state the correct final answer in \\boxed{}.")

workflow = Debate([proponent, skeptic], rounds=2, judge=judge)
