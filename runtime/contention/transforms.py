"""Safe pattern transforms (REACT): global permutation, chunk-local permutation, position swaps.

A schedule's routes move each source's data along a tree (or a chain, for rings). Relabelling ranks
keeps the collective's meaning when it is applied consistently:

* **Global permutation** ① — one permutation π of the ranks applied to every route: source ``r``'s
  role goes to ``π(r)``; the whole pattern is the same up to the rank → device mapping.
* **Chunk-local permutation** ② — π applied to the routes of one *chunk graph* only: a set of routes
  that, on its own, is a complete collective on one chunk per source (:func:`chunk_graphs`: one
  route per (kind, root), equal chunk counts, e.g. one ring channel or one of two trees).
* **Position-equivalent swap** ③ — two non-root ranks exchanged inside one source's tree(s) of one
  chunk graph (an AllReduce's in-tree and out-tree of that root together): the trees still span
  every GPU from (into) the same root, so that source's block still is reduced from and reaches
  everyone.

Every hop's physical path is recomputed on the topology (fewest switch hops). :func:`apply` never
trusts the argument above: it lowers the transformed schedule to an MSCCL program and runs the
symbolic checker (:func:`msccl_xml.check`); a program that does not compute the collective raises
:class:`TransformError`.

:func:`choose_transform` picks, for congested ranks, the candidate (③ before ② before ① at equal
gain, REACT's preference for the finest change) whose simulated time on the *measured* topology is
lowest, and returns it only if it beats the unchanged schedule by ``min_gain``.

Examples
--------
>>> from synth.baselines import nccl_ring
>>> from synth.topologies import named_topology
>>> topo = named_topology("nvswitch:4")
>>> ring = nccl_ring("allgather", topo, nchannels=2)
>>> chunk_graphs(ring)
((0, 1, 2, 3), (4, 5, 6, 7))
>>> t = apply(ring, topo, Transform(TransformKind.GLOBAL, swap=(0, 3)))
>>> t.routes[0].root, t.meta["transform"]
(3, 'global swap 0<->3')
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from msccl_xml import check, lower
from synth import LoopcollError
from synth.collective import TREE_COLLECTIVES, Collective
from synth.paths import switch_path
from synth.schedule import Hop, Route, RouteKind, Schedule
from synth.simulation import simulate

if TYPE_CHECKING:
    from synth.topologies.model import Topology

__all__ = ["Transform", "TransformChoice", "TransformError", "TransformKind", "apply", "candidates", "choose_transform",
           "chunk_graphs", "double_tree", "verify"]

_PRIORITY = {"position": 0, "chunk": 1, "global": 2}


class TransformError(LoopcollError):
    """A transform is malformed, cannot be routed, or its program fails the symbolic checker."""


class TransformKind(str, Enum):
    """REACT's three transforms."""

    GLOBAL = "global"
    CHUNK = "chunk"
    POSITION = "position"


@dataclass(frozen=True, slots=True)
class Transform:
    """Exchange ranks ``swap = (a, b)``: everywhere (GLOBAL), in chunk graph ``group`` (CHUNK), or in
    route ``route`` only (POSITION; neither rank may be that route's root)."""

    kind: TransformKind
    swap: tuple[int, int]
    group: int | None = None
    route: int | None = None

    def describe(self) -> str:
        a, b = self.swap
        where = {TransformKind.GLOBAL: "", TransformKind.CHUNK: f" in chunk graph {self.group}",
                 TransformKind.POSITION: f" in route {self.route}"}[self.kind]
        return f"{self.kind.value} swap {a}<->{b}{where}"


@dataclass(frozen=True, slots=True)
class TransformChoice:
    """:func:`choose_transform`'s answer: ``status`` ``"apply"`` or ``"keep"``, the transform and the
    transformed schedule (None when keeping), simulated times before/after, candidates tried."""

    status: str
    message: str
    transform: Transform | None
    schedule: Schedule | None
    time_before_s: float
    time_after_s: float
    tried: int

    @property
    def gain(self) -> float:
        """Relative speed-up ``before/after − 1`` (0 when keeping)."""
        return self.time_before_s / self.time_after_s - 1.0 if self.transform is not None else 0.0


