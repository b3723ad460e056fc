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

Before those, **dominant links are clamped** (rule 0 of docs/exactness.md): a set H of live links,
each above ``N × R`` (R: the sum of the other live capacities), such that some GPU ``g`` has no H
link out and some GPU none in, reads as ``N × R`` wherever H would otherwise move another link's
grid value. Proof sketch (the full one is in docs/exactness.md): the cut ``{g}`` has ratio
``≤ R``, while a cut holding an H link has ratio ``≥ N·R/(N−1) > R``, so no minimum cut holds one;
in the AllToAll LP ``z* ≤ R/(N−1)`` and an H link carries at most ``N(N−1)·z* ≤ N·R`` on simple
paths. Capacities only go down, so schedules stay valid on the real fabric. Links raised by the
floor or to one step are ``lifted``; :func:`certify_rate` refuses a figure they could move by more
than :data:`LIFT_TOLERANCE`, and the largest effective capacity must lie within
:data:`MIN_GBPS` … :data:`MAX_GBPS` (denormals are refused).

The guarantee is then *exact for the capacities as rounded*: bounds, ForestColl's optimum and every
schedule's rate are computed on :meth:`Topology.exact_capacity`; a rounded capacity differs from
the float by at most half a grid step (relative error ``≤ 10^-d / (2c)``), except that a capacity
below the floor or below half a step is raised to it (lifted, certified) and a dominant link is
clamped (exact by rule 0).

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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Protocol

from synth._types import NodeId
from synth.errors import TopologyError
from synth.topologies.parts import Link, Node

__all__ = ["INT_BUDGET", "LIFT_TOLERANCE", "MAX_GBPS", "MIN_GBPS", "RELATIVE_FLOOR", "CapacityGrid", "capacity_grid",
           "certify_rate", "certify_synthesis", "decimal_gbps", "refuse_adjusted", "round_to_grid"]

INT_BUDGET = 2**56
#: A positive capacity below this fraction of the largest one is raised to it (LP solvers cannot
#: tell 10^-9 relative coefficients from 0; such a link is nearly down, but stays usable).
RELATIVE_FLOOR = Fraction(1, 10**9)
#: The largest effective live capacity (Gbit/s) must lie in this range: below it float figures
#: underflow (denormals), above it LP solvers read capacities as infinite.
MIN_GBPS = Fraction(1, 10**100)
MAX_GBPS = Fraction(10**100)
#: A bound may move by at most this fraction because of lifted links, else it is refused.
LIFT_TOLERANCE = Fraction(1, 10**6)


@dataclass(frozen=True)
class CapacityGrid:
    """The exact capacities of one topology: ``caps[(src, dst)]`` in Gbit/s on a ``10^-decimals`` grid.

    ``clamped`` maps each dominant link (rule 0 of docs/exactness.md) to its decimal reading, now
    lowered to ``caps``; ``lifted`` maps each link raised beyond rounding (by the floor or to one grid
    step) to its decimal reading. Both are empty on ordinary fabrics.
    """

    decimals: int
    caps: Mapping[tuple[NodeId, NodeId], Fraction]
    rounded: bool  # True when some capacity differs from its decimal reading
    clamped: Mapping[tuple[NodeId, NodeId], Fraction] = field(default_factory=lambda: MappingProxyType({}))
    lifted: Mapping[tuple[NodeId, NodeId], Fraction] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def step_gbps(self) -> Fraction:
        """One grid step in Gbit/s."""
        return Fraction(1, 10**self.decimals) if self.decimals >= 0 else Fraction(10 ** (-self.decimals))


class Fabric(Protocol):
    """What this module reads of a topology (:class:`~synth.topologies.model.Topology` is one): its
    parts, not the object, so the topology can cache :func:`capacity_grid` without an import cycle."""

    @property
    def name(self) -> str: ...
    @property
    def links(self) -> tuple[Link, ...]: ...
    @property
    def gpus(self) -> tuple[Node, ...]: ...
    @property
    def nranks(self) -> int: ...
    @property
    def capacity_grid(self) -> CapacityGrid: ...


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


def _dominant(topo: Fabric, reading: list[Fraction]) -> tuple[frozenset[int], Fraction]:
    """Rule 0: the largest set H of links each above ``N × R`` (R: the other live links' sum) such that
    some GPU has no H link out and some GPU no H link in; returns (H's link indices, ``N × R``)."""
    live = sorted((i for i, c in enumerate(reading) if c > 0), key=lambda i: (-reading[i], i))
    n = max(1, topo.nranks)
    rest = sum((reading[i] for i in live), Fraction(0))
    gpus = {g.id for g in topo.gpus}
    best: tuple[frozenset[int], Fraction] = (frozenset(), Fraction(0))
    for k, i in enumerate(live[:-1], start=1):
        rest -= reading[i]
        if reading[i] <= n * rest:  # ties never split: the k-th is the smallest of H
            continue
        heavy = live[:k]
        if gpus - {topo.links[j].src for j in heavy} and gpus - {topo.links[j].dst for j in heavy}:
            best = (frozenset(heavy), n * rest)
    return best


