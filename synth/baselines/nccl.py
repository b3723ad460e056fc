"""NCCL-like baseline schedules, expressed in the schedule IR so every comparison uses one model.

* :func:`nccl_ring` — multi-ring AllGather / ReduceScatter / AllReduce: one ring per channel,
  data split equally over the rings. Where the fabric has a NIC layout
  (:func:`synth.topologies.nic_layout`: hosts alike, each with NICs that pair up across hosts
  over the network) there is one ring per NIC, as NCCL opens one channel per NIC: ring c enters a
  host through one NIC and leaves it through another, and the inter-host hop stays on one (virtual)
  rail, so every NIC carries one ring each way. This covers rail-optimised fabrics (``hpn``,
  ``dgx-*``), one leaf switch for every NIC, leaf-spine fabrics and hosts with fewer NICs than GPUs.
* :func:`nccl_direct_alltoall` — each GPU sends each peer's block directly; a block whose
  destination the source cannot reach through switches first crosses the host to the local GPU of
  the NIC on the destination's rail and then leaves through that NIC (NCCL's PXN).

The layout is read from the graph, never from names or ``meta``. :func:`baseline_choice` says
which baseline a topology gets and why (``rail``, ``nic`` or ``generic``, with a sentence), every
baseline schedule records it in ``meta["baseline"]`` (e.g. ``rail-ring``) and
``meta["baseline_reason"]``, and :func:`describe_baseline` renders it for output.
* "Static" schedules need no code: a schedule synthesized for the healthy topology, evaluated on
  the degraded one (``schedule.algbw_GBps(degraded)``).

Examples
--------
>>> from synth.topologies import named_topology
>>> t = named_topology("hpn:1x2x8")
>>> ring = nccl_ring("allgather", t)
>>> ring.validate(t)
>>> round(ring.algbw_GBps(t), 3)
426.667
>>> a2a = nccl_direct_alltoall(t)
>>> a2a.validate(t)
>>> round(a2a.algbw_GBps(t), 3)
100.0
>>> ring.meta["baseline"], a2a.meta["baseline"]
('rail-ring', 'rail-direct-pxn')
>>> describe_baseline(ring)
'rail-ring: rail rings, 8 channels (one per NIC); 8 NICs per host, one rail network per NIC'
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from synth._bulk import bulk_allocation
from synth._types import Rank
from synth.collective import TREE_COLLECTIVES, Collective
from synth.errors import ScheduleError
from synth.routing import PairRoutes, route_table
from synth.schedule import Hop, Route, RouteKind, Schedule
from synth.topologies.communicator import communicator_meta
from synth.topologies.model import Topology
from synth.topologies.nics import NicLayout, nic_layout
from synth.topologies.structure import switch_roles

__all__ = ["BaselineChoice", "baseline_choice", "baseline_kind", "describe_baseline", "nccl_direct_alltoall",
           "nccl_ring", "ring_orders"]

_Hops = Mapping[Rank, Mapping[Rank, tuple[str, ...]]]


@dataclass(frozen=True)
class BaselineChoice:
    """Which NCCL-like baseline a topology gets: ``kind`` (``rail``, ``nic`` or ``generic``), the
    ``layout`` it is built on (``None`` for ``generic``) and ``reason``, a sentence saying what the
    layout is or why there is none.

    >>> from synth.topologies import named_topology
    >>> baseline_choice(named_topology("ring:4")).reason
    'no network switches: the GPUs are joined by direct links'
    """

    kind: str
    layout: NicLayout | None
    reason: str


def baseline_choice(topo: Topology) -> BaselineChoice:
    """The baseline :func:`nccl_ring` and :func:`nccl_direct_alltoall` use on ``topo``, and why."""
    layout = nic_layout(topo)
    if isinstance(layout, str):
        return BaselineChoice("generic", None, layout)
    return BaselineChoice(layout.kind, layout, layout.describe())


def baseline_kind(topo: Topology) -> str:
    """``"rail"``, ``"nic"`` (NIC rings on a shared network) or ``"generic"``.

    >>> from synth.topologies import named_topology
    >>> baseline_kind(named_topology("dgx-h100:2")), baseline_kind(named_topology("torus:2x2"))
    ('rail', 'generic')
    """
    return baseline_choice(topo).kind


def describe_baseline(schedule: Schedule) -> str:
    """``"<name>: <what>; <why>"`` for a baseline schedule, from its meta.

    >>> from synth.topologies import named_topology
    >>> describe_baseline(nccl_ring("allgather", named_topology("nvswitch:4")))
    'generic-ring: generic ring, 2 channels; one host: no network between hosts'
    """
    name = schedule.meta.get("baseline", schedule.meta.get("synthesizer", "?"))
    reason = schedule.meta.get("baseline_reason")
    return f"{name}: {reason}" if reason else str(name)


def _slots(layout: NicLayout, channel: int, shift: bool, relay: bool) -> list[tuple[int, int, int | None]]:
    """Ring ``channel`` as (host, entry position, exit position) per host.

    Host h is entered through the NIC on rail e_h and left through the NIC on rail x_h, with
    x_h = e_{h+1} (the inter-host hop stays on one rail) and x_h ≠ e_h where the rail count allows;
    ``shift`` (one network for all NICs): entered on rail c, left on rail c + 1 in every host.
    Where a host would be entered and left through one GPU, ``relay`` lets the ring leave it from
    its last GPU through that GPU (PXN; exit ``None``), else it raises :class:`ScheduleError`.
    """
    hosts, k, g = layout.nhosts, layout.nrails, len(layout.hosts[0])
    if g == 1:
        return [(h, 0, 0) for h in range(hosts)]
    if hosts == 1:
        entry = layout.nics[0][channel % k][0]
        return [(0, entry, (entry - 1) % g)]
    if shift:
        entries = [channel % k] * hosts
        exits = [(channel + 1) % k] * hosts
    else:
        steps = [1] * (hosts - 1)
        last = (-(hosts - 1)) % k
        if last == 0 and k > 2:  # make the rail offsets sum to 0 mod k with every offset nonzero
            steps[-1], last = 2, (-hosts) % k
        steps.append(last)
        entries, exits = [], []
        entry = channel % k
        for h in range(hosts):
            entries.append(entry)
            entry = (entry + steps[h]) % k
            exits.append(entry)
    out: list[tuple[int, int, int | None]] = []
    for h, (e, x) in enumerate(zip(entries, exits)):
        ein, xout = layout.nics[h][e][0], layout.nics[h][x][-1]
        if ein == xout and not relay:
            raise ScheduleError(f"no rail-aligned ring for {hosts} hosts of {k} NICs: a ring would enter and leave "
                                f"host {h} through one GPU")
        out.append((h, ein, None if ein == xout else xout))
    return out


def _host_path(members: tuple[Rank, ...], entry: int, exit_: int | None, hops: list[_Hops]) -> list[Rank]:
    """A path through every GPU of a host from position ``entry`` to ``exit_`` (``None``: any): GPU
    hops of the first map in ``hops`` that has one (host-local before any), cyclic order first."""
    g = len(members)
    if g == 1:
        return [members[entry]]
    for direct in hops:
        path, budget = [entry], 20_000
        stack = [iter(_next_positions(entry, exit_, g, {entry}))]
        while stack and budget > 0:
            budget -= 1
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                path.pop()
                continue
            if members[nxt] not in direct[members[path[-1]]]:
                continue
            path.append(nxt)
            if len(path) == g:
                return [members[p] for p in path]
            stack.append(iter(_next_positions(nxt, exit_, g, set(path))))
    raise ScheduleError(f"ring baseline: no path through the GPUs of the host of rank {members[entry]}")


def _next_positions(cur: int, exit_: int | None, g: int, used: set[int]) -> list[int]:
    """Unused positions after ``cur`` in cyclic order; ``exit_`` only as the last one."""
    rest = [(cur + i) % g for i in range(1, g) if (cur + i) % g not in used and (cur + i) % g != exit_]
    return rest if rest or exit_ is None else ([exit_] if exit_ not in used else [])


def _layout_ring(layout: NicLayout, channel: int, hops: list[_Hops], shift: bool, relay: bool) -> list[Rank]:
    order: list[Rank] = []
    for h, entry, exit_ in _slots(layout, channel, shift, relay):
        order += _host_path(layout.hosts[h], entry, exit_, hops)
    return order


class _Peers(Mapping[Rank, tuple[str, ...]]):
    """GPU ``u``'s switch-only hops, found per peer on demand (``in`` and ``[]``); iterating finds them all."""

    def __init__(self, owner: _LazyHops, u: Rank) -> None:
        self._owner, self._u = owner, u

    def _path(self, v: object) -> tuple[str, ...] | None:
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < self._owner.n or v == self._u:
            return None
        return self._owner.path(self._u, v)

    def __contains__(self, v: object) -> bool:
        return self._path(v) is not None

    def __getitem__(self, v: Rank) -> tuple[str, ...]:
        path = self._path(v)
        if path is None:
            raise KeyError(v)
        return path

    def _all(self) -> list[Rank]:
        return [v for v in range(self._owner.n) if self._path(v) is not None]

    def __iter__(self) -> Iterator[Rank]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


