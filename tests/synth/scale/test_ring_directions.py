"""The generic ring baseline runs its channels both ways (issue 31: on ``ring:300`` its two channels ran the
same direction and reached 50 % of the optimum). On a ring of GPUs with bidirectional links, two channels,
one per direction, load every link both ways and so reach the synthesized optimum."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth import synthesize
from synth.baselines import nccl_ring
from synth.baselines.nccl import gpu_hops, ring_orders
from synth.topologies import Link, Node, NodeKind, Topology, named_topology


def _shuffled_ring(n: int, seed: int, gbps: float) -> Topology:
    """n GPUs cabled in a ring in a random rank order (so rank order is not ring order), links both ways."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    nodes = [Node(f"gpu{r}", NodeKind.GPU, r, r) for r in range(n)]
    links = []
    for i in range(n):
        a, b = f"gpu{order[i]}", f"gpu{order[(i + 1) % n]}"
        links += [Link(a, b, gbps, 1.0), Link(b, a, gbps, 1.0)]
    return Topology.create(f"shuffled-ring-{n}-{seed}", nodes, links, {})


def _two_ways(topo: Topology) -> None:
    first, second = ring_orders(topo, 2)
    n = len(first)
    forward = {(first[i], first[(i + 1) % n]) for i in range(n)}
    backward = {(second[i], second[(i + 1) % n]) for i in range(n)}
    assert len(forward) == n
    assert backward == {(b, a) for a, b in forward}


@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "allreduce"])
def test_named_ring_baseline_reaches_the_optimum(collective: str) -> None:
    topo = named_topology("ring:7")
    sched = nccl_ring(collective, topo)
    assert sched.meta["baseline"] == "generic-ring"
    _two_ways(topo)
    optimum = synthesize(collective, topo).optimal_algbw_GBps
    assert optimum is not None
    assert sched.algbw_GBps(topo) == pytest.approx(optimum, rel=1e-9)


@settings(max_examples=12, deadline=None)
@given(n=st.integers(3, 12), seed=st.integers(0, 10_000), gbps=st.floats(50.0, 900.0))
def test_shuffled_ring_baseline_reaches_the_optimum(n: int, seed: int, gbps: float) -> None:
    topo = _shuffled_ring(n, seed, gbps)
    direct = gpu_hops(topo)
    sched = nccl_ring("allgather", topo)
    orders = ring_orders(topo, sched.nchunks)
    assert all(o[(i + 1) % n] in direct[o[i]] for o in orders for i in range(n))
    _two_ways(topo)
    optimum = synthesize("allgather", topo).optimal_algbw_GBps
    assert optimum is not None
    assert sched.algbw_GBps(topo) == pytest.approx(optimum, rel=1e-9)


def test_one_way_links_keep_one_direction() -> None:
    """A ring whose links run one way only: both channels go that way (the reversed ring has no hops)."""
    n = 5
    nodes = [Node(f"gpu{r}", NodeKind.GPU, r, r) for r in range(n)]
    links = [Link(f"gpu{r}", f"gpu{(r + 1) % n}", 400.0, 1.0) for r in range(n)]
    topo = Topology.create("one-way-ring", nodes, links, {})
    sched = nccl_ring("allgather", topo)
    orders = ring_orders(topo, 2)
    assert all(o[(o.index(r) + 1) % n] == (r + 1) % n for o in orders for r in range(n))
    assert sched.algbw_GBps(topo) > 0