def _check_range(topo: Fabric, decimal: list[Fraction]) -> None:
    """:class:`TopologyError` unless the largest effective capacity lies in ``MIN_GBPS … MAX_GBPS``."""
    if not any(c > 0 for c in decimal):
        return
    top = max(range(len(decimal)), key=lambda i: decimal[i])
    value, lk = decimal[top], topo.links[top]
    if MIN_GBPS <= value <= MAX_GBPS:
        return
    side = "below" if value < MIN_GBPS else "above"
    raise TopologyError(
        f"topology {topo.name!r}: the largest live capacity, link {lk.src}->{lk.dst} at {lk.gbps:g} Gbit/s"
        f"{' (after clamping dominant links)' if float(value) != lk.gbps else ''}, is {side} the "
        f"{float(MIN_GBPS):g} … {float(MAX_GBPS):g} Gbit/s the solvers resolve (docs/exactness.md)")


def capacity_grid(topo: Fabric) -> CapacityGrid:
    """The grid and exact capacities of ``topo`` (see the module docstring); cached on the topology.

    Raises :class:`TopologyError` when the largest capacity, after rule 0, is outside
    ``MIN_GBPS … MAX_GBPS`` (denormal or astronomically large fabrics).

    >>> from synth.topologies import named_topology
    >>> g = named_topology("ring:4").with_link("gpu0", "gpu1", gbps=1e15).capacity_grid
    >>> dict(g.clamped), g.caps[("gpu0", "gpu1")]
    ({('gpu0', 'gpu1'): Fraction(1000000000000000, 1)}, Fraction(11200, 1))
    """
    reading = [decimal_gbps(lk.gbps) for lk in topo.links]
    heavy, clamp = _dominant(topo, reading)
    d, decimal = _floor_and_grid(reading, max(1, topo.nranks))
    if heavy:
        # Clamp only where it matters: when the dominant links move another link's grid value
        # (through the floor or a coarser grid), or lie outside the accepted range themselves.
        cd, cdecimal = _floor_and_grid([clamp if i in heavy else c for i, c in enumerate(reading)], max(1, topo.nranks))
        if max(decimal) > MAX_GBPS or any(decimal[i] != cdecimal[i] for i in range(len(reading)) if i not in heavy):
            d, decimal = cd, cdecimal
        else:
            heavy = frozenset()
    _check_range(topo, decimal)
    caps = {lk.key: c for lk, c in zip(topo.links, decimal)}
    rounded = any(caps[lk.key] != c for lk, c in zip(topo.links, reading))
    half = (Fraction(1, 10**d) if d >= 0 else Fraction(10 ** (-d))) / 2
    lifted = {lk.key: c for i, (lk, c) in enumerate(zip(topo.links, reading))
              if i not in heavy and c > 0 and caps[lk.key] - c > half}
    return CapacityGrid(d, MappingProxyType(caps), rounded,
                        MappingProxyType({topo.links[i].key: reading[i] for i in sorted(heavy)}),
                        MappingProxyType(lifted))


def _floor_and_grid(reading: list[Fraction], n: int) -> tuple[int, list[Fraction]]:
    """Rules 2–4 on decimal capacities: (the grid's decimals ``d``, each capacity on the grid)."""
    floor = max(reading, default=Fraction(0)) * RELATIVE_FLOOR
    decimal = [max(c, floor) if c > 0 else c for c in reading]
    want = max((_decimals(c) for c in decimal), default=0)
    live = [c for c in decimal if c > 0]
    if not live or _fits(live, n, want):
        return want, decimal
    # Σ c·10^d ≈ 10^d · Σ c: start from the estimate and step down until it fits.
    total = float(sum(live))
    d = min(want, math.floor(math.log10(INT_BUDGET / (n * n)) - math.log10(total)))
    while not _fits(live, n, d):
        d -= 1
    return d, [round_to_grid(c, d) for c in decimal]


def _shown(keys: list[tuple[NodeId, NodeId]], limit: int = 3) -> str:
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return ", ".join(f"{a}->{b}" for a, b in keys[:limit]) + more


