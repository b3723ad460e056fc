"""NCCL-like baseline schedules, expressed in the schedule IR so every comparison uses one model.

* :func:`nccl_ring` — multi-ring AllGather / ReduceScatter / AllReduce: one ring per channel,
  data split equally over the rings. On rail-optimised fabrics (one NIC per GPU into a rail
  switch per GPU index, as ``hpn`` and ``dgx-*``) each ring enters a host on one rail and leaves
  it on another, and different rings leave a host on different NICs, as NCCL does.
* :func:`nccl_direct_alltoall` — each GPU sends each peer's block directly; on a rail-optimised
  fabric a cross-rail inter-host block first crosses the NVSwitch to the local GPU on the
  destination's rail and then leaves through that GPU's NIC (NCCL's PXN).

The rail layout is read from the graph (:func:`synth.topologies.structure.rail_layout`: hosts
from the ``host`` field, rails from the network switches each GPU reaches), never from names
or ``meta``; :func:`baseline_kind` says which baseline a topology gets ("rail" or "generic"),
and every baseline schedule records it in ``meta["baseline"]``.
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
"""

from __future__ import annotations

from collections import deque

from synth._types import Collective, Rank
from synth.errors import ScheduleError
from synth.paths import switch_reachable
from synth.routing import pair_route
from synth.schedule import Hop, Route, RouteKind, Schedule
from synth.topologies.communicator import communicator_meta
from synth.topologies.model import Topology
from synth.topologies.structure import RailLayout, rail_layout

__all__ = ["baseline_kind", "nccl_direct_alltoall", "nccl_ring", "ring_orders"]


def baseline_kind(topo: Topology) -> str:
    """``"rail"`` where the graph has a rail-optimised layout (rail rings, PXN), else ``"generic"``.

    >>> from synth.topologies import named_topology
    >>> baseline_kind(named_topology("dgx-h100:2")), baseline_kind(named_topology("torus:2x2"))
    ('rail', 'generic')
    """
    return "rail" if rail_layout(topo) is not None else "generic"


def _rail_ring(layout: RailLayout, channel: int) -> list[Rank]:
    """Ring ``channel`` on a rail fabric: host h is entered on rail e_h and left on rail x_h ≠ e_h,
    with x_h = e_{h+1} (the inter-host hop stays on one rail)."""
    return [layout.hosts[h][i] for h, i in _rail_ring_slots(layout.nhosts, layout.gpus_per_host, channel)]


def _rail_ring_slots(hosts: int, g: int, channel: int) -> list[tuple[int, int]]:
    """The ring as (host, rail) slots."""
    if g == 1:
        return [(h, 0) for h in range(hosts)]
    if hosts == 1:
        return [(0, (channel + i) % g) for i in range(g)]
    steps = [1] * (hosts - 1)
    last = (-(hosts - 1)) % g
    if last == 0:  # make the rail offsets sum to 0 mod g with every offset nonzero
        if g == 2:
            raise ScheduleError(f"no rail-aligned ring for {hosts} hosts of 2 GPUs (odd host count)")
        steps[-1], last = 2, (-hosts) % g
    steps.append(last)
    order: list[tuple[int, int]] = []
    entry = channel % g
    for h in range(hosts):
        exit_ = (entry + steps[h]) % g
        middle = [(entry + i) % g for i in range(1, g) if (entry + i) % g != exit_]
        order += [(h, r) for r in [entry, *middle, exit_]]
        entry = exit_
    return order


def ring_orders(topo: Topology, nchannels: int) -> list[list[Rank]]:
    """The rank order of each ring NCCL-like rings would use on ``topo``."""
    layout = rail_layout(topo)
    if layout is not None:
        return [_rail_ring(layout, c) for c in range(nchannels)]
    n = topo.nranks
    direct = {r: set(peers) for r, peers in _gpu_hops(topo).items()}
    base = list(range(n))
    if not all(base[(i + 1) % n] in direct[base[i]] for i in range(n)):
        base = _hamiltonian_cycle(direct, n)
    return [base[c % n:] + base[: c % n] for c in range(nchannels)]


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


def _hop(topo: Topology, a: Rank, b: Rank) -> Hop:
    path = pair_route(topo, topo.gpu_id(a), topo.gpu_id(b))
    if path is None:
        raise ScheduleError(f"ring baseline: rank {a} cannot reach rank {b} through switches on {topo.name!r}")
    return Hop(a, b, path)