def chunk_graphs(schedule: Schedule) -> tuple[tuple[int, ...], ...]:
    """Route indices grouped into independent chunk graphs (the k-th route of each (kind, root)).

    A grouping is returned only when every group holds exactly one route per (kind, root) for all
    ranks and one chunk count; otherwise the whole schedule is one chunk graph.
    """
    ordinal: dict[tuple[str, int], int] = {}
    groups: dict[int, list[int]] = {}
    for i, r in enumerate(schedule.routes):
        if r.kind is RouteKind.PATH:
            return (tuple(range(len(schedule.routes))),)
        k = (r.kind.value, r.root)
        g = ordinal.get(k, 0)
        ordinal[k] = g + 1
        groups.setdefault(g, []).append(i)
    kinds = {r.kind.value for r in schedule.routes}
    for members in groups.values():
        keys = sorted((schedule.routes[i].kind.value, schedule.routes[i].root) for i in members)
        want = sorted((k, r) for k in kinds for r in range(schedule.nranks))
        if keys != want or len({schedule.routes[i].chunks for i in members}) != 1:
            return (tuple(range(len(schedule.routes))),)
    return tuple(tuple(groups[g]) for g in sorted(groups))


def _relabel_route(route: Route, perm: dict[int, int], topo: Topology, cache: dict[tuple[int, int], Hop]) -> Route:
    def f(x: int) -> int:
        return perm.get(x, x)

    hops = []
    for h in route.hops:
        a, b = f(h.src), f(h.dst)
        hop = cache.get((a, b))
        if hop is None:
            path = switch_path(topo, topo.gpu_id(a), topo.gpu_id(b))
            if path is None:
                raise TransformError(f"transform: rank {a} cannot reach rank {b} through switches on {topo.name!r}")
            hop = cache[(a, b)] = Hop(a, b, path)
        hops.append(hop)
    return Route(route.kind, f(route.root), route.chunks, tuple(hops), None if route.dest is None else f(route.dest))


def _check_transform(schedule: Schedule, t: Transform) -> None:
    if not isinstance(t, Transform):
        raise TransformError(f"transform must be a Transform, got {type(t).__name__}")
    a, b = t.swap
    n = schedule.nranks
    if not (isinstance(a, int) and isinstance(b, int) and 0 <= a < n and 0 <= b < n and a != b):
        raise TransformError(f"transform swap {t.swap!r}: need two distinct ranks in 0..{n - 1}")
    if t.kind is TransformKind.CHUNK:
        ngroups = len(chunk_graphs(schedule))
        if not isinstance(t.group, int) or not 0 <= t.group < ngroups:
            raise TransformError(f"transform group {t.group!r}: the schedule has {ngroups} chunk graphs")
    if t.kind is TransformKind.POSITION:
        if not isinstance(t.route, int) or not 0 <= t.route < len(schedule.routes):
            raise TransformError(f"transform route {t.route!r}: the schedule has {len(schedule.routes)} routes")
        r = schedule.routes[t.route]
        if r.root in t.swap or r.dest in t.swap:
            raise TransformError(f"position swap {t.swap!r} moves route {t.route}'s endpoint: not position-equivalent")


def _source_routes(schedule: Schedule, route: int) -> tuple[int, ...]:
    """Route ``route`` and the routes of the same root in its chunk graph (AllReduce: in- and out-tree)."""
    root = schedule.routes[route].root
    for g in chunk_graphs(schedule):
        if route in g:
            return tuple(i for i in g if schedule.routes[i].root == root and schedule.routes[i].kind is not RouteKind.PATH) \
                if schedule.routes[route].kind is not RouteKind.PATH else (route,)
    return (route,)


def verify(schedule: Schedule) -> tuple[bool, str]:
    """Lower ``schedule`` to MSCCL and run the symbolic checker: ``(valid, first error or "")``."""
    res = check(lower(schedule, verify=False))
    return res.valid, "" if res.valid else res.errors[0]


