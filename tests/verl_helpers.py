"""Shared by the verl tests: one local Ray per test module (the backend then only adds and removes
its worker groups; it does not own, so does not stop, this Ray)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def ray_local():
    from pettingllms.utils.private_ray import start_ray, stop_ray

    assert start_ray(num_cpus=6, log_to_driver=False)
    yield
    stop_ray()