class _LazyHops(Mapping[Rank, Mapping[Rank, tuple[str, ...]]]):
    """:func:`gpu_hops` (or its host-local part, ``local``) with every pair's route found only when
    asked (:class:`synth.routing.PairRoutes`): a ring asks for ~N × channels pairs, not N²."""

    def __init__(self, topo: Topology, routes: PairRoutes, local: bool) -> None:
        self.n, self._routes, self._local = topo.nranks, routes, local
        self._roles = switch_roles(topo) if local else {}

    def path(self, u: Rank, v: Rank) -> tuple[str, ...] | None:
        p = self._routes.route(u, v)
        if p is None or not self._local:
            return p
        return p if all(self._roles.get(x, "nvswitch") == "nvswitch" for x in p[1:-1]) else None

    def __getitem__(self, u: Rank) -> _Peers:
        if isinstance(u, bool) or not isinstance(u, int) or not 0 <= u < self.n:
            raise KeyError(u)
        return _Peers(self, u)

    def __iter__(self) -> Iterator[Rank]:
        return iter(range(self.n))

    def __len__(self) -> int:
        return self.n


def _choice_rings(topo: Topology, choice: BaselineChoice, nchannels: int,
                  routes: PairRoutes) -> tuple[list[list[Rank]], str] | None:
    """Rings on the choice's layout and a note on how they were built, or ``None`` (use the generic ring)."""
    layout = choice.layout
    if layout is None:
        return None
    direct = _LazyHops(topo, routes, local=False)
    hops: list[_Hops] = [_LazyHops(topo, routes, local=True), direct]
    attempts = [(False, False, "")]
    if layout.networks == 1:  # any NIC reaches any NIC: the rings may shift NICs between hosts
        attempts.append((True, False, "entered and left on adjacent NICs"))
    attempts.append((False, True, "some leave a host from its last GPU through the GPU at the NIC (PXN)"))
    for shift, relay, note in attempts:
        try:
            return [_layout_ring(layout, c, hops, shift, relay) for c in range(nchannels)], note
        except ScheduleError:
            continue
    return None


