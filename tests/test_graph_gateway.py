"""The graph gateway (pettingllms/rollout/graph/) against the official `openai` client: chat
completions by per-agent URL and by `model`, n > 1, stop strings and token caps passed to the
engine under the rollout's sampling, streaming, /v1/models, an unknown agent, a bad key, a
malformed body, the per-execution call budget, and 50 concurrent executions answered in shared
engine batches. The engine is the scripted test double (tests/fakes.py): these tests are about
the HTTP seam; tests/test_graph_training.py runs the real engine behind it."""
from __future__ import annotations

import http.client
import json
import threading

import openai
import pytest

from fakes import ScriptedEngine
from pettingllms.rollout.graph.broker import CallBroker
from pettingllms.rollout.graph.gateway import Gateway, parse_chat, GatewayError

AGENTS = {"solver": "p_solver", "verifier": "p_verifier"}
SAMPLING = {"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 32, "stop": ["END"]}


def reply_for(req):
    return [f"{req.policy}:{req.messages[-1]['content']}#{i}" for i in range(4)]


@pytest.fixture(scope="module")
def served():
    engine = ScriptedEngine(reply_for)
    broker = CallBroker(engine, AGENTS, SAMPLING, wait_s=0.5)
    gateway = Gateway(broker)
    yield engine, broker, gateway
    gateway.close()
    broker.shutdown()


def client(gateway, ex, agent=None, **kw):
    base = f"{gateway.url}/agents/{agent}/v1" if agent else f"{gateway.url}/v1"
    return openai.OpenAI(base_url=base, api_key=ex.token, max_retries=0, **kw)


def test_binds_loopback_only(served):
    _, _, gateway = served
    assert gateway._server.server_address[0] == "127.0.0.1"
    assert gateway.url.startswith("http://127.0.0.1:")


def test_chat_by_agent_url_and_by_model(served):
    engine, broker, gateway = served
    ex = broker.open("t/chat", seed=1, max_calls=10, max_tokens=10**6)
    # a framework sends a stock model name; the per-agent URL decides
    r = client(gateway, ex, "solver").chat.completions.create(
        model="gpt-4o-mini", temperature=0.0, messages=[{"role": "user", "content": "hi"}])
    assert r.choices[0].message.content == "p_solver:hi#0" and r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens == len("p_solver:hi#0") + 1  # the engine's ids, EOS included
    req = engine.calls[-1][0]
    # sampled with the rollout's settings: the request's temperature is not the one trained under
    assert req.policy == "p_solver" and req.params.temperature == 0.7 and req.params.top_p == 0.9
    r = client(gateway, ex).chat.completions.create(
        model="verifier", messages=[{"role": "system", "content": "check"},
                                    {"role": "user", "content": [{"type": "text", "text": "x"}]}])
    assert r.choices[0].message.content == "p_verifier:x#0" and r.model == "verifier"
    calls = broker.close(ex)
    assert [(c.agent, c.index, c.order) for c in calls] == [("solver", 0, 0), ("verifier", 0, 1)]
    assert calls[0].completions[0].response_ids[-1] == 0  # kept as the engine made them


def test_n_stop_and_token_cap_reach_the_engine(served):
    engine, broker, gateway = served
    ex = broker.open("t/n", seed=2, max_calls=10, max_tokens=10**6)
    r = client(gateway, ex, "solver").chat.completions.create(
        model="solver", n=3, stop=["STOP", "END"], max_tokens=8, messages=[{"role": "user", "content": "q"}])
    assert [c.message.content for c in r.choices] == ["p_solver:q#0", "p_solver:q#1", "p_solver:q#2"]
    assert [c.index for c in r.choices] == [0, 1, 2]
    params = engine.calls[-1][0].params
    assert params.n == 3 and params.stop == ["END", "STOP"] and params.max_new_tokens == 8
    client(gateway, ex, "solver").chat.completions.create(
        model="solver", max_completion_tokens=500, messages=[{"role": "user", "content": "q"}])
    assert engine.calls[-1][0].params.max_new_tokens == 32  # never above the rollout's budget
    calls = broker.close(ex)
    assert [len(c.completions) for c in calls] == [3, 1] and [c.index for c in calls] == [0, 1]


def test_stream_and_models(served):
    _, broker, gateway = served
    ex = broker.open("t/stream", seed=3, max_calls=10, max_tokens=10**6)
    chunks = list(client(gateway, ex, "verifier").chat.completions.create(
        model="x", stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "s"}]))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == "p_verifier:s#0" and chunks[-1].usage.completion_tokens == len(text) + 1
    assert sorted(m.id for m in client(gateway, ex).models.list()) == ["solver", "verifier"]
    assert [m.id for m in client(gateway, ex, "solver").models.list()] == ["solver"]
    broker.close(ex)


