"""A solver and a verifier on a math problem, written with the plain `openai` client.

Nothing here knows about pettingllms: each agent is an `OpenAI` client whose base URL is that
agent's endpoint. Under training the trainer passes `clients` (one base URL per agent on its
gateway, and the API key of this execution); to run it against any other server, pass an object
with the same two members (see `__main__` below).

Flow: the solver answers; the verifier checks the answer; if the verifier says INCORRECT the
solver gets one more try with the verifier's note. The answer is the solver's last reply.
"""
from __future__ import annotations

from openai import OpenAI

SOLVER = ("You are the solver. Solve the math problem step by step and give the final answer "
          "in \\boxed{}.")
VERIFIER = ("You are the verifier. Check the proposed solution. Reply CORRECT or INCORRECT, "
            "then one sentence saying why.")


def ask(client: OpenAI, agent: str, messages: list[dict]) -> str:
    reply = client.chat.completions.create(model=agent, messages=messages, max_tokens=256)
    return reply.choices[0].message.content or ""


def run(problem: dict, clients) -> str:
    solver = OpenAI(base_url=clients.base_url("solver"), api_key=clients.api_key, max_retries=0)
    verifier = OpenAI(base_url=clients.base_url("verifier"), api_key=clients.api_key, max_retries=0)
    question = problem["question"]
    chat = [{"role": "system", "content": SOLVER}, {"role": "user", "content": question}]
    answer = ask(solver, "solver", chat)
    verdict = ask(verifier, "verifier", [
        {"role": "system", "content": VERIFIER},
        {"role": "user", "content": f"Problem: {question}\n\nProposed solution: {answer}"}])
    if "INCORRECT" in verdict.upper():
        chat += [{"role": "assistant", "content": answer},
                 {"role": "user", "content": f"A verifier says: {verdict}\nTry again."}]
        answer = ask(solver, "solver", chat)
    return answer


if __name__ == "__main__":  # against any OpenAI-compatible server: python program.py URL KEY
    import sys

    class Endpoints:
        api_key = sys.argv[2]

        @staticmethod
        def base_url(agent: str) -> str:
            return sys.argv[1]

    print(run({"question": "What is 12 * 7?"}, Endpoints()))
