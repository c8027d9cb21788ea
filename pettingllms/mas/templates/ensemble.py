# Pattern: ensemble + aggregator. Three solvers answer independently; an aggregator picks.
from pettingllms.mas.dsl import *

solvers = [Agent("solver", "Solve the problem step by step. Put the final answer in \\boxed{}.")
           for _ in range(3)]
aggregator = Agent("aggregator", "Compare the candidate answers, pick the one that is right, "
                   "and give it in \\boxed{}.")

workflow = Ensemble(solvers, aggregator)
