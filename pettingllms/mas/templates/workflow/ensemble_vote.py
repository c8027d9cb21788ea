# Released MetaAgent-X format (`workflow` API): three solvers with different strategies vote on
# their boxed answers; a judge decides only when they disagree.
from workflow import AgentNode, Workflow, ToolRegistry
from workflow.nodes import EnsembleNode

tools = ToolRegistry()


def solver(name, strategy):
    return AgentNode(name=name, system_prompt=(f"You solve problems by {strategy}. Show your work "
                                               "and put the final answer in \\boxed{}."),
                     tool_registry=tools, max_turns=1)


judge = AgentNode(name="Judge", system_prompt=("Several solvers disagree. Check each solution and "
                                               "give the correct answer in \\boxed{}."),
                  tool_registry=tools, max_turns=1)
ensemble = EnsembleNode(name="Vote", agents=[solver("ForwardSolver", "forward reasoning"),
                                             solver("BackwardSolver", "working backwards"),
                                             solver("CaseAnalyzer", "case analysis")],
                        strategy="majority_vote", consensus_agent=judge)

workflow = Workflow(name="ensemble_vote")
workflow.add_node(ensemble)

print("=" * 48)
print("FINAL ANSWER:")
result = workflow.run(question)
print(result.content)
print("=" * 48)
