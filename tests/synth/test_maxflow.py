"""The reusable integer max-flow network (synth/maxflow.py), with networkx as the oracle."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.errors import SolverError
from synth.maxflow import INT64_MAX, FlowNetwork


def test_small_network_flow_cut_and_capacity_changes() -> None:
    # The classic 6-node example (CLRS Fig. 26.1), value 23.
    arcs = [(0, 1, 16), (0, 2, 13), (1, 3, 12), (2, 1, 4), (2, 4, 14), (3, 2, 9), (3, 5, 20), (4, 3, 7), (4, 5, 4)]
    net = FlowNetwork(6)
    ids = [net.add_arc(a, b, c) for a, b, c in arcs]
    assert net.n_arcs == 9
    assert net.max_flow(0, 5) == 23
    side = net.source_side(0, 5)
    assert 0 in side and 5 not in side
    cut = sum(c for (a, b, c) in arcs if a in side and b not in side)
    assert cut == 23
    flows = net.flows(np.asarray(ids))
    assert all(0 <= f <= c for f, (_, _, c) in zip(flows, arcs))
    net.set_capacity(ids[-1], 100)  # 4 -> 5 no longer limits; the cut {0, 1} (13 + 12) does
    assert net.capacity(ids[-1]) == 100
    assert net.max_flow(0, 5) == 25
    assert net.source_side(0, 5) == {0, 1}


@pytest.mark.parametrize(("arcs", "s", "t", "side"), [
    ([], 0, 5, {0}),  # no arcs at all
    ([(1, 2, 5)], 0, 3, {0}),  # neither end touches an arc
    ([(0, 1, 5), (1, 2, 5), (2, 0, 0)], 0, 4, {0, 1, 2}),  # the sink touches no arc
    ([(0, 1, 5), (1, 2, 0)], 0, 4, {0, 1}),  # a zero-capacity arc is not crossed
    ([(1, 2, 5)], 5, 1, {5}),  # the source touches no arc
])
def test_ends_that_touch_no_arc_give_zero_flow_and_a_true_cut(arcs, s: int, t: int, side: set[int]) -> None:
    net = FlowNetwork(6)
    for a, b, c in arcs:
        net.add_arc(a, b, c)
    assert net.max_flow(s, t) == 0
    assert net.source_side(s, t) == side


def test_add_arcs_and_set_capacities_in_bulk() -> None:
    net = FlowNetwork(4)
    arcs = net.add_arcs([0, 0, 1, 2], [1, 2, 3, 3], [3, 2, 5, 5])
    assert net.max_flow(0, 3) == 5
    net.set_capacities(arcs, [10, 10, 1, 1])
    assert net.max_flow(0, 3) == 2
    assert net.max_flow(3, 0) == 0
    assert net.source_side(3, 0) == {3}


@pytest.mark.parametrize("call", [
    lambda n: n.add_arc(0, 1, -1),
    lambda n: n.add_arc(0, 1, INT64_MAX),
    lambda n: n.add_arcs([0], [1], [-5]),
    lambda n: n.set_capacity(n.add_arc(0, 1, 1), -2),
    lambda n: n.set_capacities(n.add_arcs([0], [1], [1]), [INT64_MAX // 2]),
])
def test_bad_capacities_raise_solver_error(call) -> None:
    with pytest.raises(SolverError, match=r"capacit"):
        call(FlowNetwork(2))


_arc = st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 20)).filter(lambda a: a[0] != a[1])


@settings(max_examples=100)
@given(st.lists(_arc, max_size=20), st.integers(0, 5), st.integers(0, 5))
def test_max_flow_and_min_cut_match_networkx(arcs, s: int, t: int) -> None:
    if s == t:
        t = (s + 1) % 6
    net = FlowNetwork(6)
    for a, b, c in arcs:
        net.add_arc(a, b, c)
    g = nx.DiGraph()
    g.add_nodes_from(range(6))
    for a, b, c in arcs:  # parallel arcs add up
        if g.has_edge(a, b):
            g[a][b]["capacity"] += c
        else:
            g.add_edge(a, b, capacity=c)
    value = net.max_flow(s, t)
    assert value == nx.maximum_flow_value(g, s, t)
    side = net.source_side(s, t)
    assert s in side and t not in side
    assert sum(c for a, b, c in arcs if a in side and b not in side) == value
