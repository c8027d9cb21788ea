"""An OpenAI-compatible HTTP gateway inside the trainer, on 127.0.0.1 only.

    POST /v1/chat/completions                 the agent is the request's `model`
    POST /agents/<agent>/v1/chat/completions  the agent is in the URL (`model` is ignored, so a
                                              framework may send a stock name such as gpt-4o-mini)
    POST /v1/responses, /agents/<agent>/v1/responses   the Responses API, text in and out only
    GET  /v1/models, /agents/<agent>/v1/models

Every request carries its execution's token as the API key (`Authorization: Bearer ...`): that is
how a call is attributed to one execution of one program, and why another local user cannot use
the gateway. Errors use OpenAI's shape `{"error": {"message", "type", "code"}}`: 400 for a
malformed body, 401 for a missing or unknown key, 404 for an unknown agent or path, 403 once an
execution is over its budget (not 429: the official client retries 408/409/429/5xx, and a retry
would only be refused again).

Why flask: it is a core dependency (FastAPI and uvicorn come only with the verl/vLLM stacks),
the engine behind the gateway is synchronous and batched by `CallBroker`, so an async server
would add nothing but a dependency; werkzeug's threaded server gives each connection a thread,
which blocks in `CallBroker.submit` until its batch is answered. Async clients work as well
(HTTP is HTTP). Tool definitions and response formats are not enforced: the reply is the
policy's text. `stream: true` on chat completions is answered as server-sent events holding the
whole reply in one chunk (plus a usage chunk when `stream_options.include_usage` asks for it).
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

from pettingllms.rollout.graph.broker import MAX_N, CallBroker, GatewayError

HOST = "127.0.0.1"
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",
          "tool": "user", "function": "user"}


def _text(content: Any, where: str) -> str:
    """A message's content as plain text: a string, None (an assistant turn that only called
    tools) or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in ("text", "input_text", "output_text") \
                    or not isinstance(part.get("text"), str):
                raise GatewayError(400, "invalid_request_error", f"{where}: only text content parts are "
                                   "supported")
            out.append(part["text"])
        return "".join(out)
    raise GatewayError(400, "invalid_request_error", f"{where}.content must be a string or a list of parts")


def parse_chat(body: Any) -> dict[str, Any]:
    """Check a chat-completions body; return messages, n, stop, max_tokens, stream, include_usage."""
    if not isinstance(body, dict):
        raise GatewayError(400, "invalid_request_error", "the body must be a JSON object")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise GatewayError(400, "invalid_request_error", "'messages' must be a non-empty list")
    messages = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in _ROLES:
            raise GatewayError(400, "invalid_request_error", f"messages[{i}] needs a role among {sorted(_ROLES)}")
        text = _text(m.get("content"), f"messages[{i}]")
        if m["role"] in ("tool", "function"):
            text = f"Tool result: {text}"
        messages.append({"role": _ROLES[m["role"]], "content": text})
    n = body.get("n", 1)
    if n is None:
        n = 1
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_N:
        raise GatewayError(400, "invalid_request_error", f"'n' must be an integer in 1..{MAX_N}")
    stop = body.get("stop")
    stop = [] if stop is None else [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop) or len(stop) > 4:
        raise GatewayError(400, "invalid_request_error", "'stop' must be a string or a list of up to 4 "
                           "non-empty strings")
    cap = body.get("max_completion_tokens", body.get("max_tokens"))
    if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
        raise GatewayError(400, "invalid_request_error", "'max_tokens' must be a positive integer")
    opts = body.get("stream_options") or {}
    return {"messages": messages, "n": n, "stop": stop, "max_tokens": cap, "stream": bool(body.get("stream")),
            "include_usage": bool(isinstance(opts, dict) and opts.get("include_usage"))}


def parse_responses(body: Any) -> dict[str, Any]:
    """A Responses-API body (`input`: a string or a list of messages; `instructions`: a system
    prompt; `max_output_tokens`) as the chat fields `parse_chat` returns."""
    if not isinstance(body, dict):
        raise GatewayError(400, "invalid_request_error", "the body must be a JSON object")
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise GatewayError(400, "invalid_request_error", "'input' must be a string or a non-empty list")
    if any(isinstance(m, dict) and m.get("type", "message") != "message" for m in items):
        raise GatewayError(400, "invalid_request_error", "only message items are supported in 'input'")
    messages = [{"role": m.get("role"), "content": m.get("content")} if isinstance(m, dict) else m for m in items]
    if isinstance(body.get("instructions"), str):
        messages.insert(0, {"role": "system", "content": body["instructions"]})
    return parse_chat({"messages": messages, "max_tokens": body.get("max_output_tokens")})


def _error(e: GatewayError):
    from flask import jsonify

    resp = jsonify({"error": {"message": e.message, "type": e.kind, "code": e.kind, "param": None}})
    resp.status_code = e.status
    return resp


