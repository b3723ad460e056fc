"""Pricing on the time-expanded graph against a networkx oracle."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings

from synth.alltoall_cg._expanded import ExpandedGraph, Network, hop_diameter
from synth.alltoall_cg._pricing import price_trees, tree_costs
from synth.errors import SolverError
from synth.topologies import Topology, named_topology
from tests.strategies import random_topologies


def _oracle(topo: Topology, weight: dict[tuple[str, str], float], steps: int | None) -> dict[tuple[int, int], float]:
    """Shortest w-distance per GPU pair with at most ``steps`` GPU arrivals (networkx on an explicit expansion)."""
    g = nx.DiGraph()
    layers = 1 if steps is None else steps + 1
    for lk in topo.live_links:
        for t in range(layers):
            into_gpu = topo.node(lk.dst).is_gpu
            t2 = t if (steps is None or not into_gpu) else t + 1
            if t2 < layers:
                g.add_edge((lk.src, t), (lk.dst, t2), weight=weight[lk.key])
    out = {}
    for s in topo.gpus:
        dist = nx.single_source_dijkstra_path_length(g, (s.id, 0)) if (s.id, 0) in g else {}
        for d in topo.gpus:
            if d.rank != s.rank:
                vals = [dist.get((d.id, t), np.inf) for t in range(layers)]
                out[(s.rank, d.rank)] = min(vals)
    return out


@settings(max_examples=40)
@given(random_topologies(min_gpus=2, max_gpus=5, max_switches=3, allow_down=True))
def test_tree_paths_are_shortest(topo: Topology) -> None:
    net = Network.from_topology(topo)
    rng = np.random.default_rng(len(topo.links))
    w = rng.random(net.n_links)
    m = hop_diameter(net)
    for steps in (m, m + 1, None):
        trees = price_trees(ExpandedGraph.build(net, steps), w, tie_break=1e-12)
        oracle = _oracle(topo, dict(zip(net.link_keys, w.tolist())), steps)
        for (s, d), ref in oracle.items():
            assert trees.pair_cost[s, d] == pytest.approx(ref, rel=1e-9, abs=1e-9)
            if steps is not None:
                assert trees.steps[s, d] <= steps
        assert trees.cost == pytest.approx(trees.pair_cost.sum(axis=1))


def test_unreachable_within_steps_raises() -> None:
    net = Network.from_topology(named_topology("ring:6"))
    with pytest.raises(SolverError, match=r"within max_steps=2 steps"):
        price_trees(ExpandedGraph.build(net, 2), np.ones(net.n_links), tie_break=1e-9)


def test_hop_diameter_of_named_topologies() -> None:
    assert hop_diameter(Network.from_topology(named_topology("hpn:1x2x8"))) == 2
    assert hop_diameter(Network.from_topology(named_topology("nvswitch:4"))) == 1
    assert hop_diameter(Network.from_topology(named_topology("ring:6"))) == 3


@settings(max_examples=40)
@given(random_topologies(min_gpus=2, max_gpus=6, max_switches=4, allow_down=True))
def test_layered_dp_pricing_equals_dijkstra_pricing(topo: Topology) -> None:
    net = Network.from_topology(topo)
    rng = np.random.default_rng(len(topo.links))
    w = rng.random(net.n_links) * (rng.random(net.n_links) < 0.6)  # zero weights: many ties
    m = hop_diameter(net)
    for steps in (m, m + 1):
        graph = ExpandedGraph.build(net, steps)
        dp = price_trees(graph, w, tie_break=1e-9, method="dp")
        ref = price_trees(graph, w, tie_break=1e-9, method="dijkstra")
        np.testing.assert_allclose(dp.pair_cost, ref.pair_cost, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(dp.cost, dp.loads @ w, rtol=1e-12, atol=1e-12)
        assert (dp.steps <= steps).all()
        # Each returned path is a real path with the stated cost and link loads.
        seq = dp.seq
        np.testing.assert_allclose(np.where(seq >= 0, w[np.maximum(seq, 0)], 0.0).sum(axis=0), dp.pair_cost)
        loads = np.zeros_like(dp.loads)
        for i in range(net.n_gpus):
            links = seq[:, i, :][seq[:, i, :] >= 0]
            loads[i] = np.bincount(links, minlength=net.n_links)
        assert (loads == dp.loads).all()


@settings(max_examples=40)
@given(random_topologies(min_gpus=2, max_gpus=6, max_switches=4, allow_down=True))
def test_tree_costs_equal_the_cheapest_trees(topo: Topology) -> None:
    net = Network.from_topology(topo)
    rng = np.random.default_rng(len(topo.links) + 1)
    w = rng.random(net.n_links) * (rng.random(net.n_links) < 0.6)
    m = hop_diameter(net)
    for steps in (m, m + 1, None):
        graph = ExpandedGraph.build(net, steps)
        ref = price_trees(graph, w, tie_break=1e-13, method="dijkstra")
        np.testing.assert_allclose(tree_costs(graph, w), ref.cost, rtol=1e-9, atol=1e-9)
        sub = np.arange(0, net.n_gpus, 2)
        np.testing.assert_allclose(tree_costs(graph, w, sources=sub), ref.cost[sub], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("spec", ["hpn:1x4x8", "hpn:2x2x4", "dgx-a100:2"])
def test_layered_dp_matches_dijkstra_on_named_topologies(spec: str) -> None:
    net = Network.from_topology(named_topology(spec))
    graph = ExpandedGraph.build(net, hop_diameter(net))
    for seed in range(3):
        rng = np.random.default_rng(seed)
        w = rng.random(net.n_links) * (rng.random(net.n_links) < 0.3)
        dp = price_trees(graph, w, tie_break=1e-11, method="dp")
        ref = price_trees(graph, w, tie_break=1e-11, method="dijkstra")
        np.testing.assert_allclose(dp.pair_cost, ref.pair_cost, rtol=1e-12, atol=1e-12)
    # Zero weights: the shortest-hop seed trees tie-break like Dijkstra (last listed in-link).
    zero = np.zeros(net.n_links)
    assert (price_trees(graph, zero, tie_break=1.0).hash1 == price_trees(graph, zero, tie_break=1.0,
                                                                         method="dijkstra").hash1).all()


def test_unreachable_within_steps_raises_for_tree_costs() -> None:
    net = Network.from_topology(named_topology("ring:6"))
    with pytest.raises(SolverError, match=r"within max_steps=2 steps"):
        tree_costs(ExpandedGraph.build(net, 2), np.ones(net.n_links))