def apply(schedule: Schedule, topo: Topology, transform: Transform, *, proof: bool = True) -> Schedule:
    """The transformed schedule (paths recomputed on ``topo``), proved by the symbolic checker.

    ``meta["transform"]`` records what was done. Raises :class:`TransformError` when the transform is
    malformed or (``proof``) the lowered program fails :func:`msccl_xml.check`.
    """
    _check_transform(schedule, transform)
    a, b = transform.swap
    perm = {a: b, b: a}
    if transform.kind is TransformKind.GLOBAL:
        chosen = set(range(len(schedule.routes)))
    elif transform.kind is TransformKind.CHUNK:
        chosen = set(chunk_graphs(schedule)[transform.group])  # type: ignore[index]
    else:
        chosen = set(_source_routes(schedule, transform.route))  # type: ignore[arg-type]
    cache: dict[tuple[int, int], Hop] = {}
    routes = tuple(_relabel_route(r, perm, topo, cache) if i in chosen else r for i, r in enumerate(schedule.routes))
    meta = {**dict(schedule.meta), "transform": transform.describe()}
    out = Schedule(schedule.collective, schedule.nranks, schedule.nchunks, routes, (), schedule.topology_fingerprint, meta)
    out.validate(topo)
    if proof:
        ok, err = verify(out)
        if not ok:
            raise TransformError(f"transform {transform.describe()} fails the symbolic checker: {err}")
    return out


def candidates(schedule: Schedule, congested: Iterable[int], *, limit: int = 200) -> list[Transform]:
    """Transforms that move each congested rank: position swaps in the routes where it forwards data
    (it has an outgoing hop and is not the root), chunk-local and global swaps with every uncongested
    rank; REACT's order (③, ②, ①), at most ``limit``."""
    bad = sorted(set(congested))
    good = [r for r in range(schedule.nranks) if r not in set(bad)]
    groups = chunk_graphs(schedule)
    out: list[Transform] = []
    for x in bad:
        for i, r in enumerate(schedule.routes):
            if r.root == x or r.dest == x or not any(h.src == x for h in r.hops) or _source_routes(schedule, i)[0] != i:
                continue
            out += [Transform(TransformKind.POSITION, (x, y), route=i) for y in good if y not in (r.root, r.dest)]
        if len(groups) > 1:
            out += [Transform(TransformKind.CHUNK, (x, y), group=g) for g in range(len(groups)) for y in good]
        out += [Transform(TransformKind.GLOBAL, (x, y)) for y in good]
    out.sort(key=lambda t: _PRIORITY[t.kind.value])
    return out[:limit]


def _time_s(schedule: Schedule, topo: Topology, nbytes: float) -> float:
    return simulate(schedule, topo, nbytes, check=False).time_s


def _best_step(schedule: Schedule, topo: Topology, measured: Topology, nbytes: float, congested: Iterable[int],
               simulate_top: int, limit: int) -> tuple[int, tuple[float, Transform, Schedule] | None]:
    cands = candidates(schedule, congested, limit=limit)
    scored: list[tuple[float, int, int, Transform, Schedule]] = []
    for k, t in enumerate(cands):
        try:
            s = apply(schedule, topo, t, proof=False)
        except TransformError:  # unroutable on this fabric (no switch path between the new neighbours)
            continue
        scored.append((s.time_s(measured, nbytes), _PRIORITY[t.kind.value], k, t, s))
    scored.sort(key=lambda e: (round(e[0], 15), e[1], e[2]))
    best: tuple[float, Transform, Schedule] | None = None
    for _, _, _, t, s in scored[:simulate_top]:
        ts = _time_s(s, measured, nbytes)
        if best is None or ts < best[0] * (1 - 1e-9):
            best = (ts, t, s)
    return len(cands), best


