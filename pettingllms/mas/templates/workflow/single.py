# Released MetaAgent-X format (`workflow` API): one solver agent.
from workflow import AgentNode, Workflow, ToolRegistry

solver = AgentNode(
    name="MathSolver",
    system_prompt=("You are an expert problem solver. Work step by step, check the result against "
                   "the question, and put the final answer in \\boxed{}."),
    tool_registry=ToolRegistry(),
    max_turns=1,
)

workflow = Workflow(name="single_solver")
workflow.add_node(solver)

print("=" * 48)
print("FINAL ANSWER:")
result = workflow.run(question)
print(result.content)
print("=" * 48)
