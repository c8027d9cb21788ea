"""A coder and a tester as a LangGraph graph (coder -> tester -> coder ... until PASS), written
with `langchain-openai`'s `ChatOpenAI`: nothing here knows about pettingllms.

Under training the trainer passes `clients`: one OpenAI-compatible base URL per agent on its
gateway and this execution's API key. `problem["task"]` is the task as the grader states it (for
function tasks: the signature to complete). The answer is the coder's last reply; the grader runs
its ```python block against the hidden tests in the sandbox.
"""
from __future__ import annotations

from typing import TypedDict

from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

CODER = "You are the coder. Write the complete Python solution in one ```python block."
TESTER = ("You are the tester. Read the task and the code. Reply PASS if the code is right; else "
          "FAIL and the input on which it goes wrong.")
MAX_ROUNDS = 2


class State(TypedDict):
    task: str
    code: str
    report: str
    rounds: int


def build(clients):
    def model(agent: str) -> ChatOpenAI:
        return ChatOpenAI(model=agent, base_url=clients.base_url(agent), api_key=clients.api_key,
                          max_retries=0)

    coder, tester = model("coder"), model("tester")

    def write(state: State) -> dict:
        ask = state["task"]
        if state["report"]:
            ask += f"\n\nYour last code:\n{state['code']}\n\nThe tester says: {state['report']}\nFix it."
        reply = coder.invoke([("system", CODER), ("user", ask)])
        return {"code": reply.content, "rounds": state["rounds"] + 1}

    def test(state: State) -> dict:
        reply = tester.invoke([("system", TESTER), ("user", f"Task:\n{state['task']}\n\nCode:\n{state['code']}")])
        return {"report": reply.content}

    def route(state: State) -> str:
        done = state["report"].strip().upper().startswith("PASS") or state["rounds"] >= MAX_ROUNDS
        return END if done else "coder"

    graph = StateGraph(State)
    graph.add_node("coder", write)
    graph.add_node("tester", test)
    graph.add_edge(START, "coder")
    graph.add_edge("coder", "tester")
    graph.add_conditional_edges("tester", route, ["coder", END])
    return graph.compile()


def run(problem: dict, clients) -> str:
    out = build(clients).invoke({"task": problem["task"], "code": "", "report": "", "rounds": 0})
    return out["code"]
