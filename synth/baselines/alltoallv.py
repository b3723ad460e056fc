"""AllToAllv baselines as :class:`~synth.alltoallv_schedule.AllToAllvSchedule` objects.

* :func:`direct_alltoallv` — NCCL-like: every block goes whole over the direct AllToAll route of
  :func:`synth.baselines.nccl_direct_alltoall` (switch path, PXN through the source host's GPU on
  the destination's rail where needed).
* :func:`two_phase_alltoallv` — FAST-like (arXiv 2505.09764): balance inside the host, then a
  balanced scale-out. On a rail fabric with R GPUs per host, each block between two hosts is cut
  into R equal chunks; chunk r goes source → its host's GPU on rail r (NVSwitch) → the
  destination host's GPU on rail r (rail network) → destination (NVSwitch). Every GPU then sends
  the same scale-out volume to each host. Blocks inside a host, and chunks whose rail pair is not
  switch-connected, take the direct route. Without a rail layout it equals the direct baseline.

Both are timed by the same bandwidth-term model as the synthesized schedules (phases overlap), which
flatters the two-phase baseline: a real implementation runs its phases in sequence.

Examples
--------
>>> from synth.topologies import named_topology
>>> topo = named_topology("hpn:1x2x2")
>>> dem = [[0, 1e9, 4e9, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
>>> round(direct_alltoallv(topo, dem).completion_time_s(topo), 6)  # 4 GB over one 50 GB/s NIC
0.08
>>> round(two_phase_alltoallv(topo, dem).completion_time_s(topo), 6)  # split over both NICs
0.04
"""

from __future__ import annotations

from typing import Any

from synth.alltoallv_schedule import AllToAllvSchedule, check_demand
from synth.baselines.nccl import gpu_hops, nccl_direct_alltoall
from synth.topologies.structure import rail_layout
from synth.schedule import Hop, Route, RouteKind
from synth.topologies.communicator import communicator_meta
from synth.topologies.model import Topology

__all__ = ["direct_alltoallv", "two_phase_alltoallv"]


def direct_alltoallv(topo: Topology, demand: Any) -> AllToAllvSchedule:
    """NCCL-like direct AllToAllv (one chunk per block, see the module docstring)."""
    d = check_demand(demand, topo.nranks)
    base = nccl_direct_alltoall(topo)
    routes = tuple(r for r in base.routes if r.dest is not None and d[r.root][r.dest] > 0)
    meta = {"synthesizer": "nccl-direct-v", "baseline": base.meta.get("baseline"), **communicator_meta(topo)}
    return AllToAllvSchedule(topo.nranks, 1, d, routes, topo.fingerprint, meta)


def two_phase_alltoallv(topo: Topology, demand: Any) -> AllToAllvSchedule:
    """FAST-like two-phase AllToAllv (see the module docstring)."""
    d = check_demand(demand, topo.nranks)
    layout = rail_layout(topo)
    if layout is None:
        sched = direct_alltoallv(topo, demand)
        return AllToAllvSchedule(sched.nranks, 1, d, sched.routes, topo.fingerprint,
                                 {**sched.meta, "synthesizer": "two-phase-v", "baseline": "no-rails-direct"})
    rails = layout.gpus_per_host
    direct = gpu_hops(topo)
    base = {(r.root, r.dest): r for r in nccl_direct_alltoall(topo).routes}
    routes: list[Route] = []
    for s in range(topo.nranks):
        for t in range(topo.nranks):
            if s == t or d[s][t] <= 0:
                continue
            a, b = layout.host_of(s), layout.host_of(t)
            fallback = 0
            if a != b:
                for r in range(rails):
                    ga, gb = layout.hosts[a][r], layout.hosts[b][r]
                    ranks = [s] + ([ga] if ga != s else []) + ([gb] if gb != t else []) + [t]
                    if all(y in direct[x] for x, y in zip(ranks[:-1], ranks[1:])):
                        hops = tuple(Hop(x, y, direct[x][y]) for x, y in zip(ranks[:-1], ranks[1:]))
                        routes.append(Route(RouteKind.PATH, s, 1, hops, dest=t))
                    else:
                        fallback += 1
            else:
                fallback = rails
            if fallback:
                r0 = base[(s, t)]
                routes.append(Route(RouteKind.PATH, s, fallback, r0.hops, dest=t))
    meta = {"synthesizer": "two-phase-v", "baseline": "rail-two-phase", **communicator_meta(topo)}
    return AllToAllvSchedule(topo.nranks, rails, d, tuple(_merge(routes)), topo.fingerprint, meta)


def _merge(routes: list[Route]) -> list[Route]:
    """One route per distinct (source, destination, hops), chunks added up."""
    acc: dict[tuple[int, int | None, tuple[Hop, ...]], int] = {}
    for r in routes:
        key = (r.root, r.dest, r.hops)
        acc[key] = acc.get(key, 0) + r.chunks
    return [Route(RouteKind.PATH, s, c, hops, dest=t) for (s, t, hops), c in acc.items()]