def _generic_rings(topo: Topology, nchannels: int) -> list[list[Rank]]:
    n = topo.nranks
    direct = gpu_hops(topo)
    base = list(range(n))
    if not all(base[(i + 1) % n] in direct[base[i]] for i in range(n)):
        base = _hamiltonian_cycle({r: set(peers) for r, peers in direct.items()}, n)
    back = base[::-1]
    # NCCL runs its rings both ways: odd channels take the reversed ring where every reversed step is a
    # hop too (bidirectional links), so two channels load both directions of every link, not one twice.
    both = all(back[(i + 1) % n] in direct[back[i]] for i in range(n))
    rings = [back if both and c % 2 else base for c in range(nchannels)]
    return [ring[c % n:] + ring[: c % n] for c, ring in enumerate(rings)]


def ring_orders(topo: Topology, nchannels: int) -> list[list[Rank]]:
    """The rank order of each ring NCCL-like rings would use on ``topo``."""
    built = _choice_rings(topo, baseline_choice(topo), nchannels, PairRoutes(topo))
    return built[0] if built is not None else _generic_rings(topo, nchannels)


def _hamiltonian_cycle(direct: dict[Rank, set[Rank]], n: int, budget: int = 200_000) -> list[Rank]:
    """A ring through every GPU over switch-only hops (backtracking, fewest-options first)."""
    path, on_path = [0], {0}
    stack = [iter(sorted(direct[0], key=lambda v: (len(direct[v]), v)))]
    while stack and budget > 0:
        budget -= 1
        nxt = next(stack[-1], None)
        if nxt is None:
            stack.pop()
            on_path.discard(path.pop())
            continue
        if nxt in on_path:
            continue
        path.append(nxt)
        on_path.add(nxt)
        if len(path) == n:
            if 0 in direct[nxt]:
                return path
            on_path.discard(path.pop())
            continue
        stack.append(iter(sorted(direct[nxt] - on_path, key=lambda v: (len(direct[v] - on_path), v))))
    raise ScheduleError("ring baseline: found no ring through every GPU over switch-only hops")


