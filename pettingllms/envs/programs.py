"""Finding the program in a tool agent's reply (math and the grid envs share this).

The code env has its own, stricter extractor (it also needs the program to parse and must tell
solutions from test blocks); see `pettingllms.envs.code.parsing`.
"""
from __future__ import annotations

import re

MAX_PROGRAM_CHARS = 20_000  # longer "programs" are not run (and get 0)

_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_OPEN_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n", re.IGNORECASE)


def extract_program(text: str) -> str | None:
    """The code of a reply: the last complete fenced block; else an unclosed fence
    (generation cut off) up to the end; else the whole text if it calls print()."""
    if not isinstance(text, str) or not text.strip():
        return None
    blocks = [b for b in _FENCE.findall(text) if b.strip()]
    if blocks:
        return blocks[-1].strip("\n")
    opened = list(_OPEN_FENCE.finditer(text))
    if opened:
        code = text[opened[-1].end():].strip("\n")
        return code if code.strip() else None
    return text.strip() if "print(" in text else None
