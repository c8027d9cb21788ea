"""scripts/bench/soak.py's arithmetic: what counts as a leak of memory, fds or processes. (The run
itself takes minutes on Ray; its figures are in docs/faults.md with the command.)"""
from __future__ import annotations

import pytest

from script_helpers import load_script

soak = load_script("scripts/bench/soak.py")


def _steps(n: int, driver_rss, worker_rss, fds=lambda s: 40, children=lambda s: 0) -> list[dict]:
    return [{"step": s, "driver": {"pid": 1, "rss_mb": driver_rss(s), "fds": fds(s), "children": 10},
             "workers": [{"pid": 2, "rss_mb": worker_rss(s), "fds": 44, "children": children(s)},
                         {"pid": 3, "rss_mb": worker_rss(s), "fds": 44, "children": 0}]} for s in range(1, n + 1)]


def test_a_flat_run_after_warm_up_meets_the_goal_and_warm_up_growth_does_not_count():
    steps = _steps(60, lambda s: 500 + 10 * min(s, 20), lambda s: 300 + (s % 3))  # grows to step 20, then flat
    summary = soak.summarize(steps)
    assert summary["ok"] and summary["warmup_step"] == 20 and not summary["warmup_cut"]
    assert summary["driver/rss_mb"]["growth"] == 0.0
    assert summary["workers/rss_mb"]["at_warmup"] == pytest.approx(2 * (300 + sum(s % 3 for s in range(20, 25)) / 5))
    assert soak.summary_lines(summary)[-1] == "goal met"


def test_a_memory_leak_an_fd_leak_and_a_process_leak_each_fail_the_goal():
    leaky = soak.summarize(_steps(60, lambda s: 500 + 3 * s, lambda s: 300))  # +120 MB on ~557 MB: 21%
    assert not leaky["ok"] and not leaky["driver/rss_mb"]["ok"] and leaky["workers/rss_mb"]["ok"]
    assert leaky["driver/rss_mb"]["growth"] == pytest.approx((3 * 58 - 3 * 22) / (500 + 3 * 22), abs=1e-3)
    fds = soak.summarize(_steps(60, lambda s: 500, lambda s: 300, fds=lambda s: 40 + s // 10))
    assert not fds["ok"] and fds["driver/fds"]["growth"] > 0 and fds["driver/rss_mb"]["ok"]
    kids = soak.summarize(_steps(60, lambda s: 500, lambda s: 300, children=lambda s: int(s > 40)))
    assert not kids["ok"] and kids["workers/children"]["growth"] == 1
    assert "GROWS" in "\n".join(soak.summary_lines(kids)) and soak.summary_lines(kids)[-1] == "goal NOT met"


def test_a_short_run_measures_from_its_middle_and_says_so():
    summary = soak.summarize(_steps(6, lambda s: 500, lambda s: 300))
    assert summary["warmup_step"] == 3 and summary["window"] == 2 and summary["warmup_cut"] and summary["ok"]
    assert "too short" in soak.summary_lines(summary)[0]
    with pytest.raises(ValueError, match="at least 2 steps"):
        soak.summarize(_steps(1, lambda s: 500, lambda s: 300))


def test_the_plot_is_written_or_its_absence_said(tmp_path):
    message = soak.plot(_steps(5, lambda s: 500, lambda s: 300), tmp_path / "soak.png")
    assert message == f"plot: {tmp_path / 'soak.png'}" and (tmp_path / "soak.png").stat().st_size > 0 \
        or message.startswith("no plot: matplotlib is not installed")
