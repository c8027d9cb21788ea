"""Process-wide state that one test must not leak into the next, and which tests share a worker when
the suite runs on two (`pytest -n 2 --dist loadgroup`, README's command)."""
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


# Files whose tests start vLLM engines or servers (several GiB each, and a second at once can starve
# the box's memory) or private Rays and verl's process groups (their ports, their processes): each
# set runs on one worker, one test at a time; every other test runs beside them on the other.
_SERIAL_GROUPS = {
    "vllm": ("test_engine_vllm", "test_engine_openai", "test_vllm_server", "test_engine_paths", "test_ui",
             "test_vision", "test_gpu_config"),
    "ray": ("test_backend_ray", "test_exposure", "test_placement", "test_verl_backend", "test_verl_trainer",
            "test_stop", "test_never_hang"),
}
_GROUP_OF = {name: group for group, names in _SERIAL_GROUPS.items() for name in names}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups into the test ids
def pytest_collection_modifyitems(config, items):
    for item in items:
        group = _GROUP_OF.get(item.path.stem)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
