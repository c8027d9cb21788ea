"""Shared by the verl tests: one local Ray per test module (the backend then only adds and removes
its worker groups; it does not own, so does not stop, this Ray)."""
from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="module")
def ray_local():
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address="local", num_cpus=6, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
