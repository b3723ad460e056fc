"""Certified local repair (warm_mode "repair"): same LP optimum as cold, local work, safe fallbacks."""

from __future__ import annotations

from itertools import chain

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from synth.alltoall_cg import synthesize_alltoall
from synth.alltoall_cg._expanded import ExpandedGraph, Network
from synth.alltoall_cg._pricing import condensed_shortest, free_shortest, price_pairs, price_trees, reversed_network
from synth.alltoall_cg._repair import _Cuts
from synth.errors import SolverError, TopologyError
from synth.topologies import Topology, load_topology
from tests.strategies import random_topologies
from tests.synth.alltoall_cg._helpers import assert_valid_alltoall


def _same_lp(a: float, b: float, rel: float = 1e-9) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b))


@pytest.mark.parametrize("spec", ["hpn:1x4x8", "hpn:2x2x4", "dgx-a100:2"])
@pytest.mark.parametrize("failure", ["fail1", "fail2", "fail3"])
def test_repair_or_fallback_reaches_the_cold_lp_optimum(spec: str, failure: str) -> None:
    prev = synthesize_alltoall(load_topology(spec))
    topo = load_topology(spec, [failure])
    cold = synthesize_alltoall(topo)
    warm = synthesize_alltoall(topo, warm_start=prev)
    assert warm.figures.warm_mode in ("repair", "state")
    assert _same_lp(warm.figures.lp_algbw_GBps, cold.figures.lp_algbw_GBps)
    assert warm.optimal_algbw_GBps == pytest.approx(cold.optimal_algbw_GBps, rel=1e-9)
    assert_valid_alltoall(warm, topo, 10)
    assert warm.figures.gap <= 0.01


@pytest.mark.parametrize("failure", ["fail1", "fail2", "fail3"])
def test_repair_is_taken_on_hpn_and_keeps_untouched_routes(failure: str) -> None:
    spec = "hpn:1x4x8"
    prev = synthesize_alltoall(load_topology(spec))
    topo = load_topology(spec, [failure])
    warm = synthesize_alltoall(topo, warm_start=prev)
    assert warm.figures.warm_mode == "repair", warm.message
    assert "local repair" in warm.message
    n = topo.nranks
    assert 0 < warm.figures.repaired_blocks < n * (n - 1) // 2
    assert prev.schedule is not None and warm.schedule is not None
    old = {id(r) for r in prev.schedule.routes}
    moved = {(r.root, r.dest) for r in warm.schedule.routes if id(r) not in old}
    # Only blocks whose previous routes touched rank 0 (whose links degraded) get new route
    # objects; every other route is the very object of the previous schedule.
    near_rank0 = {(r.root, r.dest) for r in prev.schedule.routes if any(0 in (h.src, h.dst) for h in r.hops)}
    assert moved and moved <= near_rank0
    assert len(moved) <= warm.figures.repaired_blocks
    assert warm.schedule.meta["lp_algbw_GBps"] == warm.figures.lp_algbw_GBps
    assert warm.schedule.meta["topology"] == topo.name
    # The state for the next repair holds exactly the schedule returned.
    assert warm.warm_state is not None and warm.warm_state.rounded is not None
    assert warm.warm_state.rounded.schedule is warm.schedule


def test_chained_repairs_then_recovery() -> None:
    spec = "hpn:1x4x8"
    healthy = load_topology(spec)
    prev = synthesize_alltoall(healthy)
    one = synthesize_alltoall(load_topology(spec, ["fail2"]), warm_start=prev)
    assert one.figures.warm_mode == "repair"
    two_topo = load_topology(spec, ["fail2", "fail1"])
    two = synthesize_alltoall(two_topo, warm_start=one)
    assert two.figures.warm_mode == "repair", two.message
    assert _same_lp(two.figures.lp_algbw_GBps, synthesize_alltoall(two_topo).figures.lp_algbw_GBps)
    assert_valid_alltoall(two, two_topo, 10)
    # A capacity coming back can help every block: the full warm column generation runs.
    back = synthesize_alltoall(healthy, warm_start=two)
    assert back.figures.warm_mode == "state"
    assert _same_lp(back.figures.lp_algbw_GBps, prev.figures.lp_algbw_GBps)
    assert_valid_alltoall(back, healthy, 10)


