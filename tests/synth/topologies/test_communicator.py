"""Communicators: sub-topologies of participating ranks, and every collective synthesized on them."""

from __future__ import annotations

import os
from fractions import Fraction

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from synth import optimal_bound, synthesize
from synth.baselines import nccl_direct_alltoall, nccl_ring
from synth.errors import SolverError, TopologyError
from synth.result import Status, SynthResult
from synth.schedule import Schedule
from synth.simulation import simulate
from synth.topologies import Topology, communicator, global_ranks, load_topology, named_topology
from tests.strategies import random_topologies
from tests.synth._judged import assert_judged

TREE = ("allgather", "reducescatter", "allreduce")
SETTINGS = settings(max_examples=int(os.environ.get("LOOPCOLL_COMMUNICATOR_EXAMPLES", "25")))


@st.composite
def topology_and_ranks(draw: st.DrawFn, symmetric: bool | None = True) -> tuple[Topology, list[int], bool]:
    """A random topology or a small named spec, a random rank subset (random order) of size >= 2
    whose communicator exists, and whether other GPUs relay."""
    topo = draw(st.one_of(
        random_topologies(min_gpus=3, max_gpus=6, max_switches=3, symmetric=symmetric),
        st.sampled_from(["hpn:1x2x4", "dgx-a100:2", "ring:6", "nvswitch:6", "torus:2x3"]).map(named_topology),
    ), label="topology")
    ranks = draw(st.lists(st.integers(0, topo.nranks - 1), min_size=2, max_size=topo.nranks, unique=True), label="ranks")
    relay = draw(st.booleans(), label="relay")
    try:
        communicator(topo, ranks, relay=relay)
    except TopologyError:
        assume(False)  # the participants cannot reach each other without relays
    return topo, ranks, relay


def assert_uses_only(sched: Schedule, topo: Topology, ranks: list[int], relay: bool) -> None:
    """Every hop starts and ends at participants (mapped to their global GPUs); relays only with ``relay``."""
    sub = communicator(topo, ranks, relay=relay)
    sched.validate(sub)
    assert sched.nranks == len(ranks)
    assert sched.meta["global_ranks"] == ranks
    assert sched.meta["communicator"]["relay"] is relay
    members = {topo.gpu_id(r) for r in ranks}
    others = {g.id for g in topo.gpus} - members
    for route in sched.routes:
        for hop in route.hops:
            assert hop.path[0] == topo.gpu_id(ranks[hop.src]) and hop.path[-1] == topo.gpu_id(ranks[hop.dst])
            inner = set(hop.path[1:-1])
            assert inner.isdisjoint(members)
            if not relay:
                assert inner.isdisjoint(others), f"non-member GPU relays in {hop.path}"


def test_communicator_reranks_in_order_and_records_global_ranks() -> None:
    topo = named_topology("hpn:1x2x8")
    sub = topo.communicator([9, 1, 8, 0])
    assert [g.id for g in sub.gpus] == [topo.gpu_id(r) for r in (9, 1, 8, 0)]
    assert sub.global_ranks == (9, 1, 8, 0) == global_ranks(sub)
    assert sub.meta["communicator"]["parent"] == topo.name
    assert sub.meta["communicator"]["parent_fingerprint"] == topo.fingerprint
    # Relay=False drops every other GPU; only switches on paths between the members stay.
    assert {n.id for n in sub.nodes if not n.is_gpu} <= {n.id for n in topo.switches}
    assert all(lk.src in {n.id for n in sub.nodes} and lk.dst in {n.id for n in sub.nodes} for lk in sub.links)


def test_fingerprint_tells_communicators_apart() -> None:
    topo = named_topology("hpn:1x2x8")
    prints = {
        topo.fingerprint,
        topo.communicator([0, 1]).fingerprint,
        topo.communicator([1, 0]).fingerprint,
        topo.communicator([0, 2]).fingerprint,
        topo.communicator([0, 1], relay=True).fingerprint,
    }
    assert len(prints) == 5
    assert topo.communicator([0, 1]).fingerprint == topo.communicator([0, 1]).fingerprint


