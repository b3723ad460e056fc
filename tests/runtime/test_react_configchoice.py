"""REACT congestion detection from FCTs and the configuration chooser's bounded exploration."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.contention.configchoice import ConfigChooser, contention_bucket
from runtime.errors import ProfileError, TelemetryError
from runtime.contention.react import detect_congestion, flows_from_transfers
from runtime.contention.transforms import double_tree
from synth.baselines import nccl_ring
from synth.simulation import simulate_transfers
from synth.simulation.contention import erratic, leaf_spine, nic_links, spine_links, sustained


def _flows(n: int) -> dict:
    return {(i, 0): (i, (i + 1) % n, 100.0) for i in range(n)}


@given(n=st.integers(4, 10), epochs=st.integers(4, 12), slow=st.floats(2.0, 10.0), seed=st.integers(0, 10**6))
def test_definitions_by_hand(n: int, epochs: int, slow: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    fct = {k: list(1.0 + 0.01 * rng.random(epochs)) for k in _flows(n)}
    fct[(0, 0)] = [slow * x for x in fct[(0, 0)]]  # slow in every epoch: steady
    fct[(2, 0)] = [x * (slow if e % 2 else 1.0) for e, x in enumerate(fct[(2, 0)])]  # every other epoch: erratic
    rep = detect_congestion(_flows(n), fct)
    assert rep.steady == ((0, 0),)
    assert rep.erratic == ((2, 0),)
    assert set(rep.congested_ranks) == {0, 1, 2, 3}
    assert rep.steady_nodes == ()  # rank 0 also receives over the healthy flow (n-1) -> 0


def test_steady_node_and_errors() -> None:
    flows = {(0, 0): (0, 1, 1.0), (1, 0): (2, 3, 1.0), (2, 0): (4, 5, 1.0), (3, 0): (6, 7, 1.0)}
    fct = {(0, 0): [5.0, 5.0], (1, 0): [1.0, 1.0], (2, 0): [1.0, 1.0], (3, 0): [1.0, 1.0]}
    assert detect_congestion(flows, fct).steady_nodes == (0, 1)
    with pytest.raises(TelemetryError, match="exactly"):
        detect_congestion(flows, {(0, 0): [1.0]})
    with pytest.raises(TelemetryError, match="same number"):
        detect_congestion(flows, {**fct, (0, 0): [1.0]})
    with pytest.raises(TelemetryError, match="delta1"):
        detect_congestion(flows, fct, delta1=1.5)


@pytest.mark.parametrize("pattern", ["ring", "tree"])
def test_simulated_steady_vs_erratic(pattern: str) -> None:
    topo = leaf_spine(8, 4)
    sched = nccl_ring("allreduce", topo) if pattern == "ring" else double_tree("allreduce", topo)
    steady = sustained(nic_links(topo, 3), 0.8)
    eps = [simulate_transfers(sched, steady.topology_at(topo, i), 1 << 24, slices_per_chunk=1) for i in range(4)]
    rep = detect_congestion(*flows_from_transfers(eps))
    assert rep.congested_ranks[0] == 3 and rep.steady and not rep.erratic and 3 in rep.steady_nodes
    moving = erratic(spine_links(topo), 0.8, seed=1)
    eps = [simulate_transfers(sched, moving.topology_at(topo, i), 1 << 24, slices_per_chunk=1) for i in range(6)]
    rep = detect_congestion(*flows_from_transfers(eps))
    assert len(rep.erratic) > len(rep.steady)


@given(budget=st.floats(0.0, 0.3), seed=st.integers(0, 10**6), calls=st.integers(20, 200))
def test_exploration_never_exceeds_budget(budget: float, seed: int, calls: int) -> None:
    rng = np.random.default_rng(seed)
    names = ["a", "b", "c", "d"]
    true = dict(zip(names, rng.uniform(1.0, 5.0, 4)))
    ch = ConfigChooser(names, budget=budget, warm_calls=1)
    ctxs = ["x", "y"]
    for i in range(calls):
        ctx = ctxs[i % 2]
        c = ch.choose(ctx, current="a")
        ch.record(ctx, c, float(true[c.name] * (1 + 0.01 * rng.standard_normal())))
        # within budget, except for one exploration that turned out worse than its assumed worst case
        assert ch.explore_excess_s <= budget * ch.total_s + max(true.values()) * 1.05
    if all(t <= 3.0 * min(true.values()) for t in true.values()):  # outcomes within max_slowdown: hard bound
        assert ch.explore_excess_s <= budget * ch.total_s * 1.05 + 1e-9


def test_chooser_finds_the_best_with_priors_and_exploits_it() -> None:
    ch = ConfigChooser(["ring", "tree", "loopcoll"], budget=0.1, warm_calls=1)
    ctx = ("allreduce", contention_bucket(5.0))
    prior = {"ring": 1.6, "tree": 2.5, "loopcoll": 1.5}
    first = ch.choose(ctx, prior_s=prior, current="ring")
    assert first.name == "loopcoll" and not first.explore
    truth = {"ring": 1.2, "tree": 2.5, "loopcoll": 1.7}  # loopcoll measures worse than its prior, ring better
    cur = first
    for _ in range(40):
        ch.record(ctx, cur, truth[cur.name])
        cur = ch.choose(ctx, prior_s=prior, current=cur.name)
    assert cur.name == "ring" and not cur.explore
    assert ch.best(ctx) == ("ring", pytest.approx(1.2))
    assert ("allreduce", 5.04) == ctx


def test_chooser_errors() -> None:
    with pytest.raises(ProfileError, match="distinct"):
        ConfigChooser(["a", "a"])
    with pytest.raises(ProfileError, match="budget"):
        ConfigChooser(["a"], budget=-1)
    ch = ConfigChooser(["a"])
    with pytest.raises(ProfileError, match="unknown candidate"):
        ch.record("x", "b", 1.0)
    with pytest.raises(ProfileError, match="> 0"):
        ch.record("x", "a", 0.0)
    with pytest.raises(ProfileError, match="rho"):
        contention_bucket(-1.0)