def test_uncertified_repair_falls_back_to_full_warm_cg() -> None:
    # fail3 on hpn:1x2x8 needs 3 GPU hops; the repair keeps the previous 2, so its LP value is
    # above the unbounded Farley bound and must not be used.
    prev = synthesize_alltoall(load_topology("hpn:1x2x8"))
    topo = load_topology("hpn:1x2x8", ["fail3"])
    warm = synthesize_alltoall(topo, warm_start=prev)
    assert warm.figures.warm_mode == "state"
    assert warm.figures.max_steps == 3
    assert _same_lp(warm.figures.lp_algbw_GBps, synthesize_alltoall(topo).figures.lp_algbw_GBps)


def _core_degraded(spec: str, factor: float) -> tuple[Topology, Topology, tuple[str, str]]:
    base = load_topology(spec)
    up = next(lk for lk in base.links if lk.src.startswith("tor") and lk.dst.startswith("agg"))
    return base, base.scaled(up.src, up.dst, factor), up.key


def test_uncertified_repair_grows_over_binding_links() -> None:
    # A ToR uplink at half speed: the blocks routed over it alone cannot absorb the change (the
    # optimum re-balances their neighbours), so the repair frees the blocks on the links its LP
    # found binding and is certified after growing.
    base, topo, key = _core_degraded("hpn:2x2x4", 0.5)
    prev = synthesize_alltoall(base)
    assert prev.schedule is not None
    crossing = {(r.root, r.dest) for r in prev.schedule.routes for h in r.hops
                if any(lk in (key, key[::-1]) for lk in h.links)}
    warm = synthesize_alltoall(topo, warm_start=prev)
    assert warm.figures.warm_mode == "repair", warm.message
    assert warm.figures.repaired_blocks > len(crossing)
    assert _same_lp(warm.figures.lp_algbw_GBps, synthesize_alltoall(topo).figures.lp_algbw_GBps)
    assert_valid_alltoall(warm, topo, 10)


def test_repair_that_would_touch_too_many_blocks_is_left_to_the_full_cg() -> None:
    base, topo, _ = _core_degraded("hpn:2x4x8", 0.5)
    prev = synthesize_alltoall(base)
    warm = synthesize_alltoall(topo, warm_start=prev)
    assert warm.figures.warm_mode == "state"
    assert _same_lp(warm.figures.lp_algbw_GBps, synthesize_alltoall(topo).figures.lp_algbw_GBps)


def test_balanced_rounding_spares_the_dive_on_a_degraded_core() -> None:
    # Many blocks split over the uplinks: largest remainder stacks their extra chunks, the
    # load-aware greedy does not, and no dive (LP re-solves) is needed to stay within 0.5 %.
    _, topo, _ = _core_degraded("hpn:2x4x8", 0.5)
    res = synthesize_alltoall(topo)
    assert not res.figures.dived and res.figures.dive_lp_solves == 0
    assert res.figures.gap <= 0.005
    assert_valid_alltoall(res, topo, 10)


def test_dead_link_is_repaired_around() -> None:
    base = load_topology("hpn:1x4x8")
    dead = base.scaled("gpu1", "tor0.1", 0.0)
    prev = synthesize_alltoall(base)
    warm = synthesize_alltoall(dead, warm_start=prev)
    assert_valid_alltoall(warm, dead, 10)  # validation rejects routes over a dead link
    assert _same_lp(warm.figures.lp_algbw_GBps, synthesize_alltoall(dead).figures.lp_algbw_GBps)


def test_repair_applies_only_to_the_same_request() -> None:
    spec = "hpn:1x2x8"
    prev = synthesize_alltoall(load_topology(spec))
    topo = load_topology(spec, ["fail2"])
    steps = prev.figures.max_steps
    assert synthesize_alltoall(topo, warm_start=prev, max_steps=steps).figures.warm_mode == "repair"
    assert synthesize_alltoall(topo, warm_start=prev, max_steps=steps + 1).figures.warm_mode == "state"
    assert synthesize_alltoall(topo, warm_start=prev, nchunks=4).figures.warm_mode == "state"
    assert synthesize_alltoall(topo, warm_start=prev, local_repair=False).figures.warm_mode == "state"


@st.composite
def _degraded(draw: st.DrawFn) -> tuple[Topology, Topology]:
    topo = draw(random_topologies(min_gpus=3, max_gpus=6, max_switches=2, allow_down=False))
    live = [lk for lk in topo.links if lk.gbps > 0]
    picks = draw(st.lists(st.sampled_from(live), min_size=1, max_size=3, unique_by=lambda lk: lk.key))
    out = topo
    for lk in picks:
        try:
            out = out.scaled(lk.src, lk.dst, draw(st.sampled_from([0.0, 0.1, 0.5, 0.9])))
        except TopologyError:
            assume(False)  # the drop cuts some GPU off
    return topo, out


