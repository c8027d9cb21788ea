"""Retrievers of the search env: one interface, two implementations.

    Retriever.search(query, topk) -> list[Doc]     (best first; never raises on a bad query)

- `BM25Retriever`: in-process BM25 (bm25s) over a FlashRAG-format corpus file (JSON lines,
  one {"id", "contents"} per document; `contents` is "title\\ntext", as in FlashRAG's corpora).
- `HttpRetriever`: a client of a FlashRAG-style retrieval server (the one Search-R1 and the
  reference use): POST {"queries": [q], "topk": k, "return_scores": true} to its /retrieve,
  answered with {"result": [[{"document": {"id", "contents"}, "score"}, ...]]}.
  `serve.py` runs such a server over BM25, for tests and for a corpus shared by many workers.

Why bm25s and not rank-bm25: bm25s is maintained (0.3.x, 2026), scores with sparse matrices
(an index of a few thousand sentences builds in milliseconds) and needs only numpy; rank-bm25's
last release is from 2022 and scores every document in Python on each query.

Envs are deep-copied on every tree branch, so a retriever is shared by its copies
(`__deepcopy__` returns itself: it is read-only), and a corpus file is indexed once per process.
"""
from __future__ import annotations

import functools
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pettingllms.errors import ConfigError

log = logging.getLogger(__name__)

MAX_QUERY_CHARS = 300  # a runaway reply is not sent as a query whole
HTTP_TRIES = 2


@dataclass(frozen=True)
class Doc:
    id: str
    title: str
    text: str
    score: float = 0.0


def split_contents(contents: str) -> tuple[str, str]:
    """FlashRAG's "title\\ntext" (the title sometimes in double quotes) -> (title, text)."""
    head, _, rest = str(contents).partition("\n")
    return head.strip().strip('"'), rest.strip()


def read_corpus(path: str | Path) -> list[dict[str, str]]:
    """The rows of a FlashRAG-format corpus file (JSON lines with id and contents)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"search corpus {path} not found; build the data (scripts/dataprocess/load_search.py) "
                          f"or set env.options.corpus (or env.options.search_url for a retrieval server)")
    rows = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                rows.append({"id": str(row["id"]), "contents": str(row["contents"])})
            except (ValueError, KeyError, TypeError):
                raise ConfigError(f"search corpus {path} line {n}: not a JSON object with id and contents") from None
    if not rows:
        raise ConfigError(f"search corpus {path} has no documents")
    return rows


class Retriever:
    def search(self, query: str, topk: int) -> list[Doc]:
        raise NotImplementedError

    def __deepcopy__(self, memo: dict) -> "Retriever":
        return self  # read-only and shared: branches of one episode search the same corpus


def _clean_query(query: Any) -> str:
    return " ".join(str(query or "").split())[:MAX_QUERY_CHARS]


class BM25Retriever(Retriever):
    """BM25 (bm25s, English stopwords) over a list of FlashRAG corpus rows."""

    def __init__(self, rows: list[dict[str, str]]) -> None:
        import bm25s

        self.docs = [Doc(r["id"], *split_contents(r["contents"])) for r in rows]
        self._bm25s = bm25s
        self.index = bm25s.BM25()
        self.index.index(self._tokens([f"{d.title} {d.text}" for d in self.docs]), show_progress=False)

    def _tokens(self, texts: list[str]) -> list[list[str]]:
        return self._bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)

    def search(self, query: str, topk: int) -> list[Doc]:
        tokens = self._tokens([_clean_query(query)])
        if not tokens[0]:
            return []
        k = max(1, min(int(topk), len(self.docs)))
        ids, scores = self.index.retrieve(tokens, k=k, show_progress=False)
        return [Doc(self.docs[i].id, self.docs[i].title, self.docs[i].text, float(s))
                for i, s in zip(ids[0].tolist(), scores[0].tolist()) if s > 0]


@functools.lru_cache(maxsize=4)
def _bm25_of(path: str, mtime_ns: int, size: int) -> BM25Retriever:
    return BM25Retriever(read_corpus(path))


def bm25_over(path: str | Path) -> BM25Retriever:
    """The BM25 index of a corpus file, built once per process (rebuilt when the file changes)."""
    path = Path(path)
    if not path.is_file():
        read_corpus(path)  # raises the one-line error
    st = path.stat()
    return _bm25_of(str(path.resolve()), st.st_mtime_ns, st.st_size)


def parse_server_reply(reply: Any) -> list[Doc]:
    """Documents of a FlashRAG-style /retrieve answer for one query; anything else gives []."""
    if not isinstance(reply, dict) or not isinstance(reply.get("result"), list) or not reply["result"]:
        return []
    hits = reply["result"][0]
    docs = []
    for i, hit in enumerate(hits if isinstance(hits, list) else []):
        doc = hit.get("document", hit) if isinstance(hit, dict) else None
        if not isinstance(doc, dict) or "contents" not in doc:
            continue
        title, text = split_contents(doc["contents"])
        score = hit.get("score", 0.0) if isinstance(hit, dict) else 0.0
        docs.append(Doc(str(doc.get("id", i)), str(doc.get("title") or title), text,
                        float(score) if isinstance(score, (int, float)) else 0.0))
    return docs


class HttpRetriever(Retriever):
    """A FlashRAG-style retrieval server. A failed request (down, timeout, bad reply) gives no
    documents and is logged: an episode never crashes on the network."""

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        if not str(url).startswith(("http://", "https://")):
            raise ValueError(f"search_url must be an http(s) URL, got {url!r}")
        self.url = str(url)
        self.timeout_s = float(timeout_s)
        self.failures = 0

    def search(self, query: str, topk: int) -> list[Doc]:
        import requests

        query = _clean_query(query)
        if not query:
            return []
        payload = {"queries": [query], "topk": int(topk), "return_scores": True}
        for attempt in range(HTTP_TRIES):
            try:
                r = requests.post(self.url, json=payload, timeout=self.timeout_s)
                if r.status_code >= 500 and attempt + 1 < HTTP_TRIES:
                    continue
                r.raise_for_status()
                return parse_server_reply(r.json())[:int(topk)]
            except (requests.RequestException, ValueError) as e:
                last = e
        self.failures += 1
        log.warning("search server %s failed for %r: %s", self.url, query[:80], str(last).splitlines()[0][:200])
        return []


def make_retriever(retriever: str, corpus: str | None, search_url: str | None, timeout_s: float) -> Retriever:
    """`retriever`: bm25 (the corpus file), http (search_url, else $SEARCH_API_URL), or auto:
    http when a URL is given either way, else bm25."""
    url = search_url or os.environ.get("SEARCH_API_URL") or None
    kind = ("http" if url else "bm25") if retriever == "auto" else retriever
    if kind == "http":
        if not url:
            raise ConfigError("env.options.retriever=http needs env.options.search_url (or SEARCH_API_URL)")
        return HttpRetriever(url, timeout_s)
    if kind == "bm25":
        if not corpus:
            raise ConfigError("env.options.retriever=bm25 needs env.options.corpus (a FlashRAG-format .jsonl)")
        return bm25_over(corpus)
    raise ConfigError(f"env.options.retriever={retriever!r}: choose auto, bm25 or http")
