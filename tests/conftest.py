"""Process-wide state that one test must not leak into the next."""
from __future__ import annotations

import pytest
import torch

_SET_NUM_THREADS = torch.set_num_threads


@pytest.fixture(autouse=True)
def _torch_set_num_threads_restored():
    """vLLM's CPU worker replaces `torch.set_num_threads` with a no-op once it has bound its threads;
    the tests that run later in the same process (the 1- and 2-thread numerics variants, the
    thread-count choice) need the real one back."""
    yield
    torch.set_num_threads = _SET_NUM_THREADS
