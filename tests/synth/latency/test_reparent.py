"""Leaf reparenting of the greedy pricing trees (issue 31: depth-bounded column generation stalled
on healthy hpn fabrics because the greedy trees were poor columns)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from synth import load_topology
from synth.latency import synthesize_depth_bounded
from synth.latency._pricing import greedy_trees, reparent_leaves


def _depths(parent: np.ndarray, order: np.ndarray) -> dict[int, int]:
    depth = {int(order[0]): 0}
    for v in order[1:].tolist():
        assert int(parent[v]) in depth, "parents come first in the order"
        depth[v] = depth[int(parent[v])] + 1
    return depth


@settings(max_examples=60, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 24), d=st.integers(1, 4), mode=st.sampled_from(["prim", "spt"]))
def test_reparented_trees_stay_spanning_within_the_depth_and_never_cost_more(seed: int, n: int, d: int, mode: str) -> None:
    rng = np.random.default_rng(seed)
    cost = rng.lognormal(0.0, 0.7, (n, n)) * np.where(rng.random((n, n)) < 0.1, 20.0, 1.0)  # 10 % outliers
    cost[rng.random((n, n)) < 0.2] = np.inf
    np.fill_diagonal(cost, np.inf)
    roots = np.arange(n)
    parent, order, ok = greedy_trees(cost, roots, d, mode)
    new_parent, new_order = reparent_leaves(cost, parent, order, ok, d)
    for r in np.flatnonzero(ok).tolist():
        assert new_order[r][0] == r and sorted(new_order[r].tolist()) == list(range(n))
        depth = _depths(new_parent[r], new_order[r])
        assert max(depth.values()) <= d
        before = sum(cost[parent[r, v], v] for v in range(n) if v != r)
        after = sum(cost[new_parent[r, v], v] for v in range(n) if v != r)
        assert after <= before * (1 + 1e-12)
    for r in np.flatnonzero(~ok).tolist():
        assert (new_parent[r] == parent[r]).all()


def test_depth_two_column_generation_reaches_the_unbounded_optimum_on_hpn() -> None:
    # Before the reparenting: 41 iterations, LP 369.03 GB/s, certified gap 12.8 % (hpn:1x4x8, D = 2).
    r = synthesize_depth_bounded("allgather", load_topology("hpn:1x4x8"), 2)
    assert r.figures.depth <= 2
    assert r.figures.lp_algbw_GBps >= r.figures.unbounded_optimal_algbw_GBps * (1 - 1e-6)
    assert r.figures.lp_gap_pct <= 1e-6
    assert r.figures.lp.iterations <= 20
    assert r.algbw_GBps <= r.optimal_algbw_GBps * (1 + 1e-9)
