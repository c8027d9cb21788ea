"""The search env: synthetic data and BM25 retrieval, the turn structure with real retrieval,
EM/F1 grading, the HTTP retriever against a local FlashRAG-style server, the FlashRAG hub
loaders on rows in the hub's schema, the config, and one AT-GRPO step (tiny model; the embedded
model in a slow test)."""
from __future__ import annotations

import copy
import json

import pytest

from pettingllms.envs import make_env
from pettingllms.envs.dataset import load_split
from pettingllms.envs.search import answers as A
from pettingllms.envs.search.data import CORPUS_FILE, build
from pettingllms.envs.search.retrieval import HttpRetriever, bm25_over
from pettingllms.envs.search.serve import serve_in_thread

BUILDER = "pettingllms.envs.search.data"
R, W = "search_reasoning_agent", "web_search_agent"


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tmp_path_factory.mktemp("search_data")


@pytest.fixture(scope="module")
def test_rows(data_root):
    return load_split("search", "test", data_root, builder=BUILDER)  # built on first use, as training does


@pytest.fixture(scope="module")
def corpus(data_root, test_rows):
    return str(data_root / "search" / CORPUS_FILE)


@pytest.fixture(scope="module")
def server(corpus):
    srv, url = serve_in_thread(bm25_over(corpus))
    yield url
    srv.shutdown()
    srv.server_close()


def test_offline_retrieval_finds_the_gold_document_in_the_top_3(test_rows, corpus):
    # the first fact from the question itself; the second from the sub-question about the middle entity
    retriever = bm25_over(corpus)
    assert len(test_rows) == 200 and all(len(r["hops"]) == 2 for r in test_rows)
    for hop, text in ((0, lambda r: r["question"]), (1, lambda r: r["hops"][1]["question"])):
        found = [r["hops"][hop]["doc_id"] in [d.id for d in retriever.search(text(r), 3)] for r in test_rows]
        assert sum(found) / len(found) >= 0.9, f"hop {hop + 1}: gold in top 3 for {sum(found)}/{len(found)}"
    docs = retriever.search(test_rows[0]["hops"][1]["question"], 3)
    assert len(docs) == 3 and docs[0].score >= docs[1].score >= docs[2].score


def test_the_data_is_seeded_with_disjoint_people_and_one_corpus(tmp_path, data_root, test_rows):
    train = load_split("search", "train", data_root, builder=BUILDER)
    assert not {r["hops"][0]["doc_id"] for r in train} & {r["hops"][0]["doc_id"] for r in test_rows}

    def files(name, **kw):
        build(tmp_path / name / "search", n_train=20, n_test=5, **kw)
        return (tmp_path / name / "search" / "test.parquet").read_bytes(), \
            (tmp_path / name / "search" / CORPUS_FILE).read_text()
    first = files("a")
    assert files("b") == first and files("c", seed=1) != first
    easy = build(tmp_path / "search_easy", n_train=20, n_test=5)
    assert easy["hops"] == 1
    easy_rows = load_split("search_easy", "test", tmp_path)
    assert all(len(r["hops"]) == 1 and r["answer"] == r["hops"][0]["answer"] for r in easy_rows)
    with pytest.raises(Exception, match="never replaces"):
        build(tmp_path / "search_easy")


def gold_episode(row, **options):
    """Scripted replies in the formats, searching with the sub-questions and answering each from
    a retrieved document (the gold hop answer, asserted to be in the results); returns the env
    and the local rewards in order."""
    env = make_env("search", **options)
    env.reset(row, seed=0)
    q1, q2 = (h["question"] for h in row["hops"])
    rewards = []

    def act(agent, reply):
        rewards.append(env.step(agent, reply).local_reward)
        if agent == W:
            env.end_turn()

    def answer_from_results(hop):
        assert any(row["hops"][hop]["answer"] in d.text for d in env.results)
        return f"**Answer:** {row['hops'][hop]['answer']}"

    act(R, f"Let me split it.\n### {q1}\n### {q2.replace(row['hops'][0]['answer'], '#1')}")
    act(W, f"**Search Query:** {q1}")
    act(R, "**Final Answer:** not sure yet")  # recorded, but sub-questions are open: no end
    act(W, answer_from_results(0))
    act(R, "waiting")
    act(W, f"**Search Query:** {A.with_answers(env.questions[1], env.answers)}")
    act(R, "still waiting")
    act(W, answer_from_results(1))
    act(R, f"It follows from the answers.\n**Final Answer:** {row['answer']}")
    return env, rewards


def test_a_gold_episode_with_real_retrieval_succeeds_in_five_turns(test_rows, corpus):
    row = test_rows[0]
    env, rewards = gold_episode(row, corpus=corpus)
    assert env.done and env.success and env.team_reward() == 1.0 and env.turn == 4
    assert env.answers == [h["answer"] for h in row["hops"]]
    assert rewards == [0.0, 0.0, 0.0, 0.1, 0.0, 0.0, 0.0, 0.5, 1.0]
    assert env.queries[1] == row["hops"][1]["question"]  # #1 was replaced by the first sub-answer


