"""Deterministic data order: a seeded shuffle per epoch and one saved position.

The order depends only on (seed, epoch), so a resumed run that restores
`consumed` draws exactly the problems the uninterrupted run would have drawn.
"""
from __future__ import annotations

import numpy as np

from pettingllms.utils.seeding import derive_seed


class DataOrder:
    def __init__(self, num_items: int, seed: int, consumed: int = 0) -> None:
        if num_items <= 0:
            raise ValueError("no training problems: the train split is empty")
        self.num_items = num_items
        self.seed = seed
        self.consumed = consumed
        self._epoch = -1
        self._perm: np.ndarray | None = None

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._epoch:
            rng = np.random.default_rng(derive_seed(self.seed, "data", epoch))
            self._perm = rng.permutation(self.num_items)
            self._epoch = epoch
        assert self._perm is not None
        return self._perm

    def next_indices(self, n: int) -> list[int]:
        out = []
        for _ in range(n):
            epoch, pos = divmod(self.consumed, self.num_items)
            out.append(int(self._permutation(epoch)[pos]))
            self.consumed += 1
        return out

    @property
    def epoch(self) -> int:
        return self.consumed // self.num_items

    def state_dict(self) -> dict[str, int]:
        return {"consumed": self.consumed, "num_items": self.num_items, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state.get("num_items") not in (None, self.num_items):
            raise ValueError(f"checkpoint was made with {state['num_items']} training problems, "
                             f"the dataset now has {self.num_items}")
        self.consumed = int(state["consumed"])