def choose_transform(schedule: Schedule, topo: Topology, measured: Topology, nbytes: float, congested: Iterable[int],
                     *, min_gain: float = 0.05, steps: int = 1, step_gain: float = 0.005, simulate_top: int = 4,
                     limit: int = 200) -> TransformChoice:
    """Best safe transform(s) for ``congested`` ranks on the ``measured`` (contended) topology.

    Each step screens the candidates by the bandwidth term (:meth:`Schedule.time_s`) on ``measured``,
    simulates the ``simulate_top`` best (the critical-path estimate) and keeps the fastest if it
    gains at least ``step_gain`` over the current schedule; up to ``steps`` greedy steps (REACT treats
    congested nodes one after another). The result is applied only if all steps together gain at least
    ``min_gain`` (REACT's ε), and is proved by the symbolic checker.
    ``transform`` is the first step's; ``meta["transform"]`` lists all steps.
    """
    if not (isinstance(min_gain, (int, float)) and math.isfinite(min_gain) and min_gain >= 0):
        raise TransformError(f"min_gain must be a number >= 0, got {min_gain!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise TransformError(f"steps must be an integer >= 1, got {steps!r}")
    bad = sorted(set(congested))
    base = cur_t = _time_s(schedule, measured, nbytes)
    cur, tried, done = schedule, 0, []
    first: Transform | None = None
    for _ in range(steps):
        n, best = _best_step(cur, topo, measured, nbytes, bad, simulate_top, limit)
        tried += n
        if best is None or cur_t / best[0] - 1.0 < (min_gain if steps == 1 else step_gain):
            break
        cur_t, cur = best[0], best[2]
        first = first or best[1]
        done.append(best[1].describe())
    if not done or base / cur_t - 1.0 < min_gain:
        return TransformChoice("keep", f"keep: no transform gains {min_gain:.0%} ({tried} candidates)", None, None,
                               base, base, tried)
    ok, err = verify(cur)
    if not ok:  # never expected: relabelling is semantics-preserving; the checker is the proof
        raise TransformError(f"transforms {done} fail the symbolic checker: {err}")
    cur = Schedule(cur.collective, cur.nranks, cur.nchunks, cur.routes, (), cur.topology_fingerprint,
                   {**dict(cur.meta), "transform": "; ".join(done)})
    return TransformChoice("apply", f"apply {'; '.join(done)}: {base / cur_t - 1.0:.1%} faster", first, cur,
                           base, cur_t, tried)


def double_tree(collective: str, topo: Topology) -> Schedule:
    """Two binary trees per root (one chunk each): the second over the reversed rank order, so a
    rank that forwards in one tree tends to be a leaf in the other (NCCL's double-tree idea, per
    source block in loopcoll's route IR).

    >>> from synth.topologies import named_topology
    >>> s = double_tree("allreduce", named_topology("nvswitch:4"))
    >>> s.nchunks, len(s.routes), len(chunk_graphs(s))
    (2, 16, 2)
    """
    if collective not in TREE_COLLECTIVES:
        raise TransformError(f"double_tree supports allgather, reducescatter, allreduce, not {collective!r}")
    kind = Collective(collective)
    n = topo.nranks
    cache: dict[tuple[int, int], Hop] = {}

    def hop(a: int, b: int) -> Hop:
        return _relabel_route(Route(RouteKind.PATH, a, 1, (Hop(a, b, ()),), b), {}, topo, cache).hops[0]

    routes: list[Route] = []
    for base in (list(range(n)), list(reversed(range(n)))):
        for root in range(n):
            k = base.index(root)
            order = base[k:] + base[:k]
            down = tuple(hop(order[(i - 1) // 2], order[i]) for i in range(1, n))
            if kind.in_trees:
                routes.append(Route(RouteKind.IN_TREE, root, 1, tuple(hop(h.dst, h.src) for h in reversed(down))))
            if kind.out_trees:
                routes.append(Route(RouteKind.OUT_TREE, root, 1, down))
    meta: dict[str, Any] = {"synthesizer": "double-tree"}
    sched = Schedule(kind, n, 2, tuple(routes), meta=meta)
    sched.validate(topo)
    return sched