def test_the_web_search_agent_sees_the_results_and_the_reasoner_the_sub_answers(test_rows, corpus):
    row = test_rows[1]
    env = make_env("search", corpus=corpus)
    env.reset(row, seed=0)
    assert "###" in env.observation(R)[1]["content"] and "wait" in env.observation(W)[1]["content"]
    env.step(R, "no sub-questions here")
    env.step(W, "**Search Query:** anything")  # nothing to search for yet: idle, zero
    env.end_turn()
    assert "had no ### sub-questions" in env.observation(R)[1]["content"] and not env.done
    env.step(R, f"### {row['hops'][0]['question']}")
    assert f"Sub-question 1/1: {row['hops'][0]['question']}" in env.observation(W)[1]["content"]
    assert env.step(W, "**Answer:** a guess before searching").local_reward == 0.0  # must search first
    env.step(W, f"**Search Query:** {row['hops'][0]['question']}")
    seen = env.observation(W)[1]["content"]
    assert "1. " in seen and row["hops"][0]["answer"] in seen and "**Answer:**" in seen
    assert "Latest search results" in env.observation(R)[1]["content"]
    branch = copy.deepcopy(env)
    assert branch.retriever is env.retriever  # copies share the index
    assert branch.step(W, f"**Answer:** {row['hops'][0]['answer']}").local_reward == 0.5
    assert row["hops"][0]["answer"] in branch.observation(R)[1]["content"] and env.answers == [None]


def test_grading_is_exact_match_and_token_f1():
    assert A.exact_match("The  Paris!", ["paris"]) == 1.0 and A.exact_match("Paris, France", ["Paris"]) == 0.0
    assert A.f1("Paris, France", ["Paris"]) == pytest.approx(2 / 3) and A.f1(None, ["x"]) == 0.0
    assert A.exact_match("b", ["a", "B"]) == 1.0 and A.f1("x", ["", " "]) == 0.0
    assert A.final_answer("think\n**Final Answer:** Kiev") == "Kiev" and A.final_answer("Answer: x") is None
    assert A.sub_answer("**Answer:** Berlin") == "Berlin" and A.search_query("Search Query: a b") == "a b"
    assert A.sub_questions("### a one\n#### no\n###  two ?") == ["a one", "# no", "two ?"]
    assert A.with_answers("In which country is #1? (#3)", ["Lyon"]) == "In which country is Lyon? (#3)"


@pytest.mark.parametrize("reply", ["", "no idea", "\x00\xff" * 1000, "**Final Answer:** " + "9" * 100_000,
                                   "### " * 5000, None])
def test_garbage_replies_score_zero(reply, test_rows, corpus):
    env = make_env("search", corpus=corpus, max_turns=2)
    env.reset(test_rows[2], seed=0)
    for _ in range(2):
        rewards = [env.step(a, reply).local_reward for a in env.agents]
        env.end_turn()
    assert env.done and env.team_reward() == 0.0 and rewards == [0.0, 0.0]
    assert env.step(R, "**Final Answer:** x").info["error"] == "episode is over"


def test_bad_options_and_a_missing_corpus_fail_with_one_line(tmp_path):
    from pettingllms.errors import ConfigError

    for bad in ({"colour": "red"}, {"retriever": "grep"}, {"topk": 0}, {"max_turns": 0}):
        with pytest.raises((TypeError, ValueError)):
            make_env("search", **bad)
    env = make_env("search", corpus=str(tmp_path / "none.jsonl"))
    with pytest.raises(ConfigError, match="not found"):
        env.reset({"id": "x", "question": "q?", "golden_answers": ["a"]}, seed=0)
    (tmp_path / "bad.jsonl").write_text('{"id": 1}\n')
    with pytest.raises(ConfigError, match="line 1"):
        make_env("search", corpus=str(tmp_path / "bad.jsonl")).reset({"question": "q?", "answer": "a"}, seed=0)
    with pytest.raises(ValueError, match="http"):
        make_env("search", search_url="ftp://x").reset({"question": "q?", "answer": "a"}, seed=0)


def test_the_http_client_against_a_local_flashrag_style_server(server, corpus, test_rows, monkeypatch):
    import requests

    local, remote = bm25_over(corpus), HttpRetriever(server)
    for row in test_rows[:10]:
        assert remote.search(row["question"], 3) == local.search(row["question"], 3)
    raw = requests.post(server, json={"queries": ["city country", "institute"], "topk": 2}, timeout=10).json()
    assert len(raw["result"]) == 2 and set(raw["result"][1][0]) == {"id", "contents"}  # no scores asked
    assert requests.post(server, json={"queries": "x"}, timeout=10).status_code == 400
    monkeypatch.setenv("SEARCH_API_URL", server)  # auto picks the server named by the variable
    env, rewards = gold_episode(test_rows[3])
    assert isinstance(env.retriever, HttpRetriever) and env.success and rewards[-1] == 1.0


