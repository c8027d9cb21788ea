"""Documented design templates, one plain design file per DSL pattern.

They are examples for the designer prompt and the seeds of the SFT cold-start data (a template
instantiated for a problem is a valid design). `load_templates()` -> {name: source}; the files
are never imported as modules (they are designs: they run through the executor).
"""
from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).parent


def template_names() -> list[str]:
    return sorted(p.stem for p in _HERE.glob("*.py") if p.stem != "__init__")


def load_templates() -> dict[str, str]:
    return {name: (_HERE / f"{name}.py").read_text(encoding="utf-8") for name in template_names()}