def _relay(direct: _Hops, src: Rank, dst: Rank, topo: Topology) -> Rank:
    """The lowest GPU that ``src`` reaches through switches and that reaches ``dst`` so."""
    for w in sorted(direct[src]):
        if dst in direct[w]:
            return w
    raise ScheduleError(f"ring baseline: rank {src} cannot reach rank {dst} through switches or one GPU on "
                        f"{topo.name!r}")


def _walk_tree(walk: list[Rank], can_hop: Callable[[Rank, Rank], bool],
               relay: Callable[[Rank, Rank], Rank]) -> list[tuple[Rank, Rank]]:
    """Tree edges (parent, child), parents first, that bring ``walk[0]``'s data to every GPU of
    ``walk`` in walk order. A step a → b with no hop goes through ``relay(a, b)``; a relay that
    already holds the data sends it itself, one that does not keeps a copy on the way."""
    have = {walk[0]}
    edges: list[tuple[Rank, Rank]] = []
    for a, b in zip(walk, walk[1:]):
        if b in have:
            continue
        if can_hop(a, b):
            edges.append((a, b))
        else:
            w = relay(a, b)
            if w not in have:
                edges.append((a, w))
                have.add(w)
            edges.append((w, b))
        have.add(b)
    return edges


def _direct_ring_routes(coll: Collective, order: list[Rank], hop: Callable[[Rank, Rank], Hop],
                        chunks: int = 1) -> list[Route]:
    """The routes of one ring whose every step ``order[i] → order[i + 1]`` is a hop: the same routes as
    the walk of :func:`nccl_ring` (no relay is ever needed), as slices of the ring's hops (2048 GPUs:
    ~33 M hops in all, so no per-hop Python work). The out-tree of the rank at position p takes the
    hops from p on, its in-tree (leaves first) the hops from p + 1 on, each ending before p."""
    n = len(order)
    ring = [hop(order[i], order[(i + 1) % n]) for i in range(n)] * 2
    routes: list[Route] = []
    ins, outs = coll.in_trees, coll.out_trees
    with bulk_allocation():
        for p, root in sorted(enumerate(order), key=lambda pr: pr[1]):
            if ins:
                routes.append(Route(RouteKind.IN_TREE, root, chunks, tuple(ring[p + 1:p + n])))
            if outs:
                routes.append(Route(RouteKind.OUT_TREE, root, chunks, tuple(ring[p:p + n - 1])))
    return routes


