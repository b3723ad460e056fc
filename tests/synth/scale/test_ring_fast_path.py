"""The ring baseline's slice fast path (synth.baselines.nccl._direct_ring_routes) builds exactly the routes of
the per-root walk it replaces, and the id-keyed load count equals a hop-by-hop recount (issue 31: at 2048
GPUs the ring is the time-limit fallback and its ~33 M hops must cost no per-hop Python)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from synth.baselines import nccl_ring
from synth.baselines.nccl import _walk_tree, gpu_hops, ring_orders
from synth.schedule import Hop, Route, RouteKind
from synth.topologies import named_topology


def _walked(collective: str, order: list[int], direct: dict[int, dict[int, tuple[str, ...]]]) -> list[Route]:
    """The routes of one ring by the walk (every step a direct hop, so no relay is ever asked for)."""
    n = len(order)
    pos = {r: i for i, r in enumerate(order)}
    routes = []

    def no_relay(a: int, b: int) -> int:
        raise AssertionError(f"relay asked for {a}->{b}")

    for root in range(n):
        chain = [order[(pos[root] + i) % n] for i in range(n)]
        if collective in ("reducescatter", "allreduce"):
            edges = _walk_tree([root, *chain[:0:-1]], lambda a, b: a in direct[b], no_relay)
            routes.append(Route(RouteKind.IN_TREE, root, 1, tuple(Hop(b, a, direct[b][a]) for a, b in reversed(edges))))
        if collective in ("allgather", "allreduce"):
            edges = _walk_tree(chain, lambda a, b: b in direct[a], no_relay)
            routes.append(Route(RouteKind.OUT_TREE, root, 1, tuple(Hop(a, b, direct[a][b]) for a, b in edges)))
    return routes


@pytest.mark.parametrize("spec", ["hpn:1x2x8", "hpn:2x2x4", "dgx-a100:2", "nvswitch:8", "ring:6"])
@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "allreduce"])
def test_slices_equal_the_walk(spec: str, collective: str) -> None:
    topo = named_topology(spec)
    sched = nccl_ring(collective, topo)
    direct = gpu_hops(topo)
    orders = ring_orders(topo, sched.nchunks)
    assert all(order[(i + 1) % len(order)] in direct[order[i]] for order in orders for i in range(len(order)))
    expected = [r for order in orders for r in _walked(collective, order, direct)]
    assert list(sched.routes) == expected


@pytest.mark.parametrize("collective", ["allgather", "allreduce"])
def test_link_loads_equal_a_hop_by_hop_count(collective: str) -> None:
    topo = named_topology("hpn:2x2x4")
    sched = nccl_ring(collective, topo)
    loads: dict[tuple[str, str], int] = defaultdict(int)
    for route in sched.routes:
        for hop in route.hops:
            for key in hop.links:
                loads[key] += route.chunks
    assert sched.link_loads() == dict(sorted(loads.items()))
