"""Prompts of the search env (formats from the reference's search env; wording ours).

The reasoning agent first breaks the question into `###` sub-questions, then (each later turn)
reads the sub-answers found so far and gives `**Final Answer:**`. The web-search agent works on
one sub-question at a time: `**Search Query:**` to search, then `**Answer:**` from the results.
Everything shown is clipped so a runaway reply never bloats a prompt. The reference asks for 3-5
sub-questions; here one per needed fact, since five turns leave room to search and answer two.
"""
from __future__ import annotations

from pettingllms.envs.math.prompts import clip

SHOWN_REPLY_CHARS = 600
SHOWN_RESULT_CHARS = 240  # per document
SHOWN_ANSWER_CHARS = 120

REASONING_SYSTEM = (
    "You are a reasoning agent. You break a question into short sub-questions that a search agent "
    "answers by searching documents, then you give the final answer in a few words."
)
WEB_SEARCH_SYSTEM = (
    "You are a web search agent. You answer one sub-question at a time by searching a collection "
    "of documents. Keep queries and answers short."
)

DECOMPOSE = (
    "Break the question into the sub-questions you need answered, one per fact, in order. "
    "Start each with ### on its own line. To use the answer of an earlier sub-question, write #1, "
    "#2, ...\nExample:\n### Where was Mara Quell born?\n### In which country is #1?"
)
SYNTHESIZE = "Give the final answer in a few words, as:\n**Final Answer:** <answer>"
ASK_QUERY = "Write one search query for this sub-question, as:\n**Search Query:** <query>"
ASK_ANSWER = ("Answer the sub-question from the results in a few words, as:\n**Answer:** <answer>\n"
              "(or search again with **Search Query:** <query>)")


def results_text(docs: list, limit: int = SHOWN_RESULT_CHARS) -> str:
    if not docs:
        return "No search results found."
    return "\n".join(f"{i}. {clip(d.title, 80)}\n   {clip(d.text, limit)}" for i, d in enumerate(docs, 1))


def sub_answers_text(questions: list[str], answers: list[str | None]) -> str:
    return "\n".join(f"{i}. {q}\n   Answer: {clip(a, SHOWN_ANSWER_CHARS) if a else '(not answered yet)'}"
                     for i, (q, a) in enumerate(zip(questions, answers), 1))


def reasoning_user(question: str, questions: list[str], answers: list[str | None], last_reply: str | None,
                   decomposed: bool, results: list) -> str:
    parts = [f"Question: {question}"]
    if not decomposed:
        if last_reply is not None:
            parts.append(f"Your last reply had no ### sub-questions:\n{clip(last_reply, SHOWN_REPLY_CHARS)}")
        parts.append(DECOMPOSE)
    else:
        parts.append("Sub-questions and their answers:\n" + sub_answers_text(questions, answers))
        if results:
            parts.append("Latest search results:\n" + results_text(results))
        parts.append(SYNTHESIZE)
    return "\n\n".join(parts)


def web_search_user(question: str, questions: list[str], answers: list[str | None], current: int,
                    current_text: str, results: list | None, last_query: str | None) -> str:
    parts = [f"Original question: {question}"]
    if not questions:
        parts.append("The reasoning agent has not given sub-questions yet; wait for them.")
        return "\n\n".join(parts)
    if current >= len(questions):
        parts.append("All sub-questions are answered; the reasoning agent gives the final answer.")
        return "\n\n".join(parts)
    done = [(q, a) for q, a in zip(questions[:current], answers[:current])]
    if done:
        parts.append("Answered so far:\n" + sub_answers_text(*map(list, zip(*done))))
    parts.append(f"Sub-question {current + 1}/{len(questions)}: {current_text}")
    if results is None:
        parts.append(ASK_QUERY)
    else:
        parts.append(f"Search results for \"{clip(last_query, 120)}\":\n{results_text(results)}")
        parts.append(ASK_ANSWER)
    return "\n\n".join(parts)

