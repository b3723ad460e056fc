"""Contention scenarios in the flow simulator: patterns per iteration, residual capacities, slow-downs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from synth.baselines import nccl_ring
from synth.errors import TopologyError
from synth.simulation import simulate
from synth.simulation.contention import (
    MAX_LOAD,
    BackgroundFlow,
    ContentionScenario,
    erratic,
    leaf_spine,
    microbursts,
    nic_links,
    spine_links,
    sustained,
)


@given(start=st.integers(0, 20), on=st.integers(1, 5), off=st.integers(0, 5), stop=st.none() | st.integers(20, 60),
       load=st.floats(0.0, MAX_LOAD))
def test_on_off_pattern(start: int, on: int, off: int, stop: int | None, load: float) -> None:
    f = BackgroundFlow((("a", "b"),), load, start, stop, on=on, off=off)
    for it in range(80):
        expect = it >= start and (stop is None or it < stop) and (it - start) % (on + off) < on
        assert f.active(it) == expect
        assert f.links_at(it) == ((("a", "b"),) if expect else ())


@given(seed=st.integers(0, 1000), k=st.integers(1, 3))
def test_erratic_moves_deterministically(seed: int, k: int) -> None:
    topo = leaf_spine(8, 4)
    sc = erratic(spine_links(topo), 0.8, per_epoch=k, seed=seed)
    picks = [tuple(sc.loads_at(it)) for it in range(30)]
    assert all(len(p) == k for p in picks)
    assert picks == [tuple(sc.loads_at(it)) for it in range(30)]  # deterministic
    assert len(set(picks)) > 1  # it moves


def test_residual_capacity_and_stacking() -> None:
    topo = leaf_spine(4, 2)
    link = nic_links(topo, 1)[0]
    two = ContentionScenario("two", (BackgroundFlow((link,), 0.5), BackgroundFlow((link,), 0.7)))
    assert two.loads_at(0) == {link: MAX_LOAD}
    t = two.topology_at(topo, 0)
    for a, b in (link, link[::-1]):
        assert t.link(a, b).gbps == pytest.approx(topo.link(a, b).gbps * (1 - MAX_LOAD))
    assert sustained([link], 0.5, start=5).topology_at(topo, 4) is topo


@given(load=st.floats(0.05, 0.9))
def test_contended_nic_slows_ring_by_residual_share(load: float) -> None:
    """A ring's bandwidth term scales with the bottleneck's residual capacity 1 − load exactly."""
    topo = leaf_spine(8, 4)
    ring = nccl_ring("allgather", topo)
    t = sustained(nic_links(topo, 3), load).topology_at(topo, 0)
    assert ring.algbw_GBps(t) == pytest.approx(ring.algbw_GBps(topo) * (1 - load), rel=1e-9)
    assert simulate(ring, t, 1 << 26).algbw_GBps <= simulate(ring, topo, 1 << 26).algbw_GBps * (1 - load) * 1.0001


def test_microbursts_are_transient_only() -> None:
    mb = microbursts([("gpu0", "leaf0")], 0.9, length=2, every=7, start=3)
    on = [it for it in range(40) if mb.loads_at(it)]
    assert on == [3, 4, 10, 11, 17, 18, 24, 25, 31, 32, 38, 39]


def test_bad_scenarios_raise() -> None:
    topo = leaf_spine(4, 2)
    with pytest.raises(TopologyError, match="load"):
        sustained([("gpu0", "leaf0")], 0.99)
    with pytest.raises(TopologyError, match="every"):
        microbursts([("gpu0", "leaf0")], 0.5, length=3, every=3)
    with pytest.raises(TopologyError, match="no link"):
        sustained([("gpu0", "spine")], 0.5).topology_at(topo, 0)
    with pytest.raises(TopologyError, match="moves over"):
        BackgroundFlow((("a", "b"),), 0.5, moving=2)
    with pytest.raises(TopologyError, match="divisible"):
        leaf_spine(5, 2)
