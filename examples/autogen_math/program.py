"""A solver and a verifier on a math problem, written with AG2 (the community continuation of
AutoGen; PyPI `ag2`, module `ag2`): two `ag2.Agent`s, each with its own `OpenAIConfig`. Nothing
here knows about pettingllms.

Why AG2 and not Microsoft's autogen-agentchat: autogen-core 0.7.5 pins protobuf~=5.29, which
would replace the protobuf 7 the training stack has; `ag2[openai]` moves no installed package.

Under training the trainer passes `clients`: one OpenAI-compatible base URL per agent on its
gateway and this execution's API key, so each agent's calls are sampled from that agent's policy.

Flow: the solver answers; the verifier checks it; on INCORRECT the solver's own conversation
continues (`AgentReply.ask`, which keeps its history) with the verifier's note. The answer is the
solver's last reply.
"""
from __future__ import annotations

from ag2 import Agent
from ag2.config import OpenAIConfig

SOLVER = ("You are the solver. Solve the math problem step by step and give the final answer "
          "in \\boxed{}.")
VERIFIER = ("You are the verifier. Check the proposed solution. Reply CORRECT or INCORRECT, "
            "then one sentence saying why.")


def agent(name: str, prompt: str, clients) -> Agent:
    config = OpenAIConfig(model=name, base_url=clients.base_url(name), api_key=clients.api_key,
                          max_tokens=256, max_retries=0)
    return Agent(name, prompt, config=config)


async def run(problem: dict, clients) -> str:
    solver, verifier = agent("solver", SOLVER, clients), agent("verifier", VERIFIER, clients)
    question = problem["question"]
    solved = await solver.ask(question)
    checked = await verifier.ask(f"Problem: {question}\n\nProposed solution: {solved.body or ''}")
    verdict = checked.body or ""
    if "INCORRECT" in verdict.upper():
        solved = await solved.ask(f"A verifier says: {verdict}\nTry again.")
    return solved.body or ""


if __name__ == "__main__":  # against any OpenAI-compatible server: python program.py URL KEY
    import asyncio
    import sys

    class Endpoints:
        api_key = sys.argv[2]

        @staticmethod
        def base_url(agent: str) -> str:
            return sys.argv[1]

    print(asyncio.run(run({"question": "What is 12 * 7?"}, Endpoints())))
