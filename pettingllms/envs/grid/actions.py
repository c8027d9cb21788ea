"""Reading actions out of a reply or a program's output: the `Actions:` payload and U/D/L/R moves."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

MAX_PARSE_CHARS = 20_000  # action payloads longer than this are cut before tokenising

MOVE_DELTAS = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
_MOVE_WORDS = {"u": "U", "up": "U", "d": "D", "down": "D", "l": "L", "left": "L", "r": "R", "right": "R"}

_MARKER = re.compile(r"^[\s>*#_`-]*(?:final\s+)?(?:actions?|moves?)\s*[*_`]*\s*[:=]", re.I | re.M)


def has_marker(text: str) -> bool:
    """Whether `text` names its actions with a marker line (`Actions: ...`)."""
    return _MARKER.search(text) is not None


def action_payload(text: str, bare_ok: bool = False) -> str | None:
    """The text after the last `Actions:` marker that has any, up to the next blank line (so an
    explanation after the actions is not read as actions).

    Without a marker: the last non-empty line, which the env accepts only if every token in
    it is an action; with `bare_ok` (program output) the whole text.
    """
    if not isinstance(text, str) or not text.strip():
        return None
    payload = None
    for marker in _MARKER.finditer(text):
        rest = text[marker.end():marker.end() + MAX_PARSE_CHARS].lstrip(" \t\r\n")
        rest = re.split(r"\n[ \t\r]*\n", rest, maxsplit=1)[0]
        if rest.strip() or payload is None:  # a reply cut off right after its last marker keeps the one before
            payload = rest
    if payload is not None:
        return payload
    if bare_ok:
        return text[-MAX_PARSE_CHARS:]
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:MAX_PARSE_CHARS] if lines else None


@dataclass
class ParsedActions:
    actions: list[Any] = field(default_factory=list)
    unknown: int = 0  # tokens that were not actions (counted as invalid moves)
    truncated: int = 0  # actions beyond max_actions, dropped


_MOVE_SPLIT = re.compile(r"[\s,;.\[\]()\"'`{}|/>*+-]+")


def parse_moves(payload: str | None, max_actions: int, strict: bool = False) -> ParsedActions:
    """U/D/L/R moves from a payload: 'U, D, L', 'UUDL', '["up", "left"]', 'Up Right'.

    `strict`: the payload came without a marker, so it counts only if every token is a move.
    """
    out = ParsedActions()
    if not payload:
        return out
    for token in _MOVE_SPLIT.split(payload):
        if not token:
            continue
        low = token.lower()
        if low in _MOVE_WORDS:
            moves = [_MOVE_WORDS[low]]
        elif set(low) <= set("udlr"):
            moves = [c.upper() for c in low]
        else:
            if strict:
                return ParsedActions()
            out.unknown += 1
            continue
        for m in moves:
            if len(out.actions) < max_actions:
                out.actions.append(m)
            else:
                out.truncated += 1
    return out
