# Pattern: router. A classifier names the kind of problem; the matching specialist answers.
from pettingllms.mas.dsl import *

classifier = Agent("classifier", "Say which kind of problem this is: algebra, geometry or counting.")
routes = {
    "algebra": Agent("algebraist", "Solve this algebra problem. Put the final answer in \\boxed{}."),
    "geometry": Agent("geometer", "Solve this geometry problem. Put the final answer in \\boxed{}."),
    "counting": Agent("combinatorialist", "Solve this counting problem. Put the final answer in \\boxed{}."),
}

workflow = Router(classifier, routes)
