"""How link capacities become exact numbers: a decimal grid that keeps every exact integer small.

The exact algorithms (cut bounds, ForestColl) run integer max-flows on OR-Tools' int64
push-relabel. A measured capacity such as ``53.74569764496049`` has 14 decimals; with a few of
them the common denominator alone passes 2^63. So each topology gets one decimal grid:

* every capacity ``c`` is read as the decimal its shortest ``repr`` shows (``0.1`` is 1/10);
* the grid is ``10^-d`` Gbit/s with ``d`` the largest number of decimals (at most the decimals of
  the input, so exactly representable inputs are kept exactly) for which the integer sum
  ``N² · Σ_e c_e·10^d`` stays within :data:`INT_BUDGET` = 2^56 (N = GPU count): the largest
  product any exact algorithm forms is below ``8 · N² · Σ_e c_e·10^d`` (max-flow values, tree
  packing's auxiliary capacities), below the 2^61 that :class:`synth.maxflow.FlowNetwork` admits;
* a positive capacity below :data:`RELATIVE_FLOOR` (10^-9) times the largest capacity is first
  raised to that floor: LP solvers (AllToAll) cannot tell such coefficients from 0, and a link a
  billion times slower than the fastest is as good as down, but it stays usable;
* each positive capacity is rounded half-to-even to the grid and never below one grid step, so a
  live link never rounds to 0; a zero capacity stays 0.

The guarantee is then *exact for the capacities as rounded*: bounds, ForestColl's optimum and every
schedule's rate are computed on :meth:`Topology.exact_capacity`; a rounded capacity differs from
the float by at most half a grid step (relative error ``≤ 10^-d / (2c)``), except that a capacity
below the floor or below half a step is raised to it.

Examples
--------
>>> from synth.topologies import named_topology
>>> t = named_topology("ring:3")
>>> capacity_grid(t).decimals, t.exact_capacity("gpu0", "gpu1")
(0, Fraction(400, 1))
>>> m = t.scaled("gpu0", "gpu1", 0.3333333333333333)
>>> g = capacity_grid(m)
>>> g.decimals, g.caps[("gpu0", "gpu1")]
(12, Fraction(133333333333333, 1000000000000))
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import TYPE_CHECKING

from synth._types import NodeId

if TYPE_CHECKING:
    from synth.topologies.model import Topology

__all__ = ["INT_BUDGET", "RELATIVE_FLOOR", "CapacityGrid", "capacity_grid", "decimal_gbps", "round_to_grid"]

INT_BUDGET = 2**56
#: A positive capacity below this fraction of the largest one is raised to it (LP solvers cannot
#: tell 10^-9 relative coefficients from 0; such a link is nearly down, but stays usable).
RELATIVE_FLOOR = Fraction(1, 10**9)


@dataclass(frozen=True)
class CapacityGrid:
    """The exact capacities of one topology: ``caps[(src, dst)]`` in Gbit/s on a ``10^-decimals`` grid."""

    decimals: int
    caps: Mapping[tuple[NodeId, NodeId], Fraction]
    rounded: bool  # True when some capacity differs from its decimal reading

    @property
    def step_gbps(self) -> Fraction:
        """One grid step in Gbit/s."""
        return Fraction(1, 10**self.decimals) if self.decimals >= 0 else Fraction(10 ** (-self.decimals))


def decimal_gbps(gbps: float) -> Fraction:
    """The exact rational the shortest decimal form of ``gbps`` denotes.

    >>> decimal_gbps(0.1), decimal_gbps(2880.0)
    (Fraction(1, 10), Fraction(2880, 1))
    """
    return Fraction(repr(float(gbps)))


def _decimals(value: Fraction) -> int:
    """Decimal places of a decimal fraction (its denominator divides ``10^d``)."""
    den, d = value.denominator, 0
    while den % 10 == 0:
        den //= 10
        d += 1
    while den % 2 == 0 or den % 5 == 0:  # 1/2, 1/8, 1/25 …: one more place each factor
        den //= 2 if den % 2 == 0 else 5
        d += 1
    return d


def round_to_grid(value: Fraction, decimals: int) -> Fraction:
    """``value`` rounded half-to-even to a multiple of ``10^-decimals``, never a positive value to 0.

    >>> round_to_grid(Fraction(1, 3), 2), round_to_grid(Fraction(1, 1000), 2)
    (Fraction(33, 100), Fraction(1, 100))
    """
    step = Fraction(1, 10**decimals) if decimals >= 0 else Fraction(10 ** (-decimals))
    units = round(value / step)
    if value > 0 and units == 0:
        units = 1
    return units * step


def _fits(decimal: list[Fraction], n_gpus: int, decimals: int) -> bool:
    step = Fraction(1, 10**decimals) if decimals >= 0 else Fraction(10 ** (-decimals))
    total = sum((max(1, round(c / step)) for c in decimal if c > 0), 0)
    return n_gpus * n_gpus * total <= INT_BUDGET


def capacity_grid(topo: Topology) -> CapacityGrid:
    """The grid and exact capacities of ``topo`` (see the module docstring); cached on the topology."""
    reading = [decimal_gbps(lk.gbps) for lk in topo.links]
    floor = max(reading, default=Fraction(0)) * RELATIVE_FLOOR
    decimal = [max(c, floor) if c > 0 else c for c in reading]
    n = max(1, topo.nranks)
    want = max((_decimals(c) for c in decimal), default=0)
    live = [c for c in decimal if c > 0]
    if not live or _fits(live, n, want):
        d = want
    else:
        # Σ c·10^d ≈ 10^d · Σ c: start from the estimate and step down until it fits.
        total = float(sum(live))
        d = min(want, math.floor(math.log10(INT_BUDGET / (n * n)) - math.log10(total)))
        while not _fits(live, n, d):
            d -= 1
    caps = {lk.key: (c if d >= want else round_to_grid(c, d)) for lk, c in zip(topo.links, decimal)}
    rounded = any(caps[lk.key] != c for lk, c in zip(topo.links, reading))
    return CapacityGrid(d, MappingProxyType(caps), rounded)
