"""Type aliases shared across the synthesis core."""

from __future__ import annotations

from typing import Literal

__all__ = ["Collective", "NodeId", "Rank", "COLLECTIVES"]

NodeId = str
Rank = int
Collective = Literal["allgather", "reducescatter", "allreduce", "alltoall"]
COLLECTIVES: tuple[Collective, ...] = ("allgather", "reducescatter", "allreduce", "alltoall")
