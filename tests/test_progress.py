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
    assert token_counter(Live())() == 9  # an engine given directly (the dataset scripts)


def test_hf_engine_counts_tokens_as_it_samples():
    from pettingllms.rollout.engines.hf import HFEngine

    engine = HFEngine({"a": "tiny:test"}, dtype="float32")
    out = engine.generate([GenerationRequest([{"role": "user", "content": "Count"}], policy="a",
                                             params=SamplingParams(n=3, temperature=1.0, max_new_tokens=5, seed=1))])
    assert engine.decoded_tokens == sum(len(c.response_ids) for c in out[0]) > 0


def _beats_fast(monkeypatch, caplog):
    """Dataset builds and model conversion take the default interval: make it short."""
    from pettingllms.utils import progress

    monkeypatch.setattr(progress, "DEFAULT_EVERY_S", 0.02)
    caplog.set_level(logging.INFO, logger=progress.__name__)
    return lambda: [r.getMessage() for r in caplog.records if r.name == progress.__name__]


def test_grid_dataset_build_reports_rows(tmp_path, monkeypatch, caplog):
    """build_splits (every grid env's builder): rows done / wanted per split, then "(done)"."""
    from pettingllms.envs.grid.splits import build_splits
    from pettingllms.envs.sudoku.data import EASY_TIERS, make_row

    lines = _beats_fast(monkeypatch, caplog)

    def slow_row(seed):  # the real generator, slowed so that the 0.02 s beat fires mid-split
        time.sleep(0.01)
        return make_row(seed, EASY_TIERS)
    report = build_splits(tmp_path / "sudoku_easy", "sudoku", slow_row, n_train=6, n_test=2)
    assert report["train"]["rows"] == 6
    train = [ln for ln in lines() if ln.startswith("building sudoku_easy (train): ")]
    done = [int(re.match(r"building sudoku_easy \(train\): (\d+)/6 rows, \d+ s", ln).group(1)) for ln in train]
    assert len(done) >= 2 and done == sorted(done)
    assert re.fullmatch(r"building sudoku_easy \(train\): 6/6 rows, \d+ s \(done\)", train[-1])


def test_math_build_reports_sources(tmp_path, monkeypatch, caplog):
    from pettingllms.envs.math import data

    lines = _beats_fast(monkeypatch, caplog)
    real = data._load_source

    def slow_source(*a, **kw):  # the real source, slowed so that the beat fires while it loads
        time.sleep(0.1)
        return real(*a, **kw)
    monkeypatch.setattr(data, "_load_source", slow_source)
    data.build(tmp_path / "math_easy", offline=True)
    said = [ln for ln in lines() if ln.startswith("building math_easy: ")]
    assert said and said[-1].startswith("building math_easy: 1/1 sources, ") and said[-1].endswith("(done)")


def test_a_count_without_total_or_unit():
    count = [5]
    p = Progress("traces", None, "", lambda: count[0], every_s=0)
    count[0] += 12
    assert re.fullmatch(r"traces: 12 tokens, [\d.]+ tok/s, \d+ s", p.line())
    p = Progress("stages", None, "steps", every_s=0)
    p.advance(2)
    assert re.fullmatch(r"stages: 2 steps, \d+ s", p.line())