@settings(max_examples=40, deadline=None)
@given(_degraded())
def test_warm_after_capacity_drops_equals_cold_on_random_topologies(pair: tuple[Topology, Topology]) -> None:
    base, degraded = pair
    prev = synthesize_alltoall(base, nchunks=4)
    try:
        cold = synthesize_alltoall(degraded, nchunks=4)
    except SolverError:
        assume(False)  # the drops cut some GPU off: nothing to compare
        return
    warm = synthesize_alltoall(degraded, nchunks=4, warm_start=prev)
    assert _same_lp(warm.figures.lp_algbw_GBps, cold.figures.lp_algbw_GBps, rel=1e-6), warm.message
    assert_valid_alltoall(warm, degraded, 4)


@settings(max_examples=40, deadline=None)
@given(random_topologies(min_gpus=2, max_gpus=6, max_switches=3), st.integers(0, 2**32 - 1), st.booleans())
def test_condensed_distances_equal_bellman_ford(topo: Topology, seed: int, sparse: bool) -> None:
    net = Network.from_topology(topo)
    rng = np.random.default_rng(seed)
    w = rng.random(net.n_links) * (rng.random(net.n_links) < (0.2 if sparse else 1.0))
    got = condensed_shortest(net, w, net.gpu_node)
    assert got is not None
    want = free_shortest(ExpandedGraph.build(net, None), w, net.gpu_node)
    assert np.array_equal(np.isinf(got), np.isinf(want))
    assert np.allclose(got[np.isfinite(want)], want[np.isfinite(want)], rtol=1e-12, atol=0)


def _reference_hashes(links: list[int]) -> tuple[int, int]:
    """The pool's two 64-bit rolling hashes, in plain integers, links taken from the destination back."""
    mask = (1 << 64) - 1
    h1 = h2 = 0
    for lk in reversed(links):
        v = lk + 1
        h1 = (h1 * 0x9E3779B97F4A7C15 + v) & mask
        h2 = (((h2 ^ v) * 0xC2B2AE3D27D4EB4F) + 1) & mask
    return h1, h2


@pytest.mark.parametrize("steps", [2, 3, None])
def test_pair_pricing_matches_tree_pricing(steps: int | None) -> None:
    net = Network.from_topology(load_topology("hpn:1x2x8", ["fail2"]))
    graph, rev = ExpandedGraph.build(net, steps), ExpandedGraph.build(reversed_network(net), steps)
    w = np.random.default_rng(0).random(net.n_links)
    n = net.n_gpus
    src = np.r_[np.zeros(n - 1, int), np.arange(1, n), [3, 4]]
    dst = np.r_[np.arange(1, n), np.zeros(n - 1, int), [5, 9]]
    pp = price_pairs(graph, rev, w, src, dst, tie_break=1e-9)
    trees = price_trees(graph, w, tie_break=1e-9)
    assert np.allclose(pp.cost, trees.pair_cost[src, dst])
    assert (pp.steps == trees.steps[src, dst]).all()
    for i in range(len(src)):
        links = pp.links(i)
        assert net.tail[links[0]] == net.gpu_node[src[i]] and net.head[links[-1]] == net.gpu_node[dst[i]]
        assert (net.head[links[:-1]] == net.tail[links[1:]]).all()
        assert _reference_hashes(links.tolist()) == (int(pp.hash1[i]), int(pp.hash2[i]))  # the pool's path identity


def test_splice_replaces_exactly_the_touched_blocks() -> None:
    old = tuple(f"o{i}" for i in range(10))
    old_block = np.array([0, 0, 1, 2, 2, 2, 5, 6, 6, 9])
    cuts = _Cuts.of(old_block, np.array([2, 6, 7]), np.array([2, 6, 7]))
    spliced = tuple(chain.from_iterable(cuts.pieces(old, ("n0", "n1", "n2"))))
    assert spliced == ("o0", "o1", "o2", "n0", "o6", "n1", "n2", "o9")
    ids = np.concatenate(cuts.pieces(np.arange(10), np.arange(10, 13)))
    assert ids.tolist() == [0, 1, 2, 10, 6, 11, 12, 9]