def create_app(broker: CallBroker):
    from flask import Flask, Response, jsonify, request

    app = Flask("pettingllms-gateway")

    def token() -> str | None:
        auth = request.headers.get("Authorization", "")
        return auth[7:].strip() if auth.lower().startswith("bearer ") else None

    def read_body() -> Any:
        try:
            return json.loads(request.get_data() or b"null")
        except ValueError:
            raise GatewayError(400, "invalid_request_error", "the body is not valid JSON") from None

    def models(agents: list[str]):
        broker.execution(token())
        return jsonify({"object": "list", "data": [{"id": a, "object": "model", "created": 0,
                                                     "owned_by": "pettingllms"} for a in agents]})

    def chat(agent: str | None):
        ex = broker.execution(token())
        body = read_body()
        req = parse_chat(body)
        if agent is None:
            if not isinstance(body.get("model"), str):
                raise GatewayError(400, "invalid_request_error", "'model' must name an agent (or use the "
                                   "per-agent URL .../agents/<agent>/v1)")
            agent = body["model"]
        broker.check_agent(agent)
        comps = broker.submit(ex, agent, req["messages"], n=req["n"], stop=req["stop"],
                              max_tokens=req["max_tokens"])
        rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        usage = {"prompt_tokens": len(comps[0].prompt_ids),
                 "completion_tokens": sum(len(c.response_ids) for c in comps)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        choices = [{"index": i, "message": {"role": "assistant", "content": c.text},
                    "finish_reason": c.finish_reason, "logprobs": None} for i, c in enumerate(comps)]
        if not req["stream"]:
            return jsonify({"id": rid, "object": "chat.completion", "created": created, "model": agent,
                            "choices": choices, "usage": usage})
        base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": agent}
        events = [{**base, "choices": [{"index": ch["index"], "delta": ch["message"], "finish_reason": None}]}
                  for ch in choices]
        events += [{**base, "choices": [{"index": ch["index"], "delta": {}, "finish_reason": ch["finish_reason"]}]}
                   for ch in choices]
        if req["include_usage"]:
            events.append({**base, "choices": [], "usage": usage})
        text = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        return Response(text, mimetype="text/event-stream")

    def respond(agent: str | None):
        """POST /v1/responses: one reply as a Responses-API object (no streaming, no tools)."""
        ex = broker.execution(token())
        body = read_body()
        req = parse_responses(body)
        if body.get("stream"):
            raise GatewayError(400, "invalid_request_error", "streaming is not served on /v1/responses")
        if agent is None:
            agent = body.get("model") if isinstance(body.get("model"), str) else ""
        broker.check_agent(agent)
        [c] = broker.submit(ex, agent, req["messages"], max_tokens=req["max_tokens"])
        rid = f"resp_{uuid.uuid4().hex}"
        return jsonify({"id": rid, "object": "response", "created_at": int(time.time()), "model": agent,
                        "status": "completed", "output": [{
                            "type": "message", "id": f"msg_{uuid.uuid4().hex}", "role": "assistant",
                            "status": "completed",
                            "content": [{"type": "output_text", "text": c.text, "annotations": []}]}],
                        "usage": {"input_tokens": len(c.prompt_ids), "output_tokens": len(c.response_ids),
                                  "total_tokens": len(c.prompt_ids) + len(c.response_ids)},
                        "parallel_tool_calls": False, "tool_choice": "none", "tools": []})

    app.add_url_rule("/v1/responses", "responses", lambda: respond(None), methods=["POST"])
    app.add_url_rule("/agents/<agent>/v1/responses", "agent_responses", respond, methods=["POST"])
    app.add_url_rule("/v1/models", "models", lambda: models(sorted(broker.agent_policy)))
    app.add_url_rule("/agents/<agent>/v1/models", "agent_models",
                     lambda agent: models([broker.check_agent(agent)]))
    app.add_url_rule("/v1/chat/completions", "chat", lambda: chat(None), methods=["POST"])
    app.add_url_rule("/agents/<agent>/v1/chat/completions", "agent_chat", chat, methods=["POST"])
    app.register_error_handler(GatewayError, _error)
    app.register_error_handler(404, lambda e: _error(GatewayError(
        404, "not_found", f"no such endpoint {request.method} {request.path}; this gateway serves "
        "/v1/chat/completions and /v1/models (also under /agents/<agent>/v1)")))
    app.register_error_handler(405, lambda e: _error(GatewayError(
        405, "method_not_allowed", f"{request.method} is not allowed on {request.path}")))
    return app


class Gateway:
    """The app served on 127.0.0.1 (a free port) by a background thread; `close()` stops it."""

    def __init__(self, broker: CallBroker, port: int = 0) -> None:
        from werkzeug.serving import WSGIRequestHandler, make_server

        class Quiet(WSGIRequestHandler):  # one log line per model call would drown the run's log
            def log_request(self, *args: Any) -> None:
                pass

        self.broker = broker
        self._server = make_server(HOST, port, create_app(broker), threaded=True, request_handler=Quiet)
        self.port = int(self._server.server_port)
        self._thread = threading.Thread(target=self._server.serve_forever, name="gateway", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
