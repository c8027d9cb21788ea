"""Reading the search agents' replies, and grading answers by exact match and token F1.

Reply formats (the reference's): a decomposition marks each sub-question with `###` (and may
refer to earlier sub-answers as #1, #2); the web-search agent writes `**Search Query:** ...` to
search and `**Answer:** ...` to answer the current sub-question; the reasoning agent ends with
`**Final Answer:** ...`. The markdown stars are optional.

Grading: SQuAD-style normalisation (lower case, no punctuation, no articles, single spaces),
then exact match and token F1 against each gold answer, best of them (FlashRAG's EM/F1).
"""
from __future__ import annotations

import collections
import re
import string
from typing import Any, Iterable

MAX_ANSWER_CHARS = 200
MAX_SUB_QUESTIONS = 5

_FINAL = re.compile(r"^\W*final\s+answer\s*:?\**\s*:?\s*(.+)$", re.IGNORECASE | re.MULTILINE)
_ANSWER = re.compile(r"^\W*answer\s*:?\**\s*:?\s*(.+)$", re.IGNORECASE | re.MULTILINE)
_QUERY = re.compile(r"^\W*search\s+query\s*:?\**\s*:?\s*(.+)$", re.IGNORECASE | re.MULTILINE)
_SUB_QUESTION = re.compile(r"^\s*###\s*(.+?)\s*$", re.MULTILINE)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def _text(reply: Any) -> str:
    return reply if isinstance(reply, str) else ""


def _first(pattern: re.Pattern, reply: Any) -> str | None:
    m = pattern.search(_text(reply))
    if not m:
        return None
    value = m.group(1).strip().strip("*").strip()
    return value if value and len(value) <= MAX_ANSWER_CHARS else None


def final_answer(reply: Any) -> str | None:
    return _first(_FINAL, reply)


def sub_answer(reply: Any) -> str | None:
    """`Answer: ...` (a `Final Answer:` line counts too)."""
    return _first(_ANSWER, reply) or final_answer(reply)


def search_query(reply: Any) -> str | None:
    return _first(_QUERY, reply)


def sub_questions(reply: Any) -> list[str]:
    """The `###` lines of a decomposition (at most MAX_SUB_QUESTIONS, each under 300 chars)."""
    found = [q for q in _SUB_QUESTION.findall(_text(reply)) if 3 <= len(q) <= 300]
    return found[:MAX_SUB_QUESTIONS]


def with_answers(question: str, answers: list[str | None]) -> str:
    """A sub-question with its references #1, #2, ... replaced by the answers known so far."""
    def sub(m: re.Match) -> str:
        i = int(m.group(1)) - 1
        return answers[i] if 0 <= i < len(answers) and answers[i] else m.group(0)
    return re.sub(r"#(\d+)", sub, question)


def normalize(text: str) -> str:
    text = str(text).lower()
    text = "".join(c for c in text if c not in string.punctuation)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _f1(pred: str, gold: str) -> float:
    p, g = normalize(pred).split(), normalize(gold).split()
    common = sum((collections.Counter(p) & collections.Counter(g)).values())
    if not p or not g or common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def exact_match(pred: str | None, golds: Iterable[str]) -> float:
    if not pred:
        return 0.0
    return 1.0 if any(normalize(pred) == normalize(g) for g in golds if str(g).strip()) else 0.0


def f1(pred: str | None, golds: Iterable[str]) -> float:
    if not pred:
        return 0.0
    return max((_f1(pred, g) for g in golds if str(g).strip()), default=0.0)