_RING_NAMES = {"rail": "rail rings", "nic": "NIC rings"}


def nccl_ring(collective: Collective | str, topo: Topology, *, nchannels: int | None = None) -> Schedule:
    """Multi-ring AllGather, ReduceScatter or AllReduce (one chunk per ring per source).

    ``nchannels`` defaults to the NICs per host where the fabric has a NIC layout (one ring per
    NIC), else 2. ``meta["baseline"]`` is ``"rail-ring"``, ``"nic-ring"`` or ``"generic-ring"``,
    ``meta["baseline_reason"]`` says how the rings were built and why.
    """
    if collective not in TREE_COLLECTIVES:
        raise ScheduleError(f"ring baseline supports allgather, reducescatter, allreduce, not {collective!r}")
    if nchannels is not None and nchannels < 1:
        raise ScheduleError(f"nchannels must be >= 1, got {nchannels!r}")
    return _nccl_ring(Collective(collective), topo, nchannels, baseline_choice(topo), PairRoutes(topo))


def _nccl_ring(coll: Collective, topo: Topology, nchannels: int | None, choice: BaselineChoice,
               pair_routes: PairRoutes) -> Schedule:
    """:func:`nccl_ring` on checked arguments, with the layout and routes its caller already has."""
    channels = nchannels if nchannels is not None else (choice.layout.nrails if choice.layout is not None else 2)
    built = _choice_rings(topo, choice, channels, pair_routes)
    if built is not None:
        orders, note = built
        per_nic = " (one per NIC)" if nchannels is None else ""
        kind = choice.kind
        what = f"{_RING_NAMES[kind]}, {channels} channel{'s' if channels != 1 else ''}{per_nic}{', ' + note if note else ''}"
        reason = choice.reason
    else:
        if nchannels is None:
            channels = 2
        orders = _generic_rings(topo, channels)
        kind = "generic"
        what = f"generic ring, {channels} channels"
        reason = choice.reason if choice.layout is None else f"no ring through the NIC layout ({choice.reason})"
    n = topo.nranks
    lazy = _LazyHops(topo, pair_routes, local=False)
    ring_direct = all(order[(i + 1) % n] in lazy[order[i]] for order in orders for i in range(n))
    direct: _Hops = lazy if ring_direct else gpu_hops(topo)  # relays search every GPU's hops
    cache: dict[tuple[Rank, Rank], Hop] = {}

    def hop(a: Rank, b: Rank) -> Hop:
        if (a, b) not in cache:
            cache[(a, b)] = Hop(a, b, direct[a][b])
        return cache[(a, b)]

    routes: list[Route] = []
    for order in orders:
        if all(order[(i + 1) % n] in direct[order[i]] for i in range(n)):
            routes += _direct_ring_routes(coll, order, hop)
            continue
        pos = {r: i for i, r in enumerate(order)}
        for root in range(n):
            chain = [order[(pos[root] + i) % n] for i in range(n)]
            if coll.in_trees:
                # Reduction of root's block travels the ring and ends at root: the out-tree of the
                # reversed walk, with every hop turned around, listed leaves first.
                walk = [root, *chain[:0:-1]]
                edges = _walk_tree(walk, lambda a, b: a in direct[b], lambda a, b: _relay(direct, b, a, topo))
                routes.append(Route(RouteKind.IN_TREE, root, 1, tuple(hop(b, a) for a, b in reversed(edges))))
            if coll.out_trees:
                edges = _walk_tree(chain, lambda a, b: b in direct[a], lambda a, b: _relay(direct, a, b, topo))
                routes.append(Route(RouteKind.OUT_TREE, root, 1, tuple(hop(a, b) for a, b in edges)))
    meta = {"synthesizer": "nccl-ring", "nchannels": channels, "baseline": f"{kind}-ring",
            "baseline_reason": f"{what}; {reason}", **communicator_meta(topo)}
    sched = Schedule(coll, n, channels, tuple(routes), meta=meta)
    sched.validate(topo)
    return sched


