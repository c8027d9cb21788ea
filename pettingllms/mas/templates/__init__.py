"""Documented design templates, one plain design file per DSL pattern.

They are examples for the designer prompt and the seeds of the SFT cold-start data (a template
instantiated for a problem is a valid design). `load_templates()` -> {name: source}; the files
are never imported as modules (they are designs: they run through the executor).
`workflow/` holds designs in the released MetaAgent-X format (`load_templates("workflow")`), the
fallback templates of `mas.design_format: workflow`.
"""
from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).parent


def _folder(design_format: str) -> Path:
    """Our DSL's templates here; the released `workflow` format's in workflow/."""
    return _HERE / "workflow" if design_format == "workflow" else _HERE


def template_names(design_format: str = "pettingllms") -> list[str]:
    return sorted(p.stem for p in _folder(design_format).glob("*.py") if p.stem != "__init__")


def load_templates(design_format: str = "pettingllms") -> dict[str, str]:
    folder = _folder(design_format)
    return {name: (folder / f"{name}.py").read_text(encoding="utf-8")
            for name in template_names(design_format)}
