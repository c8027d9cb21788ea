"""Progress lines during held-out evaluation (issue 29, part 4): problems done / total and tok/s
every few seconds, so an evaluation that takes minutes never looks frozen."""
from __future__ import annotations

import logging
import re
import time

from fakes import ScriptedEngine, ToySumEnv, make_cfg, toy_script
from pettingllms.rollout.engines.base import GenerationRequest, SamplingParams
from pettingllms.rollout.runner import Rollout
from pettingllms.trainer.assemble import rollout_settings
from pettingllms.trainer.evaluation import evaluate_problems
from pettingllms.utils.progress import Progress, token_counter

LINE = re.compile(r"^evaluation \(toy_sum, k=2\): (\d+)/4 problems, ([\d,]+) tokens, ([\d.]+) tok/s, \d+ s")


class SlowEngine(ScriptedEngine):
    """The scripted engine, slow enough for a heartbeat to fire, counting tokens as it goes."""

    def __init__(self, script) -> None:
        super().__init__(script)
        self.decoded_tokens = 0

    def generate(self, requests: list[GenerationRequest]):
        out = super().generate(requests)
        for cs in out:
            for c in cs:
                time.sleep(0.02)
                self.decoded_tokens += len(c.response_ids)
        return out


def _evaluate(progress_s: float, caplog):
    engine = SlowEngine(toy_script({("proposer", 0): ["2"], ("finisher", 0): ["3", "1"]}))
    flat = rollout_settings(make_cfg(rollout={"k": 2, "strategy": "flat"}))
    problems = [{"id": f"p{i}", "target": 5} for i in range(4)]

    def make(settings):
        return Rollout(engine, lambda: ToySumEnv(max_turns=1), {"proposer": "shared", "finisher": "shared"}, settings)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="pettingllms.utils.progress"):
        result = evaluate_problems(make, flat, problems, k=2, seed=0, env_name="toy_sum", temperature=1.0,
                                   chunk=1, progress_s=progress_s)
    lines = [r.getMessage() for r in caplog.records if r.name == "pettingllms.utils.progress"]
    return result, lines, engine


def test_evaluation_prints_problems_done_and_tok_s_while_it_runs(caplog):
    result, lines, engine = _evaluate(0.05, caplog)
    assert len(lines) >= 2, lines  # four chunks of ~0.08 s each (sleeps), a line every 0.05 s
    parsed = [LINE.match(line) for line in lines]
    assert all(parsed), lines
    done = [int(m.group(1)) for m in parsed]
    assert done == sorted(done) and done[-1] == 4 and lines[-1].endswith("(done)")
    assert int(parsed[-1].group(2).replace(",", "")) == engine.decoded_tokens > 0
    assert float(parsed[-1].group(3)) > 0
    quiet, silent, _ = _evaluate(0.0, caplog)
    assert silent == [] and quiet["overall"] == result["overall"]  # the lines change no number


def test_a_short_phase_stays_quiet_and_counts_from_its_start():
    count = [100]
    lines: list[str] = []
    with Progress("build", 3, "files", lambda: count[0], every_s=60, emit=lines.append) as p:
        count[0] += 7
        p.advance(3)
    assert lines == []  # done before the first beat: nothing to reassure anyone about
    assert p.line().startswith("build: 3/3 files, 7 tokens, ")


def test_token_counter_prefers_the_live_count():
    class Timed:
        generated_tokens = 5

    class Live(Timed):
        decoded_tokens = 9

    class Runner:
        def __init__(self, engine):
            self.engine = engine
    assert token_counter(Runner(Live()))() == 9
    assert token_counter(Runner(Timed()))() == 5
    assert token_counter(object()) is None


def test_hf_engine_counts_tokens_as_it_samples():
    from pettingllms.rollout.engines.hf import HFEngine

    engine = HFEngine({"a": "tiny:test"}, dtype="float32")
    out = engine.generate([GenerationRequest([{"role": "user", "content": "Count"}], policy="a",
                                             params=SamplingParams(n=3, temperature=1.0, max_new_tokens=5, seed=1))])
    assert engine.decoded_tokens == sum(len(c.response_ids) for c in out[0]) > 0
