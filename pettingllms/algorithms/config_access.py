"""Read config values from a DictConfig, a dataclass, a plain dict or any object."""
from __future__ import annotations

from typing import Any, Mapping

_MISSING = object()


def cfg_get(node: Any, path: str, default: Any) -> Any:
    """`node.a.b` for path "a.b"; `default` where a step is missing.

    An explicit None is returned as None (e.g. `dual_clip_c: null` disables dual clip).
    """
    for name in path.split("."):
        if node is None or node is _MISSING:
            return default
        node = node.get(name, _MISSING) if isinstance(node, Mapping) else getattr(node, name, _MISSING)
    return default if node is _MISSING else node