def certify_rate(topo: Fabric, rate_gbps: Fraction | float, bottleneck: Iterable[tuple[NodeId, NodeId]] = (),
                 what: str = "bound") -> None:
    """Raise :class:`TopologyError` unless a rate computed on the effective capacities is the true one.

    ``rate_gbps`` is the per-source (AllGather family) or per-pair (AllToAll) rate in Gbit/s on the
    effective capacities, ``bottleneck`` its cut or saturated links. A clamped link in the bottleneck
    is refused (rule 0 proves it never is); lifted links (rules 2 and 4) move any such rate by at
    most their summed effective capacity, refused when that passes ``LIFT_TOLERANCE`` × the rate.

    >>> from synth.topologies import named_topology
    >>> t = named_topology("ring:4").with_link("gpu0", "gpu1", gbps=1e15)
    >>> certify_rate(t, Fraction(800, 3), [("gpu1", "gpu2")])
    >>> certify_rate(t, Fraction(800, 3), [("gpu0", "gpu1")])
    Traceback (most recent call last):
    ...
    synth.errors.TopologyError: topology 'ring-4': the bound's bottleneck holds clamped link(s) gpu0->gpu1 (1e+15 Gbit/s, 8.9e+10 × the clamp value); refusing rather than reporting a rate of the clamped fabric
    """
    grid = topo.capacity_grid
    hit = sorted(set(bottleneck) & set(grid.clamped))
    if hit:
        ratio = float(grid.clamped[hit[0]] / grid.caps[hit[0]])
        raise TopologyError(
            f"topology {topo.name!r}: the {what}'s bottleneck holds clamped link(s) {_shown(hit)} "
            f"({float(grid.clamped[hit[0]]):g} Gbit/s, {ratio:.2g} × the clamp value); refusing rather than "
            "reporting a rate of the clamped fabric")
    if not grid.lifted or not math.isfinite(rate_gbps):
        return
    lift = sum((grid.caps[k] for k in grid.lifted), Fraction(0))
    if lift > LIFT_TOLERANCE * Fraction(rate_gbps):
        keys = sorted(grid.lifted, key=lambda k: (grid.lifted[k], k))
        top = max(grid.caps.values())
        raise TopologyError(
            f"topology {topo.name!r}: link(s) {_shown(keys)} ({float(grid.lifted[keys[0]]):g} Gbit/s, "
            f"{float(grid.lifted[keys[0]] / top):.2g} of the largest capacity) were raised to the solvers' "
            f"resolution ({float(grid.caps[keys[0]]):g} Gbit/s) and can move the {what} "
            f"({float(rate_gbps):g} Gbit/s per source or pair) by more than {float(LIFT_TOLERANCE):g} of it: "
            "refusing an uncertified figure; bring the capacities within 10^9 of each other (docs/exactness.md)")


def certify_synthesis(topo: Fabric, optimal_algbw_GBps: float, proven: bool,  # noqa: N803
                      loaded: Iterable[tuple[NodeId, NodeId]] = ()) -> None:
    """:func:`certify_rate` for a synthesis result: its optimum (when ``proven``; a time-limited upper
    bound stays one) and its schedule, refused when it loads a lifted link (its rate would be read
    on the raised capacity).

    >>> from synth.topologies import named_topology
    >>> certify_synthesis(named_topology("ring:4"), 133.3, True, [("gpu0", "gpu1")])
    """
    if proven and math.isfinite(optimal_algbw_GBps):
        certify_rate(topo, 8 * optimal_algbw_GBps / max(1, topo.nranks), (), "synthesis optimum")
    lifted = topo.capacity_grid.lifted
    used = sorted(set(loaded) & set(lifted)) if lifted else []
    if used:
        raise TopologyError(
            f"topology {topo.name!r}: the schedule loads link(s) {_shown(used)} ({float(lifted[used[0]]):g} Gbit/s), "
            "raised to the solvers' resolution, so its rate would be overstated (docs/exactness.md): bring the "
            "capacities within 10^9 of each other")


def refuse_adjusted(topo: Fabric, what: str, *, lifted: bool = True) -> None:
    """Raise :class:`TopologyError` when ``topo`` has clamped (or, with ``lifted``, lifted) links: for
    solvers the rule-0 argument does not cover (AllToAllv, routed tree collectives)."""
    grid = topo.capacity_grid
    keys = sorted(grid.clamped) + (sorted(grid.lifted) if lifted else [])
    if keys:
        key = keys[0]
        reading = grid.clamped.get(key, grid.lifted.get(key, Fraction(0)))
        raise TopologyError(
            f"topology {topo.name!r}: link(s) {_shown(keys)} ({float(reading):g} Gbit/s, "
            f"{float(reading / max(grid.caps.values())):.2g} × the largest effective capacity) are outside the "
            f"range {what} is proven exact on (docs/exactness.md); bring them nearer the others")