def test_unknown_agent_bad_key_malformed_body(served):
    engine, broker, gateway = served
    ex = broker.open("t/bad", seed=4, max_calls=10, max_tokens=10**6)
    before = len(engine.calls)
    with pytest.raises(openai.NotFoundError, match="unknown agent 'nobody'.*solver"):
        client(gateway, ex).chat.completions.create(model="nobody", messages=[{"role": "user", "content": "q"}])
    with pytest.raises(openai.NotFoundError, match="unknown agent 'planner'"):
        client(gateway, ex, "planner").chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    with pytest.raises(openai.AuthenticationError, match="unknown or finished execution"):
        openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="plm-wrong", max_retries=0).chat.completions.create(
            model="solver", messages=[{"role": "user", "content": "q"}])
    with pytest.raises(openai.BadRequestError, match="messages"):
        client(gateway, ex, "solver").chat.completions.create(model="m", messages=[])
    with pytest.raises(openai.BadRequestError, match="'n'"):
        client(gateway, ex, "solver").chat.completions.create(model="m", n=0, messages=[{"role": "user", "content": "q"}])
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=10)
    conn.request("POST", "/v1/chat/completions", body=b"{not json",
                 headers={"Authorization": f"Bearer {ex.token}", "Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 400 and "not valid JSON" in json.loads(resp.read())["error"]["message"]
    conn.request("GET", "/v2/nothing", headers={"Authorization": f"Bearer {ex.token}"})
    resp = conn.getresponse()
    assert resp.status == 404 and json.loads(resp.read())["error"]["type"] == "not_found"
    conn.close()
    assert len(engine.calls) == before and broker.close(ex) == []  # nothing reached the engine


def test_parse_chat_rejects_what_it_cannot_render():
    for body in ([], {"messages": [{"role": "wizard", "content": "x"}]},
                 {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
                 {"messages": [{"role": "user", "content": "x"}], "stop": [""]},
                 {"messages": [{"role": "user", "content": "x"}], "max_tokens": -1}):
        with pytest.raises(GatewayError) as e:
            parse_chat(body)
        assert e.value.status == 400
    got = parse_chat({"messages": [{"role": "developer", "content": "d"}, {"role": "assistant", "content": None},
                                   {"role": "tool", "content": "42"}], "stop": "X"})
    assert got["messages"] == [{"role": "system", "content": "d"}, {"role": "assistant", "content": ""},
                               {"role": "user", "content": "Tool result: 42"}] and got["stop"] == ["X"]


def test_call_budget_refuses_and_marks_the_execution(served):
    _, broker, gateway = served
    ex = broker.open("t/budget", seed=5, max_calls=1, max_tokens=10**6)
    c = client(gateway, ex, "solver")
    c.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    with pytest.raises(openai.PermissionDeniedError, match="more than 1 calls"):
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    assert ex.error == "budget: more than 1 calls" and len(broker.close(ex)) == 1
    ex = broker.open("t/tokens", seed=5, max_calls=10, max_tokens=15)
    c = client(gateway, ex, "solver")
    r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])  # the call that crosses
    assert ex.tokens == r.usage.total_tokens > 15 and ex.error == f"budget: {ex.tokens} tokens (limit 15)"
    with pytest.raises(openai.PermissionDeniedError, match="tokens"):
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    assert len(broker.close(ex)) == 1


def test_fifty_concurrent_executions_share_engine_batches(served):
    engine, broker, gateway = served
    executions = [broker.open(f"t/c{i}", seed=i, max_calls=4, max_tokens=10**6) for i in range(50)]
    batches_before, calls_before = len(broker.batches), len(engine.calls)
    texts: dict[int, str] = {}
    shared = {a: client(gateway, executions[0], a) for a in AGENTS}  # one connection pool per agent

    def one(i):
        agent = "solver" if i % 2 else "verifier"
        r = shared[agent].with_options(api_key=executions[i].token).chat.completions.create(
            model="m", messages=[{"role": "user", "content": f"q{i}"}])
        texts[i] = r.choices[0].message.content

    threads = [threading.Thread(target=one, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert texts == {i: f"{'p_solver' if i % 2 else 'p_verifier'}:q{i}#0" for i in range(50)}
    for i, ex in enumerate(executions):
        [call] = broker.close(ex)
        assert call.agent == ("solver" if i % 2 else "verifier")
        assert call.completions[0].text == texts[i]  # each answer went to the execution that asked
    batches = broker.batches[batches_before:]
    assert sum(batches) == 50 and len(engine.calls) - calls_before == len(batches)
    assert max(batches) > 1, batches  # concurrent requests shared engine calls


class Failing(ScriptedEngine):
    """Refuses prompts that mention 'bad' (ValueError, as an engine does for what it cannot render)
    and breaks on 'crash' (anything else: the engine's own failure)."""

    def generate(self, requests):
        text = " ".join(m["content"] for r in requests for m in r.messages)
        if "crash" in text:
            raise RuntimeError("out of memory")
        if any("bad" in m["content"] for r in requests for m in r.messages):
            raise ValueError("cannot render this prompt")
        return super().generate(requests)


def test_engine_refusals_and_failures():
    broker = CallBroker(Failing(reply_for), AGENTS, SAMPLING, wait_s=0.05)
    gateway = Gateway(broker)
    try:
        ex = broker.open("t/fail", seed=6, max_calls=10, max_tokens=10**6)
        c = client(gateway, ex, "solver")
        with pytest.raises(openai.BadRequestError, match="cannot render"):
            c.chat.completions.create(model="m", messages=[{"role": "user", "content": "bad"}])
        assert broker.engine_error is None  # a refused request is the program's problem, not the engine's
        with pytest.raises(openai.InternalServerError, match="engine failed"):
            c.chat.completions.create(model="m", messages=[{"role": "user", "content": "crash"}])
        assert isinstance(broker.engine_error, RuntimeError)  # kept: the runner raises it
        assert broker.close(ex) == []
    finally:
        gateway.close()
        broker.shutdown()


def test_responses_api(served):
    engine, broker, gateway = served
    ex = broker.open("t/resp", seed=7, max_calls=10, max_tokens=10**6)
    r = client(gateway, ex, "verifier").responses.create(model="gpt-4o-mini", instructions="be brief",
                                                          input="hello", max_output_tokens=5)
    assert r.output_text == "p_verifier:hello#0" and r.usage.output_tokens == len(r.output_text) + 1
    req = engine.calls[-1][0]
    assert req.messages == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    assert req.params.max_new_tokens == 5
    r = client(gateway, ex).responses.create(model="solver", input=[{"role": "user", "content": "x"}])
    assert r.output_text == "p_solver:x#0"
    with pytest.raises(openai.BadRequestError, match="input"):
        client(gateway, ex, "solver").responses.create(model="m", input=[])
    assert [(c.agent, c.index) for c in broker.close(ex)] == [("verifier", 0), ("solver", 0)]
