"""Which design format a designer model writes (mas.design_format), read from what the model ships.

    python -m pettingllms.mas.design_format MODEL   # prints pettingllms|workflow; the reason on stderr

For a local model folder the files decide, first match wins:
  1. a `design_format` (or `pettingllms_design_format`) key in config.json / generation_config.json;
  2. the run's config.yaml next to a checkpoint of ours (the folder or up to three levels above it):
     its `mas.design_format`;
  3. the folder's README.md (model card) or chat template (chat_template.jinja, tokenizer_config.json's
     chat_template) quoting the released API (`from workflow import`, `AgentNode(`, ...) -> workflow,
     or our DSL (`from pettingllms.mas.dsl import`) -> pettingllms;
  4. the model card or config naming the released model (Mercury7353/MetaAgent-X, as base_model or
     _name_or_path) -> workflow.
Otherwise (a hub id, or a folder with none of these) the name decides as the scripts always did: a
name containing MetaAgent-X is the released model's workflow format, anything else pettingllms.
The scripts call this unless DESIGN_FORMAT is set.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

FORMATS = ("pettingllms", "workflow")
_WORKFLOW_API = re.compile(r"from\s+workflow\s+import|\b(?:AgentNode|EnsembleNode|DebateNode|ReflectionNode)\s*\(")
_OUR_DSL = re.compile(r"from\s+pettingllms\.mas\.dsl\s+import")
_RELEASED = re.compile(r"meta[-_]?agent[-_]x", re.I)
_KEYS = ("design_format", "pettingllms_design_format")


def _read(path: Path, limit: int = 400_000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[:limit] if path.is_file() else ""
    except OSError:
        return ""


def _json(path: Path) -> dict:
    try:
        value = json.loads(_read(path))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _run_config_format(folder: Path) -> str | None:
    for parent in [folder, *list(folder.parents)[:3]]:
        text = _read(parent / "config.yaml")
        block = re.search(r"^mas:\s*\n((?:[ \t]+.*\n?)*)", text, re.M)
        hit = block and re.search(r"^[ \t]+design_format:\s*['\"]?(\w+)", block.group(1), re.M)
        if hit and hit.group(1) in FORMATS:
            return hit.group(1)
    return None


def detect(model: str) -> tuple[str, str]:
    """(design format, why) for a model id or local folder."""
    folder = Path(model)
    if folder.is_dir():
        configs = {name: _json(folder / name) for name in ("config.json", "generation_config.json")}
        for name, cfg in configs.items():
            for key in _KEYS:
                if cfg.get(key) in FORMATS:
                    return cfg[key], f"{name} of {folder} sets {key}={cfg[key]}"
        found = _run_config_format(folder)
        if found:
            return found, f"the run's config.yaml above {folder} has mas.design_format={found}"
        card = _read(folder / "README.md")
        template = _read(folder / "chat_template.jinja") + str(_json(folder / "tokenizer_config.json")
                                                               .get("chat_template") or "")
        for where, text in (("README.md", card), ("chat template", template)):
            if _WORKFLOW_API.search(text):
                return "workflow", f"the {where} of {folder} quotes the released workflow API"
            if _OUR_DSL.search(text):
                return "pettingllms", f"the {where} of {folder} quotes pettingllms.mas.dsl"
        names = card + " " + " ".join(str(c.get("_name_or_path") or "") for c in configs.values())
        if _RELEASED.search(names):
            return "workflow", f"{folder}'s model card or config names MetaAgent-X"
    if _RELEASED.search(model):
        return "workflow", f"the name {model} is the released MetaAgent-X model's"
    return "pettingllms", f"nothing in {model} names a design format: the default"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m pettingllms.mas.design_format MODEL", file=sys.stderr)
        return 2
    fmt, why = detect(args[0])
    print(fmt)
    print(f"design format {fmt}: {why} (DESIGN_FORMAT=workflow|pettingllms overrides)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