def test_nested_communicator_maps_to_original_global_ranks() -> None:
    topo = named_topology("ring:8")
    inner = topo.communicator([7, 6, 5, 4, 3], relay=True).communicator([4, 0])
    assert inner.global_ranks == (3, 7)
    assert inner.meta["communicator"]["parent"] == topo.name


@pytest.mark.parametrize(
    ("ranks", "relay", "culprit"),
    [
        ([0], False, "at least 2 ranks"),
        ([0, 0, 1], False, r"repeat \[0\]"),
        ([0, 99], False, "rank 99 is not a rank"),
        ([0, True], False, "not an integer"),
        ([0, 4], False, "relay=True"),
    ],
)
def test_bad_ranks_raise_naming_the_culprit(ranks: list[int], relay: bool, culprit: str) -> None:
    with pytest.raises(TopologyError, match=culprit):
        communicator(named_topology("ring:8"), ranks, relay=relay)


def test_relay_without_ranks_is_an_error() -> None:
    with pytest.raises(SolverError, match="relay=True needs ranks"):
        synthesize("allgather", named_topology("ring:4"), relay=True)


@SETTINGS
@given(case=topology_and_ranks(), collective=st.sampled_from(TREE))
def test_tree_collective_on_subset_reaches_the_subsets_exact_bound(case: tuple[Topology, list[int], bool],
                                                                    collective: str) -> None:
    topo, ranks, relay = case
    res = synthesize(collective, topo, ranks=ranks, relay=relay, routing="free")  # the free optimum (issue 16)
    sub = communicator(topo, ranks, relay=relay)
    assert res.status is Status.OPTIMAL, res.message
    assert res.schedule is not None
    assert_uses_only(res.schedule, topo, ranks, relay)
    bound = optimal_bound(collective, topo, ranks=ranks, relay=relay)
    assert bound.nranks == len(ranks)
    assert isinstance(bound.rate_GBps, Fraction)
    if collective == "allreduce":  # RS+AG trees may beat the sequential bound (see forestcoll finish)
        assert res.schedule.rate_GBps(sub) >= bound.rate_GBps
    else:
        assert res.schedule.rate_GBps(sub) == bound.rate_GBps
        assert res.gap_pct == 0.0


@SETTINGS
@given(case=topology_and_ranks(symmetric=False), collective=st.sampled_from(TREE))
def test_tree_collective_on_subset_of_asymmetric_fabric_is_valid_within_bound(
        case: tuple[Topology, list[int], bool], collective: str) -> None:
    topo, ranks, relay = case
    res = synthesize(collective, topo, ranks=ranks, relay=relay, routing="free")  # the free optimum (issue 16)
    assert res.schedule is not None, res.message
    assert_uses_only(res.schedule, topo, ranks, relay)
    assert res.optimal_algbw_GBps == pytest.approx(optimal_bound(collective, topo, ranks=ranks, relay=relay).algbw_GBps)
    if collective != "allreduce":
        assert res.algbw_GBps <= res.optimal_algbw_GBps * (1 + 1e-12)


@SETTINGS
@given(case=topology_and_ranks(symmetric=None))
def test_alltoall_on_subset_is_within_its_rounding_gap_of_the_lp_optimum(case: tuple[Topology, list[int], bool]) -> None:
    topo, ranks, relay = case
    res = synthesize("alltoall", topo, ranks=ranks, relay=relay, routing="free")  # the free optimum (issue 16)
    assert_judged(res.status, res.algbw_GBps, res.optimal_algbw_GBps, res.gap_pct, res.message)
    assert res.schedule is not None
    assert_uses_only(res.schedule, topo, ranks, relay)
    lp = optimal_bound("alltoall", topo, ranks=ranks, relay=relay).algbw_GBps
    assert res.optimal_algbw_GBps == pytest.approx(lp, rel=1e-6)
    assert res.algbw_GBps == pytest.approx(res.optimal_algbw_GBps * (1 - res.gap_pct / 100), rel=1e-9)
    assert res.algbw_GBps <= lp * (1 + 1e-6)