def gpu_hops(topo: Topology) -> dict[Rank, dict[Rank, tuple[str, ...]]]:
    """Each GPU's switch-only hops: the route (:func:`synth.routing.pair_route`) to every GPU it has one to."""
    out: dict[Rank, dict[Rank, tuple[str, ...]]] = {r: {} for r in range(topo.nranks)}
    for (a, b), path in route_table(topo).items():
        out[a][b] = path
    return out


def _relay_path(direct: _Hops, s: Rank, d: Rank) -> list[Rank]:
    parent = {s: s}
    queue = deque([s])
    while queue:
        u = queue.popleft()
        for v in sorted(direct[u]):
            if v not in parent:
                parent[v] = u
                if v == d:
                    path = [d]
                    while path[-1] != s:
                        path.append(parent[path[-1]])
                    return path[::-1]
                queue.append(v)
    raise ScheduleError(f"direct AllToAll: rank {d} unreachable from rank {s}")


def _pxn_path(layout: NicLayout, where: Mapping[Rank, tuple[int, int]], s: Rank, d: Rank) -> list[Rank]:
    """``s`` → the GPU of ``s``'s host at the NIC on ``d``'s rail → (the GPU at ``d``'s host's NIC on that
    rail →) ``d``, leaving out the GPUs that are ``s`` or ``d`` themselves."""
    (hs, ps), (hd, pd) = where[s], where[d]
    rail = layout.gpu_rail[hd][pd]
    out_local, in_local = layout.nics[hs][rail], layout.nics[hd][rail]
    proxy = s if ps in out_local else layout.hosts[hs][out_local[0]]
    entry = d if pd in in_local else layout.hosts[hd][in_local[-1]]
    ranks = [s]
    for r in (proxy, entry, d):
        if r != ranks[-1]:
            ranks.append(r)
    return ranks


def nccl_direct_alltoall(topo: Topology) -> Schedule:
    """Direct AllToAll with PXN (one chunk per block).

    A block goes over its pair's route where the source has one to the destination; else, on a
    fabric with a NIC layout, through the source host's GPU at the NIC on the destination's rail
    (PXN, and on to the destination through its host's NIC on that rail); elsewhere through the
    fewest GPU relays. ``meta["baseline"]`` is ``"rail-direct-pxn"``, ``"nic-direct-pxn"`` or
    ``"generic-direct"``, ``meta["baseline_reason"]`` says why.
    """
    n = topo.nranks
    choice = baseline_choice(topo)
    layout = choice.layout
    direct = gpu_hops(topo)
    where = {} if layout is None else {r: (h, p) for h, row in enumerate(layout.hosts) for p, r in enumerate(row)}
    routes: list[Route] = []
    for s in range(n):
        for d in range(n):
            if s == d:
                continue
            ranks = [s, d]
            if d not in direct[s]:
                ranks = _pxn_path(layout, where, s, d) if layout is not None else []
                if any(b not in direct[a] for a, b in zip(ranks[:-1], ranks[1:])) or not ranks:
                    ranks = _relay_path(direct, s, d)
            hops = tuple(Hop(a, b, direct[a][b]) for a, b in zip(ranks[:-1], ranks[1:]))
            routes.append(Route(RouteKind.PATH, s, 1, hops, dest=d))
    if layout is not None:
        what = "direct; PXN (via the GPU at the NIC on the destination's rail) where no switch path"
    else:
        what = "direct, relayed through the fewest GPUs"
    meta = {"synthesizer": "nccl-direct", "baseline": f"{choice.kind}-direct" + ("-pxn" if layout else ""),
            "baseline_reason": f"{what}; {choice.reason}", **communicator_meta(topo)}
    sched = Schedule(Collective.ALLTOALL, n, 1, tuple(routes), meta=meta)
    sched.validate(topo)
    return sched