def nccl_ring(collective: Collective, topo: Topology, *, nchannels: int | None = None) -> Schedule:
    """Multi-ring AllGather, ReduceScatter or AllReduce (one chunk per ring per source).

    ``nchannels`` defaults to the GPUs per host on rail fabrics (one ring per NIC), else 2.
    ``meta["baseline"]`` is ``"rail-ring"`` or ``"generic-ring"``.
    """
    if collective not in ("allgather", "reducescatter", "allreduce"):
        raise ScheduleError(f"ring baseline supports allgather, reducescatter, allreduce, not {collective!r}")
    layout = rail_layout(topo)
    if nchannels is None:
        nchannels = layout.gpus_per_host if layout is not None else 2
    if nchannels < 1:
        raise ScheduleError(f"nchannels must be >= 1, got {nchannels!r}")
    n = topo.nranks
    routes: list[Route] = []
    for order in ring_orders(topo, nchannels):
        pos = {r: i for i, r in enumerate(order)}
        hops = {(order[i], order[(i + 1) % n]): _hop(topo, order[i], order[(i + 1) % n]) for i in range(n)}
        for root in range(n):
            chain = [order[(pos[root] + i) % n] for i in range(n)]
            if collective in ("reducescatter", "allreduce"):
                # Reduction of root's block travels the ring and ends at root.
                red = chain[1:] + [root]
                routes.append(Route(RouteKind.IN_TREE, root, 1, tuple(hops[(red[i], red[i + 1])] for i in range(n - 1))))
            if collective in ("allgather", "allreduce"):
                routes.append(Route(RouteKind.OUT_TREE, root, 1, tuple(hops[(chain[i], chain[i + 1])] for i in range(n - 1))))
    kind = "rail-ring" if layout is not None else "generic-ring"
    meta = {"synthesizer": "nccl-ring", "nchannels": nchannels, "baseline": kind, **communicator_meta(topo)}
    sched = Schedule(collective, n, nchannels, tuple(routes), meta=meta)
    sched.validate(topo)
    return sched


def _gpu_hops(topo: Topology) -> dict[Rank, dict[Rank, tuple[str, ...]]]:
    return {
        r: {topo.rank_of(v): p for v, p in switch_reachable(topo, topo.gpu_id(r)).items() if v != topo.gpu_id(r)}
        for r in range(topo.nranks)
    }


def _relay_path(direct: dict[Rank, dict[Rank, tuple[str, ...]]], s: Rank, d: Rank) -> list[Rank]:
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


def _pxn_proxy(layout: RailLayout, s: Rank, d: Rank) -> Rank:
    """The GPU in ``s``'s host on ``d``'s rail."""
    return layout.hosts[layout.host_of(s)][layout.rail_of(d)]


def _pxn_ok(direct: dict[Rank, dict[Rank, tuple[str, ...]]], s: Rank, proxy: Rank, d: Rank) -> bool:
    return proxy in direct[s] and d in direct[proxy]


def nccl_direct_alltoall(topo: Topology) -> Schedule:
    """Direct AllToAll with PXN on rail fabrics (one chunk per block).

    A block whose destination the source cannot reach through switches goes, on a rail fabric,
    through the source host's GPU on the destination's rail (PXN); elsewhere through the fewest
    GPU relays. ``meta["baseline"]`` is ``"rail-direct-pxn"`` or ``"generic-direct"``.
    """
    n = topo.nranks
    layout = rail_layout(topo)
    direct = _gpu_hops(topo)
    routes: list[Route] = []
    for s in range(n):
        for d in range(n):
            if s == d:
                continue
            if d in direct[s]:
                ranks = [s, d]
            elif layout is not None and _pxn_ok(direct, s, proxy := _pxn_proxy(layout, s, d), d):
                ranks = [s, proxy, d]
            else:
                ranks = _relay_path(direct, s, d)
            hops = tuple(Hop(a, b, direct[a][b]) for a, b in zip(ranks[:-1], ranks[1:]))
            routes.append(Route(RouteKind.PATH, s, 1, hops, dest=d))
    kind = "rail-direct-pxn" if layout is not None else "generic-direct"
    sched = Schedule("alltoall", n, 1, tuple(routes), meta={"synthesizer": "nccl-direct", "baseline": kind, **communicator_meta(topo)})
    sched.validate(topo)
    return sched
