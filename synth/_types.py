"""Type aliases shared across the synthesis core (the collective is :class:`synth.collective.Collective`)."""

from __future__ import annotations

from synth.collective import COLLECTIVES, Collective

__all__ = ["Collective", "NodeId", "Rank", "COLLECTIVES"]

NodeId = str
Rank = int
