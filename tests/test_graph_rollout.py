"""The graph runner (rollout.strategy=graph) on programs that behave and programs that do not:
every call becomes a sample of the agent that made it, grouped by (problem, call index, agent),
with its execution's outcome as reward; a program that raises, loops, exits, goes over its call
budget or never calls the gateway gets reward 0 and a trace, and the run goes on. The engine is the
scripted test double; the programs talk plain HTTP (urllib) to stay quick to start."""
from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from fakes import ScriptedEngine
from pettingllms.algorithms.advantages import EPISODE_RETURN_KEY
from pettingllms.envs import make_env
from pettingllms.rollout.graph.runner import PROGRAM_STEP, GraphRollout
from pettingllms.rollout.runner import RolloutSettings

PROGRAM = textwrap.dedent('''
    import json, os, subprocess, sys, time, urllib.request

    def ask(clients, agent, content, by_env=False):
        # by_env: a stock client configured only by OPENAI_BASE_URL / OPENAI_API_KEY, agent in `model`
        body = json.dumps({"model": agent if by_env else "any",
                           "messages": [{"role": "user", "content": content}]}).encode()
        url = os.environ["OPENAI_BASE_URL"] if by_env else clients.base_url(agent)
        key = os.environ["OPENAI_API_KEY"] if by_env else clients.api_key
        req = urllib.request.Request(url + "/chat/completions", data=body, headers={
            "Authorization": "Bearer " + key, "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.load(r)["choices"][0]["message"]["content"]

    async def both_at_once(problem, clients):  # an async program whose two agents call concurrently
        import asyncio
        loop = asyncio.get_running_loop()
        draft, verdict = await asyncio.gather(
            loop.run_in_executor(None, ask, clients, "solver", problem["question"]),
            loop.run_in_executor(None, ask, clients, "verifier", "check"))
        return draft

    async def with_helpers(problem, clients):  # the clients object's own openai clients
        msgs = [{"role": "user", "content": problem["question"]}]
        draft = clients["solver"].chat.completions.create(model="x", messages=msgs).choices[0].message.content
        check = await clients.async_openai("verifier").chat.completions.create(model="x", messages=msgs)
        return draft if check.choices[0].message.content == "yes" else "no answer"

    def run(problem, clients):
        mode = problem["mode"]
        if mode == "async":
            return both_at_once(problem, clients)
        if mode == "helpers":
            return with_helpers(problem, clients)
        if mode == "silent":
            return "\\\\boxed{5}"
        by_env = mode == "env"
        draft = ask(clients, "solver", problem["question"], by_env)
        if mode == "raises":
            raise ValueError("the program broke")
        if mode == "loops":
            while True:
                time.sleep(0.01)
        if mode == "exits":
            os._exit(3)
        if mode == "spawns":  # a helper process of its own, then a hang: the kill must take both
            helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            with open(f"helper_{helper.pid}.pid", "w") as f:
                f.write(str(helper.pid))
            while True:
                time.sleep(0.01)
        if mode == "chatty":  # prints 5 MB and leaves a helper running, then answers normally
            helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            with open(f"helper_{helper.pid}.pid", "w") as f:
                f.write(str(helper.pid))
            for i in range(5000):
                print(f"line {i} " + "x" * 1000)
        if mode == "greedy":
            for _ in range(5):
                ask(clients, "verifier", draft)
        verdict = ask(clients, "verifier", draft, by_env)
        return draft if "yes" in verdict else "no answer"
''')
MODES = ["ok", "env", "async", "chatty", "raises", "loops", "exits", "greedy", "silent", "spawns"]


def script(req):
    if req.policy == "pol_solver":  # by execution (request ids name it), whatever the batching
        return ["\\boxed{5}" if "/graph0/" in req.request_id else "\\boxed{7}"]
    return ["yes"]


REWARDS = textwrap.dedent('''
    def score(problem, answer, outcome, calls):
        # the verifier earns 1 when its last verdict agrees with the grader; the solver 0.25 a call
        verdicts = ["yes" in c["reply"] for c in calls if c["agent"] == "verifier"]
        assert calls[0]["messages"][-1]["content"] == problem["question"] and problem["answer"] == "5"
        return {"verifier": float(verdicts[-1] == (outcome == 1.0)),
                "solver": 0.25 * sum(c["agent"] == "solver" for c in calls)}

    def bad(problem, answer, outcome, calls):
        return {"nobody": 1.0}
''')


