"""Import a script under scripts/ (not a package) as a module, for tests of its functions."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(rel: str) -> ModuleType:
    """`rel` relative to the repo root; registered in sys.modules under its stem, which dataclasses
    defined in the script need to resolve their own module."""
    path = ROOT / rel
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module
