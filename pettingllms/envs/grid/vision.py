"""Vision variants of the grid envs: the board drawn as an image that both agents see.

`<env>_vision` is the text env (same rules, rewards, data and agents) whose user message is
[image of the board, text]; the text keeps the task, the turn, the teammates' outputs and a
legend of the drawing, and leaves out the text board and its positions in words. The tool
agent's program still reads the state as JSON on stdin (its interface, shown in its prompt).

Drawing (deterministic: the same board gives the same pixels): one `cell` x `cell` square per
cell, filled with its symbol's background colour, with a centred shape in a second colour for
pieces (agent, box), and grey grid lines. `decode_board` reads a drawing back into rows (tests
check that the picture agrees with the text board on every cell).
"""
from __future__ import annotations

from typing import Any

from pettingllms.envs.base import register_env

GRID_LINE = (128, 128, 128)
# symbol -> (background, piece colour or None, piece shape)
PLAN_PATH_PALETTE = {
    ".": ((255, 255, 255), None, ""),
    "#": ((64, 64, 64), None, ""),
    "G": ((60, 180, 75), None, ""),
    "A": ((255, 255, 255), (0, 90, 220), "circle"),
}
SOKOBAN_PALETTE = {
    "_": ((225, 225, 225), None, ""),
    " ": ((0, 0, 0), None, ""),
    "#": ((64, 64, 64), None, ""),
    ".": ((250, 170, 170), None, ""),
    "$": ((225, 225, 225), (150, 90, 30), "square"),
    "*": ((250, 170, 170), (150, 90, 30), "square"),
    "@": ((225, 225, 225), (0, 90, 220), "circle"),
    "+": ((250, 170, 170), (0, 90, 220), "circle"),
}
LEGENDS = {
    "plan_path": ("The image shows the grid: white squares are free, dark grey squares are obstacles, "
                  "the green square is the goal (G) and the blue circle is you (A). Rows count from the "
                  "top, columns from the left."),
    "sokoban": ("The image shows the level: dark grey squares are walls, light grey squares are floor, "
                "pink squares are targets, brown squares are boxes (on a pink square: a box on a target) "
                "and the blue circle is you. Rows count from the top, columns from the left."),
}


def draw_board(rows: list[str], palette: dict[str, tuple], cell: int = 32) -> Any:
    """The board as an RGB PIL image of len(rows) x width cells of `cell` pixels."""
    from PIL import Image, ImageDraw

    if cell < 8:
        raise ValueError(f"image cell size {cell} is too small to draw (needs >= 8 pixels)")
    width = max((len(r) for r in rows), default=0)
    image = Image.new("RGB", (max(1, width) * cell, max(1, len(rows)) * cell), palette[" "][0]
                      if " " in palette else (0, 0, 0))
    draw = ImageDraw.Draw(image)
    inset = cell // 4
    for i, row in enumerate(rows):
        for j, ch in enumerate(row):
            if ch not in palette:
                raise ValueError(f"no colour for board symbol {ch!r}")
            bg, fg, shape = palette[ch]
            x, y = j * cell, i * cell
            draw.rectangle([x, y, x + cell - 1, y + cell - 1], fill=bg, outline=GRID_LINE)
            box = [x + inset, y + inset, x + cell - 1 - inset, y + cell - 1 - inset]
            if shape == "circle":
                draw.ellipse(box, fill=fg)
            elif shape == "square":
                draw.rectangle(box, fill=fg)
    return image


def decode_board(image: Any, height: int, width: int, palette: dict[str, tuple], cell: int = 32) -> list[str]:
    """Rows read back from a drawing: each cell's symbol is the palette entry nearest to its
    (background near a corner, colour at the centre) pixels."""
    pixels = image.convert("RGB").load()

    def dist(a: tuple, b: tuple) -> int:
        return sum((p - q) ** 2 for p, q in zip(a, b))

    rows = []
    for i in range(height):
        line = ""
        for j in range(width):
            x, y = j * cell, i * cell
            bg = pixels[x + cell // 8 + 1, y + cell // 8 + 1]
            mid = pixels[x + cell // 2, y + cell // 2]
            line += min(palette, key=lambda ch: dist(bg, palette[ch][0]) + dist(mid, palette[ch][1] or palette[ch][0]))
        rows.append(line)
    return rows


class VisionGridMixin:
    """Put before a grid env class: its user message gets the board's image (module docstring)."""

    palette: dict[str, tuple] = {}
    legend = ""

    def __init__(self, *args: Any, image_cell: int = 32, **options: Any) -> None:
        super().__init__(*args, **options)
        if int(image_cell) < 8:
            raise ValueError(f"image_cell={image_cell}: needs >= 8 pixels per cell")
        self.image_cell = int(image_cell)

    def board_image(self) -> Any:
        return draw_board(self._rows(self.state), self.palette, self.image_cell)

    def state_text(self) -> str:
        return "shown in the image above. " + self.legend

    def user_content(self, text: str) -> list[dict[str, Any]]:
        return [{"type": "image", "image": self.board_image()}, {"type": "text", "text": text}]


def register_vision(name: str, env_class: type, palette: dict[str, tuple]) -> type:
    """Register `name`_vision: `env_class` (the registered tool + plan env) seen as an image."""
    attrs = {"palette": palette, "legend": LEGENDS[name], "__module__": env_class.__module__}
    return register_env(f"{name}_vision")(type(f"{env_class.__name__}Vision", (VisionGridMixin, env_class), attrs))
