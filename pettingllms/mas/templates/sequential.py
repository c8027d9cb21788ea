# Pattern: sequential pipeline. Each step sees the question and the previous step's output.
from pettingllms.mas.dsl import *

planner = Agent("planner", "Break the problem into short numbered steps. Do not solve it.")
solver = Agent("solver", "Follow the plan to solve the problem. Put the final answer in \\boxed{}.")

workflow = Sequential(planner, solver)
