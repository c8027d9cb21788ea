"""trainer.threads: a count, 0 or auto; auto's decision from allowed cores and the load."""
from __future__ import annotations

import pytest

from pettingllms.cli.config_loading import load_config
from pettingllms.errors import ConfigError
from pettingllms.utils.threads import choose_threads, parse_threads, read_load


@pytest.mark.parametrize("allowed, cpus, load1, runnable, expected", [
    (2, 2, 0.0, 1, 2),    # quiet box: every allowed core
    (2, 2, 1.0, 2, 1),    # one busy loop next to us: leave its core alone
    (2, 2, 3.0, 5, 1),    # oversubscribed: never below one
    (2, 2, 1.9, 1, 2),    # high average from our own start-up, nothing else running now
    (2, 2, 0.1, 4, 2),    # a spike of runnable tasks that the average has not seen
    (16, 16, 4.0, 5, 12),
    (4, 16, 8.0, 9, 2),   # affinity to 4 of 16 cores: half the machine busy -> half our share
    (1, 8, 0.0, 1, 1),
])
def test_choose_threads(allowed, cpus, load1, runnable, expected):
    assert choose_threads(allowed, cpus, load1, runnable) == expected


def test_read_load(tmp_path):
    f = tmp_path / "loadavg"
    f.write_text("1.50 0.80 0.30 3/412 12345\n")
    assert read_load(str(f)) == (1.5, 3)
    assert read_load(str(tmp_path / "missing")) is None
    f.write_text("garbage\n")
    assert read_load(str(f)) is None


@pytest.mark.parametrize("value, expected", [(0, 0), (3, 3), ("auto", "auto"), ("AUTO", "auto"), ("2", 2)])
def test_parse_threads(value, expected):
    assert parse_threads(value) == expected


@pytest.mark.parametrize("value", [-1, "two", 1.5, True, ""])
def test_parse_threads_rejects(value):
    with pytest.raises(ValueError, match="trainer.threads must be a count >= 0 or 'auto'"):
        parse_threads(value)


def test_config_accepts_auto_and_rejects_garbage():
    assert load_config("tiny_test", ["trainer.threads=auto"]).trainer.threads == "auto"
    assert load_config("tiny_test", ["trainer.threads=2"]).trainer.threads == 2
    for bad in ("many", "-1"):
        with pytest.raises(ConfigError, match=f"invalid value '?{bad}'? for 'trainer.threads'; must be a count "
                                              r">= 0 \(0 keeps torch's default\) or 'auto'"):
            load_config("tiny_test", [f"trainer.threads={bad}"])


def test_apply_threads_sets_torch():
    import torch

    from pettingllms.utils.threads import allowed_cpus, apply_threads
    before = torch.get_num_threads()
    try:
        assert 1 <= apply_threads("auto") <= allowed_cpus()
        assert apply_threads(1) == 1 == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