@SETTINGS
@given(case=topology_and_ranks(symmetric=None), collective=st.sampled_from(("allgather", "reducescatter",
                                                                             "allreduce", "alltoall")))
def test_relaying_never_lowers_the_bound(case: tuple[Topology, list[int], bool], collective: str) -> None:
    topo, ranks, _ = case
    try:
        alone = optimal_bound(collective, topo, ranks=ranks).algbw_GBps
    except TopologyError:
        assume(False)
    relayed = optimal_bound(collective, topo, ranks=ranks, relay=True).algbw_GBps
    assert relayed >= alone * (1 - 1e-9)


@pytest.mark.parametrize("ranks", [[0, 8], [0, 1, 2, 3], [0, 1, 8, 9], [3, 11, 7, 15]])
def test_named_rail_and_host_groups_baselines_and_simulation(ranks: list[int]) -> None:
    """Rail groups, host groups and mixed groups of hpn:1x2x8: baselines validate on the
    communicator, never beat its bound, and the simulator runs its schedule."""
    topo = named_topology("hpn:1x2x8")
    sub = topo.communicator(ranks)
    for collective in ("allgather", "alltoall"):
        base = nccl_direct_alltoall(sub) if collective == "alltoall" else nccl_ring(collective, sub)
        base.validate(sub)
        assert base.meta["global_ranks"] == ranks
        bound = optimal_bound(collective, sub).algbw_GBps
        assert base.algbw_GBps(sub) <= bound * (1 + 1e-9)
        res = synthesize(collective, sub)
        assert res.schedule is not None
        sim = simulate(res.schedule, sub, 1 << 26)
        assert 0 < sim.algbw_GBps <= bound * (1 + 1e-9)


@pytest.mark.parametrize(("ranks", "failure", "mode"), [
    ([0, 1, 2, 3, 8, 9, 10, 11], "fail1", "repair"),
    ([0, 8, 1, 9], "fail1", "repair"),
    # After fail2 the subset's optimum needs 3-hop paths (a peer GPU relays rank 0's traffic),
    # beyond the previous 2-step pool: the repair is not certified and warm CG runs instead.
    ([0, 1, 2, 3, 8, 9, 10, 11], "fail2", "state"),
])
def test_alltoall_warm_start_on_a_communicator(ranks: list[int], failure: str, mode: str) -> None:
    """The controller's call: re-synthesize on the degraded fabric's communicator, warm from the
    previous result; the certified repair applies where it can and equals the cold LP optimum."""
    healthy = load_topology("hpn:1x2x8")
    degraded = load_topology("hpn:1x2x8", [failure])
    prev = synthesize("alltoall", healthy.communicator(ranks))
    warm = synthesize("alltoall", degraded.communicator(ranks), warm_from=prev)
    cold = synthesize("alltoall", degraded, ranks=ranks)
    assert isinstance(warm, SynthResult) and warm.warm and warm.figures.warm_mode == mode
    assert warm.optimal_algbw_GBps == pytest.approx(cold.optimal_algbw_GBps, rel=1e-6)
    assert warm.schedule is not None
    assert_uses_only(warm.schedule, degraded, ranks, False)


def test_tree_warm_start_on_a_communicator_keeps_the_optimum() -> None:
    ranks = [0, 1, 2, 3, 8, 9, 10, 11]
    prev = synthesize("allgather", load_topology("hpn:1x2x8"), ranks=ranks)
    degraded = load_topology("hpn:1x2x8", ["fail2"])
    warm = synthesize("allgather", degraded, ranks=ranks, warm_from=prev)
    assert warm.warm and warm.gap_pct == 0.0
    assert warm.schedule is not None
    assert warm.schedule.rate_GBps(degraded.communicator(ranks)) == optimal_bound("allgather", degraded,
                                                                                  ranks=ranks).rate_GBps