def play(folder, modes, settings=None, **options):
    """Both executions of every mode's problem, with the program above and the scripted engine."""
    (folder / "toy_graph_program.py").write_text(PROGRAM)
    (folder / "toy_graph_rewards.py").write_text(REWARDS)
    mp = pytest.MonkeyPatch()
    mp.chdir(folder)  # the program is imported from the working directory
    try:
        opts = dict(program="toy_graph_program", agents=["solver", "verifier"], max_calls=4, **options)
        rollout = GraphRollout(ScriptedEngine(script), lambda: make_env("graph", **opts),
                               {"solver": "pol_solver", "verifier": "pol_verifier"},
                               RolloutSettings(strategy="graph", k=2, sampling={"max_new_tokens": 16},
                                               **(settings or {})))
        problems = [{"id": m, "mode": m, "question": "What is 2 + 3?", "answer": "5"} for m in modes]
        start = time.monotonic()
        out = rollout.run(problems, seed=0)
        return out, time.monotonic() - start, folder
    finally:
        mp.undo()


# Each program's wall budget: long enough for a fresh interpreter to start and finish the quick
# programs on a busy box (3 s was not, at a load of 11: two test workers and other work), short
# enough that waiting for the looping ones stays cheap.
WALL_S = 8.0


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    return play(tmp_path_factory.mktemp("graph_programs"), MODES, wall_s=WALL_S, workers=20)


@pytest.fixture(scope="module")
def helpers_batch(tmp_path_factory):
    """The clients object's openai helpers (importing openai takes longer than 3 s on a busy box)."""
    return play(tmp_path_factory.mktemp("graph_helpers"), ["helpers"], wall_s=60.0)


def episodes(batch, mode):
    return [e for e in batch[0].episodes if e.problem_id == mode]


@pytest.mark.parametrize("mode", ["ok", "env"])
def test_calls_become_samples_of_the_agent_that_made_them(batch, mode):
    ok = episodes(batch, mode)
    assert [e.episode_id for e in ok] == [f"{mode}/graph0", f"{mode}/graph1"]
    rewards = sorted(e.trajectory.team_reward for e in ok)
    assert rewards == [0.0, 1.0]  # execution 0 answered \boxed{5}, execution 1 \boxed{7}
    for e in ok:
        assert [(s.agent, s.turn, s.policy) for s in e.samples] == [("solver", 0, "pol_solver"),
                                                                   ("verifier", 0, "pol_verifier")]
        for s in e.samples:
            assert s.reward == e.trajectory.team_reward and s.info[EPISODE_RETURN_KEY]
            assert s.group_key == (mode, 0, s.agent) and s.response_ids and len(s.logprobs) == len(s.response_ids)
        last = e.trajectory.steps[-1]
        assert last.agent == PROGRAM_STEP and last.info["ok"] and last.info["calls"] == 2
        assert e.trajectory.success == (e.trajectory.team_reward == 1.0)


@pytest.mark.parametrize("mode", ["async", "helpers"])
def test_async_programs_and_the_clients_helpers(batch, helpers_batch, mode):
    first, second = episodes(helpers_batch if mode == "helpers" else batch, mode)
    assert (first.trajectory.team_reward, second.trajectory.team_reward) == (1.0, 0.0)
    for e in (first, second):
        assert sorted((s.agent, s.turn) for s in e.samples) == [("solver", 0), ("verifier", 0)]
        assert sorted(s.info["call"] for s in e.samples) == [0, 1]


@pytest.mark.parametrize("mode, error, calls", [
    ("raises", "program: ValueError: the program broke", 1),
    ("loops", f"timeout: the program ran past env.options.wall_s={WALL_S}s", 1),
    ("spawns", f"timeout: the program ran past env.options.wall_s={WALL_S}s", 1),
    ("exits", "exit: the program ended without a result (exit code 3)", 1),
    ("greedy", "budget: more than 4 calls", 4),
    ("silent", "no_calls: the program made 0 model call(s)", 0),
])
def test_a_failing_program_gets_zero_and_a_trace(batch, mode, error, calls):
    for e in episodes(batch, mode):
        last = e.trajectory.steps[-1]
        assert e.trajectory.team_reward == 0.0 and not last.info["ok"]
        assert last.info["error"].startswith(error), last.info["error"]
        assert len(e.samples) == calls and all(s.reward == 0.0 for s in e.samples)
        if mode == "raises":
            assert "Traceback" in last.info["trace"] and "the program broke" in last.info["trace"]


