"""Scratch tensors of the executor, reused across collectives (the most recently used few kept)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

__all__ = ["Workspaces"]


class Workspaces:
    """Tensors by ``(tag, numel, dtype, device)``; the ``limit`` most recently used are kept.

    >>> import torch
    >>> ws = Workspaces(torch, limit=1)
    >>> a = ws.get("s", 4, torch.float32, "cpu")
    >>> ws.get("s", 4, torch.float32, "cpu") is a, len(ws.get("t", 2, torch.int64, "cpu")), len(ws)
    (True, 2, 1)
    """

    def __init__(self, torch: Any, *, limit: int = 32) -> None:
        self._torch = torch
        self._limit = limit
        self._tensors: OrderedDict[tuple[str, int, Any, str], Any] = OrderedDict()

    def get(self, tag: str, numel: int, dtype: Any, device: Any) -> Any:
        """The tensor of this key (uninitialized when new)."""
        key = (tag, numel, dtype, str(device))
        t = self._tensors.get(key)
        if t is None:
            t = self._torch.empty(numel, dtype=dtype, device=device)
            self._tensors[key] = t
            while len(self._tensors) > self._limit:
                self._tensors.popitem(last=False)
        else:
            self._tensors.move_to_end(key)
        return t

    def __len__(self) -> int:
        return len(self._tensors)

    def clear(self) -> None:
        """Release every tensor."""
        self._tensors.clear()
