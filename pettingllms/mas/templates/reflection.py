# Pattern: reflection. A solver answers, a critic reviews, the solver revises until CORRECT.
from pettingllms.mas.dsl import *

solver = Agent("solver", "Solve the problem step by step. Put the final answer in \\boxed{}.")
critic = Agent("critic", "Check the proposed solution. Reply CORRECT if it is right; "
               "otherwise explain the mistake.")

workflow = Reflection(solver, critic, rounds=2)
