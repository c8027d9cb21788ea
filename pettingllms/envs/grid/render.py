"""Grid states and positions as text for prompts: the drawn grid, cells and offsets in words."""
from __future__ import annotations

from typing import Any

MAX_ECHO_CHARS = 1200  # how much of another agent's output is shown back in a prompt


def render_grid(rows: list[str] | list[list[Any]], coords: bool = True,
                boxes: tuple[int, int] | None = None) -> str:
    """Rows of one-character cells as text, with 1-based column and row numbers.

    `boxes=(h, w)` draws separators between h x w blocks (sudoku boxes).
    """
    cells = [[str(c) for c in row] for row in rows]
    width = max((len(r) for r in cells), default=0)
    cw = max((len(c) for r in cells for c in r), default=1)  # cell width (sudoku 12x12, 16x16: 2)

    def join(items: list[str]) -> str:
        if not boxes:
            return " ".join(items)
        groups = [" ".join(items[j:j + boxes[1]]) for j in range(0, len(items), boxes[1])]
        return " | ".join(groups)

    body = [join(r) for r in cells]
    pad = len(str(len(cells))) + 1 if coords else 0
    if coords:
        body = [f"{i + 1:>{pad - 1}} " + line for i, line in enumerate(body)]
    if boxes:
        rule = " " * pad + "-" * len(join(["x" * cw] * width))
        body = [line for i, row in enumerate(body)
                for line in ([rule, row] if i and i % boxes[0] == 0 else [row])]
    if coords:
        # column labels: their last digit for one-character cells, the whole number for wider cells
        labels = [str((j + 1) % 10) if cw == 1 else str(j + 1).rjust(cw) for j in range(width)]
        body.insert(0, " " * pad + join(labels))
    return "\n".join(body)


def offset_words(frm: tuple[int, int], to: tuple[int, int]) -> str:
    """Where cell `to` lies from cell `frm`, in words: '1 row down and 2 columns left'."""
    dr, dc = to[0] - frm[0], to[1] - frm[1]
    parts = [f"{abs(dr)} row{'s' * (abs(dr) != 1)} {'down' if dr > 0 else 'up'}"] if dr else []
    parts += [f"{abs(dc)} column{'s' * (abs(dc) != 1)} {'right' if dc > 0 else 'left'}"] if dc else []
    return " and ".join(parts) or "the same cell"


def cell_words(p: tuple[int, int]) -> str:
    """A 0-based (row, col) as the grid's 1-based labels."""
    return f"row {p[0] + 1}, column {p[1] + 1}"


def clip_text(text: str, limit: int = MAX_ECHO_CHARS) -> str:
    text = text if isinstance(text, str) else str(text)
    return text if len(text) <= limit else text[: limit // 2] + "\n...[cut]...\n" + text[-limit // 2:]