def test_a_server_that_is_down_gives_no_results_not_a_crash(test_rows):
    env = make_env("search", search_url="http://127.0.0.1:9/retrieve", timeout_s=2)
    env.reset(test_rows[0], seed=0)
    env.step(R, f"### {test_rows[0]['hops'][0]['question']}")
    result = env.step(W, "**Search Query:** anything")
    assert result.local_reward == 0.0 and result.info["hits"] == 0 and env.retriever.failures == 1
    assert "No search results found." in env.observation(W)[1]["content"]


def test_flashrag_hub_rows_load_offline(tmp_path, corpus):
    from pettingllms.envs.search.hub import build_hub

    hub = tmp_path / "hub"  # the hub repo's layout and row schema, as a local copy
    sets = {("nq", "train"): [{"id": "train_0", "question": "who wrote hamlet", "golden_answers": ["Shakespeare",
                                                                                                   "W. Shakespeare"],
                                "metadata": {}},
                               {"id": "train_1", "question": "no gold", "golden_answers": [], "metadata": {}}],
            ("nq", "test"): [{"id": "test_0", "question": "capital of france", "golden_answers": ["Paris"],
                              "metadata": {}}],
            ("hotpotqa", "dev"): [{"id": "5a8b", "question": "Which magazine was started first?",
                                   "golden_answers": ["Arthur's Magazine"],
                                   "metadata": {"type": "comparison", "level": "medium",
                                                "supporting_facts": {"title": ["A"], "sent_id": [0]}}}]}
    for (name, split), rows in sets.items():
        folder = hub / "RUC-NLPIR" / "FlashRAG_datasets" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = build_hub(tmp_path / "search_flashrag", test_sets=["nq", "hotpotqa"], hub_dir=hub, online=False)
    assert report["test"] == {"nq": "test", "hotpotqa": "dev"} and report["train"] == {"nq": 1}
    train = load_split("search_flashrag", "train", tmp_path)
    test = load_split("search_flashrag", "test", tmp_path)
    assert train == [{"id": "nq-train_0", "question": "who wrote hamlet?", "answer": "Shakespeare",
                      "golden_answers": ["Shakespeare", "W. Shakespeare"], "kind": "nq", "source": "nq", "hops": []}]
    assert [r["source"] for r in test] == ["nq", "hotpotqa"]
    env = make_env("search", corpus=corpus)  # the env reads hub rows (any corpus; here the synthetic one)
    env.reset(train[0], seed=0)
    env.step(R, "**Final Answer:** w shakespeare")
    assert env.done and env.success
    with pytest.raises(Exception, match="musique"):
        build_hub(tmp_path / "other", test_sets=["musique"], hub_dir=hub, online=False)


def test_the_search_config_composes_and_points_at_the_built_corpus(data_root, test_rows):
    from pettingllms.cli.config_loading import load_config
    from pettingllms.trainer import components as comp

    cfg = load_config("search_L1_prompt", [f"env.data_root={data_root}"])
    assert cfg.env.name == "search" and cfg.env.max_turns == 5 and cfg.env.options.topk == 3
    env = comp.make_env_factory(cfg)()
    assert env.corpus == f"{data_root}/search/{CORPUS_FILE}" and env.agents == (R, W)
    rows = comp.load_problems(cfg, "test", 2)
    env.reset(rows[0], seed=0)
    assert env.retriever.search(rows[0]["question"], 1)[0].id == rows[0]["hops"][0]["doc_id"]


def one_step(tmp_path, *extra: str) -> dict:
    from pettingllms.cli.config_loading import load_config
    from trainer_fixtures import fit

    cfg = load_config("tiny_test", ["env=search", "env.data=search_easy", f"env.data_root={tmp_path}",
                                    "env.max_turns=2", "trainer.total_steps=1", "trainer.run_name=r",
                                    f"trainer.output_dir={tmp_path / 'out'}", *extra])
    last = fit(cfg)[-1]
    assert last["step"] == 1 and last["samples/count"] >= 2 * 2 * 2  # batch 2, k 2, two agents, >= 1 turn
    assert all(f"reward/{a}/mean" in last for a in (R, W))
    return last


def test_one_at_grpo_step_on_the_tiny_model(tmp_path):
    one_step(tmp_path)


@pytest.mark.slow  # the embedded model (SmolLM2-135M, LoRA), one AT-GRPO step
def test_one_at_grpo_step_on_the_embedded_model(tmp_path):
    # one turn (decompose, then one search): the step's cost grows with every turn on this model
    one_step(tmp_path, "model=embedded", "model.lora.enabled=true", "rollout.sampling.max_new_tokens=24",
             "env.max_turns=1",
             "trainer.micro_batch_size=2", "trainer.deterministic=false")
