"""Search (the reference's search env): a reasoning agent and a web-search agent answer a
(multi-hop) question by searching a document collection.

Turn order search_reasoning_agent -> web_search_agent (the names of the reference's search config;
its env code calls the first one reasoning_agent), up to `max_turns` (5) turns:
  reasoning   first breaks the question into `###` sub-questions (again next turn if it gave
              none); from then on it reads the sub-answers and gives `**Final Answer:**`.
  web search  works on the first unanswered sub-question (its #1, #2 replaced by the answers
              found): `**Search Query:**` runs the retriever (top `topk` documents); with
              results in hand, `**Answer:**` answers it and moves to the next one.
A 2-hop question thus takes five turns: decompose+search, answer, search, answer, final.
The episode ends when the reasoning agent gives a final answer and no sub-question is left
unanswered (or it answered without decomposing), or after `max_turns` turns. The reference
ends on a correct answer; here the gold is never read to decide when to stop.

Rewards (graded by exact match / token F1 against the row's golden answers, answers.py):
  reasoning   local = F1 of the final answer it gives in this step (0 without one).
  web search  local = 0.1 for answering a sub-question, 0.5 for answering the last one (the
              reference's shaping); a query or anything else gets 0.
  team_reward() exact match of the latest final answer (1.0 or 0.0).

Retrieval: `retriever` auto|bm25|http (retrieval.py): BM25 over `corpus` (a FlashRAG-format
.jsonl; the configs point it at the data folder's corpus.jsonl), or a FlashRAG-style server at
`search_url` (else $SEARCH_API_URL). The retriever is made on first use and shared by copies.
"""
from __future__ import annotations

from typing import Any

from pettingllms.envs.base import MultiAgentEnv, StepResult, register_env
from pettingllms.envs.search import answers as A
from pettingllms.envs.search import prompts as P
from pettingllms.envs.search.retrieval import Retriever, make_retriever

REASONING, WEB_SEARCH = "search_reasoning_agent", "web_search_agent"
SUB_ANSWER_REWARD, LAST_SUB_ANSWER_REWARD = 0.1, 0.5