def test_the_run_is_bounded_by_the_wall_budget(batch):
    out, seconds, _ = batch
    assert len(out.episodes) == 2 * len(MODES)
    assert out.counters["graph/runs"] == 20.0 and out.counters["graph/errors"] == 12.0  # as metrics
    assert out.counters["graph/errors/timeout"] == 4.0
    assert all(out.counters[f"graph/errors/{kind}"] == 2.0 for kind in ("program", "exit", "budget", "no_calls"))
    assert seconds < WALL_S + 10.0  # the looping program was killed at its wall budget, not waited for


def test_a_chatty_program_keeps_only_its_output_tail(batch):
    for e in episodes(batch, "chatty"):
        last = e.trajectory.steps[-1]
        assert last.info["ok"] and last.info["stdout"].endswith("line 4999 " + "x" * 1000 + "\n")
        assert len(last.info["stdout"]) <= 4000


def test_a_program_takes_its_own_processes_with_it(batch):
    """Stopped at its wall budget (spawns) or ended normally (chatty), its helpers are killed too."""
    pids = [int(p.read_text()) for p in batch[2].glob("helper_*.pid")]
    assert len(pids) == 4
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except FileNotFoundError:
            continue  # gone
        assert state == "Z", f"helper {pid} of a killed program is still running ({state})"


def test_a_program_that_cannot_be_found_is_a_config_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="program module 'no_such_program' not found"):
        make_env("graph", program="no_such_program", agents=["a"])
    (tmp_path / "prog.py").write_text("def run(p, c):\n    return 1\n")
    with pytest.raises(ValueError, match="distinct agent names"):
        make_env("graph", program="prog", agents=["a", "a"])
    assert make_env("graph", program="prog:run", agents=["a", "b"]).agents == ("a", "b")


def test_local_rewards_are_mixed_with_the_outcome_per_agent(tmp_path):
    """env.options.local_rewards: each agent's own reward, mixed by reward.team_weight / local_weight
    as in the turn-based envs; a failed execution gets 0 and is not scored."""
    out, _, _ = play(tmp_path, ["ok", "raises"], settings={"team_weight": 1.0, "local_weight": 0.5},
                     wall_s=60.0, local_rewards="toy_graph_rewards:score")
    got = {(e.episode_id, s.agent): (s.team_reward, s.local_reward, s.reward) for e in out.episodes for s in e.samples}
    assert got == {
        ("ok/graph0", "solver"): (1.0, 0.25, 1.125), ("ok/graph0", "verifier"): (1.0, 1.0, 1.5),  # right, said yes
        ("ok/graph1", "solver"): (0.0, 0.25, 0.125), ("ok/graph1", "verifier"): (0.0, 0.0, 0.0),  # wrong, said yes
        ("raises/graph0", "solver"): (0.0, 0.0, 0.0), ("raises/graph1", "solver"): (0.0, 0.0, 0.0)}
    for e in out.episodes:
        last = e.trajectory.steps[-1]
        assert last.info["local_rewards"] == ({} if e.problem_id == "raises" else
                                              {"verifier": float(e.episode_id.endswith("0")), "solver": 0.25})
        assert [st.local_reward for st in e.trajectory.steps[:-1]] == [s.local_reward for s in e.samples]
    with pytest.raises(RuntimeError, match="must return .agent: number. for agents among .'solver', 'verifier'."):
        play(tmp_path, ["ok"], wall_s=60.0, local_rewards="toy_graph_rewards:bad")


def test_local_rewards_need_agent_groups(tmp_path):
    from pettingllms.cli.config_loading import load_config
    from pettingllms.errors import ConfigError

    with pytest.raises(ConfigError, match="keep 'agent' in algorithm.group_by"):
        load_config("graph_openai_math", ["model=tiny", "env.options.local_rewards=examples.openai_math.program:run",
                                          "algorithm.group_by=[problem]"])
    load_config("graph_openai_math", ["model=tiny", "env.options.local_rewards=examples.openai_math.program:run",
                                      "algorithm.group_by=[problem]", "reward.local_weight=0"])
