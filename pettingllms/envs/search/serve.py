"""A FlashRAG-style retrieval server over BM25, on the standard library's http.server.

    python -m pettingllms.envs.search.serve --corpus datasets/search/corpus.jsonl [--port 8000]

POST /retrieve {"queries": [...], "topk": 3, "return_scores": true}
  -> {"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]} (one list per query;
  without return_scores, the bare documents). Point env.options.search_url (or SEARCH_API_URL)
  at http://HOST:PORT/retrieve. Many rollout workers can then share one index.
"""
from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pettingllms.envs.search.retrieval import Retriever, bm25_over

MAX_QUERIES = 512


def _answer(retriever: Retriever, body: dict) -> dict:
    queries = body.get("queries")
    if queries is None and "query" in body:  # the reference's client sends one "query"
        queries = [body["query"]]
    if not isinstance(queries, list) or len(queries) > MAX_QUERIES:
        raise ValueError(f"'queries' must be a list of at most {MAX_QUERIES} strings")
    topk, scores = int(body.get("topk", 3)), bool(body.get("return_scores", False))
    result = []
    for q in queries:
        hits = [{"document": {"id": d.id, "contents": f"{d.title}\n{d.text}"}, "score": d.score}
                for d in retriever.search(str(q), topk)]
        result.append(hits if scores else [h["document"] for h in hits])
    return {"result": result}


def make_server(retriever: Retriever, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A server (not yet serving) answering /retrieve from `retriever`; port 0 picks a free one."""
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.rstrip("/") != "/retrieve":
                return self._send(404, {"error": "POST /retrieve"})
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                self._send(200, _answer(retriever, body if isinstance(body, dict) else {}))
            except (ValueError, TypeError) as e:
                self._send(400, {"error": str(e)})

        def _send(self, code: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:  # one line per request would flood a training log
            pass

    return ThreadingHTTPServer((host, port), Handler)


def serve_in_thread(retriever: Retriever, host: str = "127.0.0.1") -> tuple[ThreadingHTTPServer, str]:
    """Start a server on a free port in a daemon thread; returns it and its /retrieve URL."""
    server = make_server(retriever, host)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}/retrieve"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True, help="FlashRAG-format corpus (.jsonl with id and contents)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    args = ap.parse_args(argv)
    server = make_server(bm25_over(args.corpus), args.host, args.port)
    print(f"serving http://{args.host}:{server.server_address[1]}/retrieve", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