@register_env("search")
class SearchEnv(MultiAgentEnv):
    agents = (REASONING, WEB_SEARCH)

    def __init__(self, max_turns: int = 5, retriever: str = "auto", corpus: str | None = None,
                 search_url: str | None = None, topk: int = 3, timeout_s: float = 10.0, **options: Any) -> None:
        super().__init__(max_turns=max_turns, **options)
        if int(max_turns) < 1:
            raise ValueError(f"search: max_turns must be >= 1, got {max_turns}")
        if retriever not in ("auto", "bm25", "http"):
            raise ValueError(f"retriever must be auto, bm25 or http, got {retriever!r}")
        if not 1 <= int(topk) <= 20:
            raise ValueError(f"topk must be in 1..20, got {topk}")
        self.retriever_kind, self.corpus, self.search_url = retriever, corpus, search_url
        self.topk, self.timeout_s = int(topk), float(timeout_s)
        self._retriever: Retriever | None = None
        self.question, self.golds = "", []
        self._clear()

    def _clear(self) -> None:
        self.questions: list[str] = []  # the decomposition
        self.answers: list[str | None] = []
        self.decomposed = False
        self.results: list | None = None  # the current sub-question's latest results
        self.last_query: str | None = None
        self.last_reasoning: str | None = None
        self.final: str | None = None
        self.finished = False
        self.queries: list[str] = []

    @property
    def retriever(self) -> Retriever:
        if self._retriever is None:
            self._retriever = make_retriever(self.retriever_kind, self.corpus, self.search_url, self.timeout_s)
        return self._retriever

    def reset(self, problem: dict[str, Any], seed: int) -> None:
        if not isinstance(problem, dict) or "question" not in problem:
            raise ValueError(f"search: a problem needs 'question' and 'golden_answers' (or 'answer'), got "
                             f"{sorted(problem) if isinstance(problem, dict) else type(problem).__name__}")
        golds = problem.get("golden_answers")
        golds = [str(g) for g in golds] if isinstance(golds, (list, tuple)) else []
        if not golds and problem.get("answer") is not None:
            golds = [str(problem["answer"])]
        self.problem, self.question, self.golds = dict(problem), str(problem["question"]), golds
        self.turn = 0
        self._clear()
        self.retriever  # noqa: B018  (a missing corpus or URL fails here, once, not mid-episode)

    @property
    def current(self) -> int:
        """Index of the first unanswered sub-question (len(questions) once all are answered)."""
        return next((i for i, a in enumerate(self.answers) if not a), len(self.answers))

    def observation(self, agent: str) -> list[dict[str, str]]:
        if agent == REASONING:
            text = P.reasoning_user(self.question, self.questions, self.answers, self.last_reasoning,
                                    self.decomposed, self.results or [])
            return [{"role": "system", "content": P.REASONING_SYSTEM}, {"role": "user", "content": text}]
        if agent == WEB_SEARCH:
            i = self.current
            shown = A.with_answers(self.questions[i], self.answers) if i < len(self.questions) else ""
            text = P.web_search_user(self.question, self.questions, self.answers, i, shown,
                                     self.results, self.last_query)
            return [{"role": "system", "content": P.WEB_SEARCH_SYSTEM}, {"role": "user", "content": text}]
        raise KeyError(f"unknown agent {agent!r}; agents are {list(self.agents)}")

    def step(self, agent: str, action: str) -> StepResult:
        if agent not in self.agents:
            return StepResult(0.0, {"error": f"unknown agent {agent!r}; agents are {list(self.agents)}"})
        if self.done:
            return StepResult(0.0, {"error": "episode is over"})
        return self._reason(action) if agent == REASONING else self._search(action)

    def _reason(self, action: Any) -> StepResult:
        if not self.decomposed:
            self.last_reasoning = action if isinstance(action, str) else ""
            found = A.sub_questions(action)
            if found:
                self.questions, self.answers, self.decomposed = found, [None] * len(found), True
        answer = A.final_answer(action)
        if answer is not None:
            self.final = answer
            self.finished = not self.questions or self.current >= len(self.questions)
        em, f1 = A.exact_match(answer, self.golds), A.f1(answer, self.golds)
        return StepResult(f1, {"answer": answer, "em": em, "f1": f1, "sub_questions": len(self.questions)})

    def _search(self, action: Any) -> StepResult:
        i = self.current
        if i >= len(self.questions):
            return StepResult(0.0, {"idle": True})  # nothing to search for yet (or any more)
        query = A.search_query(action)
        if query is not None:
            self.results = self.retriever.search(query, self.topk)
            self.last_query = query
            self.queries.append(query)
            return StepResult(0.0, {"query": query, "hits": len(self.results)})
        answer = A.sub_answer(action)
        if answer is None or self.results is None:  # no answer, or an answer before any search
            return StepResult(0.0, {"answer": answer})
        self.answers[i] = answer
        self.results, self.last_query = None, None
        last = self.current >= len(self.questions)
        return StepResult(LAST_SUB_ANSWER_REWARD if last else SUB_ANSWER_REWARD, {"answer": answer})

    @property
    def done(self) -> bool:
        return self.finished or self.turn >= self.max_turns

    def team_reward(self) -> float:
        return A.exact_match(self.final, self.golds)

    def render(self) -> str:
        lines = [f"Question: {self.question}", f"Gold: {self.golds}", f"Turn {self.turn}/{self.max_turns}"]
        lines += [f"  {k}. {q} -> {a}" for k, (q, a) in enumerate(zip(self.questions, self.answers), 1)]
        lines += [f"Queries: {self.queries}", f"Final answer: {self.final}"]
        return "\n".join(lines)
