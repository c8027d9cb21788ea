"""CI's 35-minute budget: costly cases that CI skips and `PETTINGLLMS_ALL_PATHS=1` runs (what each
skipped case would add, and where CI covers the same code instead, is said at the case)."""
from __future__ import annotations

import os

import pytest

ALL_PATHS = os.environ.get("PETTINGLLMS_ALL_PATHS") == "1"


def all_paths_only(cost: str):
    return pytest.mark.skipif(not ALL_PATHS, reason=f"costly ({cost}): PETTINGLLMS_ALL_PATHS=1 runs it; CI's budget")
