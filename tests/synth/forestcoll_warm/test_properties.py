"""Property tests: random small Eulerian topologies with switches reach the exact bound."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from synth.forestcoll_warm import synthesize_allgather
from synth.topologies import Link, Node, NodeKind, Topology
from tests.strategies import random_topologies
from tests.synth.forestcoll_warm._helpers import assert_exact_optimal


@st.composite
def eulerian_topologies(draw: st.DrawFn) -> Topology:
    """GPUs 3-6, switches 1-3, integer capacities; a sum of directed cycles is Eulerian everywhere.

    Symmetric ones use cables (both directions equal); asymmetric ones add random directed cycles.
    A first cycle through every node keeps the GPUs strongly connected. ``degrade`` lowers one
    random cycle, keeping the topology Eulerian.
    """
    n = draw(st.integers(3, 6))
    k = draw(st.integers(1, 3))
    sym = draw(st.booleans())
    gpus = [f"gpu{r}" for r in range(n)]
    sws = [f"sw{j}" for j in range(k)]
    ids = gpus + sws
    caps: dict[tuple[str, str], int] = {}

    def add_cycle(cycle: list[str], c: int) -> None:
        for a, b in zip(cycle, cycle[1:] + cycle[:1]):
            if a != b:
                caps[(a, b)] = caps.get((a, b), 0) + c
                if sym:
                    caps[(b, a)] = caps.get((b, a), 0) + c

    add_cycle(draw(st.permutations(ids)), draw(st.integers(1, 9)))
    for _ in range(draw(st.integers(0, 4))):
        cyc = draw(st.lists(st.sampled_from(ids), min_size=2, max_size=len(ids), unique=True))
        add_cycle(cyc, draw(st.integers(1, 9)))
    if draw(st.booleans(), label="degrade"):
        cyc = [a for a in draw(st.permutations(ids))][: draw(st.integers(2, len(ids)))]
        edges = list(zip(cyc, cyc[1:] + cyc[:1]))
        if all(caps.get(e, 0) > 1 for e in edges) and (not sym or all(caps.get((b, a), 0) > 1 for a, b in edges)):
            for a, b in edges:
                caps[(a, b)] -= 1
                if sym:
                    caps[(b, a)] -= 1
    nodes = [Node(g, NodeKind.GPU, r, 0) for r, g in enumerate(gpus)] + [Node(s, NodeKind.SWITCH) for s in sws]
    links = [Link(a, b, float(c), 0.5) for (a, b), c in sorted(caps.items()) if c > 0]
    return Topology.create("random-eulerian", nodes, links)


@settings(max_examples=200, deadline=None)
@given(eulerian_topologies())
def test_random_eulerian_topologies_reach_exact_bound(topo: Topology) -> None:
    assert_exact_optimal(synthesize_allgather(topo), topo)


@settings(max_examples=40, deadline=None)
@given(random_topologies(min_gpus=2, max_gpus=5, max_switches=2))
def test_random_possibly_non_eulerian_topologies_give_valid_schedules(topo: Topology) -> None:
    res = synthesize_allgather(topo)
    assert res.schedule is not None, res.message
    res.schedule.validate(topo)
    assert res.algbw_GBps <= res.optimal_algbw_GBps * (1 + 1e-12)
    eulerian = all(
        sum(lk.gbps for lk in topo.in_links(s.id)) == sum(lk.gbps for lk in topo.out_links(s.id)) for s in topo.switches
    )
    if eulerian or res.gap_pct == 0:
        assert_exact_optimal(res, topo)
