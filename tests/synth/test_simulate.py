"""Tests of synth/simulation: exact closed forms, bandwidth-term limits, dependencies, validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import synth.simulation
from synth.baselines import nccl_direct_alltoall, nccl_ring
from synth.errors import ScheduleError
from synth.schedule import Hop, Route, RouteKind, Schedule
from synth.simulation import SimResult, simulate, simulate_sweep
from synth.simulation._maxmin import maxmin_rates
from synth.topologies import Link, Node, NodeKind, Topology, named_topology
from tests.strategies import random_topologies

GB = 1 << 30


# -- helpers ---------------------------------------------------------------------------------
def _ring_topology(n: int, gbps: float, latency_us: float) -> Topology:
    nodes = [Node(f"gpu{r}", NodeKind.GPU, r, 0) for r in range(n)]
    links = []
    for r in range(n):
        a, b = f"gpu{r}", f"gpu{(r + 1) % n}"
        links += [Link(a, b, gbps, latency_us), Link(b, a, gbps, latency_us)]
    return Topology.create(f"test-ring-{n}", nodes, links)


def _hop(a: int, b: int) -> Hop:
    return Hop(a, b, (f"gpu{a}", f"gpu{b}"))


def _one_way_ring(collective: str, n: int, chunks: int = 1) -> Schedule:
    """Every root's data travels the ring r -> r+1 -> ... (reductions end at r)."""
    routes = []
    for r in range(n):
        chain = [(r + i) % n for i in range(n)]
        if collective == "allgather":
            hops = tuple(_hop(chain[i], chain[i + 1]) for i in range(n - 1))
            routes.append(Route(RouteKind.OUT_TREE, r, chunks, hops))
        else:
            red = [*chain[1:], r]
            hops = tuple(_hop(red[i], red[i + 1]) for i in range(n - 1))
            routes.append(Route(RouteKind.IN_TREE, r, chunks, hops))
    return Schedule(collective, n, chunks, tuple(routes))


def _point_to_point(topo: Topology, path01: tuple[str, ...], path10: tuple[str, ...], nchunks: int = 1) -> Schedule:
    routes = (
        Route(RouteKind.PATH, 0, nchunks, (Hop(0, 1, path01),), dest=1),
        Route(RouteKind.PATH, 1, nchunks, (Hop(1, 0, path10),), dest=0),
    )
    return Schedule("alltoall", 2, nchunks, routes)


def _star_reducescatter(n: int) -> Schedule:
    """In-trees on nvswitch:n: leaves -> rank (r+1) -> root r, a two-level reduction."""
    routes = []
    for r in range(n):
        mid = (r + 1) % n
        leaves = [x for x in range(n) if x not in (r, mid)]
        hops = tuple(Hop(x, mid, (f"gpu{x}", "nvs0.0", f"gpu{mid}")) for x in leaves)
        hops += (Hop(mid, r, (f"gpu{mid}", "nvs0.0", f"gpu{r}")),)
        routes.append(Route(RouteKind.IN_TREE, r, 1, hops))
    return Schedule("reducescatter", n, 1, tuple(routes))


def _assert_close_to_bandwidth_term(res: SimResult, *, within: float = 0.05) -> None:
    ratio = res.algbw_GBps / res.bandwidth_term_algbw_GBps
    assert ratio <= 1.0 + 1e-9, res.message
    assert ratio >= 1.0 - within, res.message


# -- API ---------------------------------------------------------------------------------------
def test_public_names_are_pinned() -> None:
    assert synth.simulation.__all__ == ["IDEAL", "CostProfile", "ExecutorCost", "SimResult", "SimStatus", "Transfer",
                                       "TransferTimes", "auto_slices", "executor_for", "load_profile", "simulate",
                                       "simulate_sweep", "simulate_transfers"]


# -- exact single transfers ------------------------------------------------------------------
@pytest.mark.parametrize("spc", [1, 4, 7])
@pytest.mark.parametrize("nbytes", [1.0, 3e5, 1e9])
def test_single_transfer_takes_latency_plus_size_over_capacity(spc: int, nbytes: float) -> None:
    topo = named_topology("ring:2")  # 50 GB/s, 0.5 us each way
    res = simulate(_point_to_point(topo, ("gpu0", "gpu1"), ("gpu1", "gpu0")), topo, nbytes, slices_per_chunk=spc)
    block_bytes = nbytes / 2
    assert res.time_s == pytest.approx(0.5e-6 + block_bytes / 50e9, rel=1e-9)
    util = res.link_utilization[("gpu0", "gpu1")]
    assert util == pytest.approx((block_bytes / 50e9) / res.time_s, rel=1e-9)


def test_transfer_through_a_switch_adds_latencies_and_takes_the_slowest_link() -> None:
    nodes = [Node("gpu0", NodeKind.GPU, 0, 0), Node("gpu1", NodeKind.GPU, 1, 1), Node("sw", NodeKind.SWITCH)]
    links = [Link("gpu0", "sw", 800.0, 0.3), Link("sw", "gpu1", 200.0, 0.7),
             Link("gpu1", "sw", 800.0, 0.3), Link("sw", "gpu0", 800.0, 0.7)]
    topo = Topology.create("test-switch", nodes, links)
    sched = _point_to_point(topo, ("gpu0", "sw", "gpu1"), ("gpu1", "sw", "gpu0"), nchunks=3)
    res = simulate(sched, topo, 6e6, slices_per_chunk=5)
    # Slowest direction: 3 MB at 25 GB/s plus 1.0 us of latency.
    assert res.time_s == pytest.approx(1.0e-6 + 3e6 / 25e9, rel=1e-9)


# -- ring AllGather closed forms ------------------------------------------------------------------
@pytest.mark.parametrize("n", [3, 5, 8])
@pytest.mark.parametrize("spc", [1, 4])
def test_ring_allgather_without_latency_keeps_every_link_busy(n: int, spc: int) -> None:
    # With L = 0 no link of a one-way ring ever idles (each hop's input is its upstream
    # neighbour's output), so T = (N-1) S / (N C): the bandwidth term, for any slicing.
    topo = _ring_topology(n, 400.0, 0.0)
    nbytes = 1e8
    res = simulate(_one_way_ring("allgather", n), topo, nbytes, slices_per_chunk=spc)
    assert res.time_s == pytest.approx((n - 1) * nbytes / (n * 50e9), rel=1e-9)
    assert res.algbw_GBps == pytest.approx(res.bandwidth_term_algbw_GBps, rel=1e-9)


@pytest.mark.parametrize("n", [3, 6, 8])
@pytest.mark.parametrize(("chunks", "spc"), [(1, 1), (1, 4), (2, 3)])
def test_ring_allgather_latency_bound_store_and_forward(n: int, chunks: int, spc: int) -> None:
    # Latency-bound regime, L >= (m - 1) s / C with m = chunks * spc slices per hop: the hops on
    # one link never overlap, hop d starts at d (s/C + L), and the last slice lands at
    #     T = (N - 1) L + (N - 2 + m) s / C.
    topo = named_topology(f"ring:{n}")  # 50 GB/s, 0.5 us
    lat_s, cap = 0.5e-6, 50e9
    m = chunks * spc
    slice_bytes = 2000.0
    assert lat_s >= (m - 1) * slice_bytes / cap
    nbytes = slice_bytes * n * chunks * spc
    res = simulate(_one_way_ring("allgather", n, chunks), topo, nbytes, slices_per_chunk=spc)
    assert res.time_s == pytest.approx((n - 1) * lat_s + (n - 2 + m) * slice_bytes / cap, rel=1e-9)


@pytest.mark.parametrize("n", [4, 7])
def test_ring_reducescatter_mirrors_ring_allgather(n: int) -> None:
    topo = named_topology(f"ring:{n}")
    for nbytes in (1e4, 1e7):
        ag = simulate(_one_way_ring("allgather", n), topo, nbytes)
        rs = simulate(_one_way_ring("reducescatter", n), topo, nbytes)
        assert rs.time_s == pytest.approx(ag.time_s, rel=1e-9)


def test_allreduce_broadcast_waits_for_the_reduction() -> None:
    # 2 ranks, one slice per chunk of c = S/2 bytes: root 0's reduction crosses 1->0 (L + c/C)
    # and only then its broadcast crosses 0->1 (c/C + L): T = 2L + S/C.
    topo = named_topology("ring:2")
    routes = tuple(
        route
        for r in (0, 1)
        for route in (
            Route(RouteKind.IN_TREE, r, 1, (_hop(1 - r, r),)),
            Route(RouteKind.OUT_TREE, r, 1, (_hop(r, 1 - r),)),
        )
    )
    sched = Schedule("allreduce", 2, 1, routes)
    res = simulate(sched, topo, 1e6, slices_per_chunk=1)
    assert res.time_s == pytest.approx(2 * 0.5e-6 + 1e6 / 50e9, rel=1e-9)
    assert res.busbw_GBps == pytest.approx(res.algbw_GBps * 2 * (2 - 1) / 2)


# -- large messages reach, and never beat, the bandwidth term ------------------------------------
def _large_message_cases() -> list[tuple[str, Schedule, Topology]]:
    cases = []
    for spec in ("ring:8", "nvswitch:8"):
        topo = named_topology(spec)
        cases.append((f"ring-allgather-{spec}", nccl_ring("allgather", topo), topo))
    for spec in ("nvswitch:8", "hpn:1x2x8"):
        topo = named_topology(spec)
        cases.append((f"direct-alltoall-{spec}", nccl_direct_alltoall(topo), topo))
    nvs4 = named_topology("nvswitch:4")
    cases.append(("star-reducescatter-nvswitch:4", _star_reducescatter(4), nvs4))
    hpn = named_topology("hpn:1x2x4")
    cases.append(("ring-reducescatter-hpn:1x2x4", nccl_ring("reducescatter", hpn), hpn))
    cases.append(("ring-allreduce-hpn:1x2x4", nccl_ring("allreduce", hpn), hpn))
    ring = named_topology("ring:6")
    cases.append(("ring-allreduce-ring:6", nccl_ring("allreduce", ring), ring))
    return cases


@pytest.mark.parametrize(("name", "sched", "topo"), _large_message_cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_large_messages_approach_but_never_exceed_the_bandwidth_term(name: str, sched: Schedule, topo: Topology) -> None:
    sched.validate(topo)
    results = simulate_sweep(sched, topo, [1e3, 1e6, GB])
    assert results[-1].bandwidth_term_algbw_GBps == sched.algbw_GBps(topo)
    _assert_close_to_bandwidth_term(results[-1])
    times = [r.time_s for r in results]
    assert times == sorted(times)
    for res in results:
        assert res.algbw_GBps <= res.bandwidth_term_algbw_GBps * (1 + 1e-9)
        assert all(0.0 <= u <= 1.0 for u in res.link_utilization.values())
        assert max(res.link_utilization.values()) == pytest.approx(
            res.algbw_GBps / res.bandwidth_term_algbw_GBps, rel=1e-6
        )


def test_bottleneck_utilization_matches_the_algbw_ratio_on_hpn() -> None:
    topo = named_topology("hpn:1x2x8")
    res = simulate(nccl_ring("allgather", topo), topo, GB)
    busiest = max(res.link_utilization.values())
    assert busiest == pytest.approx(res.algbw_GBps / res.bandwidth_term_algbw_GBps, rel=1e-6)


def test_synthesized_allgather_never_exceeds_its_bandwidth_term() -> None:
    from synth.forestcoll_warm import synthesize_allgather

    topo = named_topology("hpn:1x2x4")
    sched = synthesize_allgather(topo).schedule
    _assert_close_to_bandwidth_term(simulate(sched, topo, GB), within=0.1)


def test_synthesized_alltoall_never_exceeds_its_bandwidth_term() -> None:
    from synth.alltoall_cg import synthesize_alltoall

    topo = named_topology("hpn:1x2x8")
    sched = synthesize_alltoall(topo).schedule
    _assert_close_to_bandwidth_term(simulate(sched, topo, GB))


# -- properties ----------------------------------------------------------------------------------
def test_more_slices_pipeline_better_on_a_latency_bound_ring() -> None:
    topo = named_topology("ring:8")
    sched = _one_way_ring("allgather", 8)
    times = [simulate(sched, topo, 1e5, slices_per_chunk=k).time_s for k in (1, 2, 4)]
    assert times[0] > times[1] > times[2]


def test_simulation_is_deterministic_and_sweep_matches_single_runs() -> None:
    topo = named_topology("hpn:1x2x4")
    sched = nccl_ring("allgather", topo)
    sizes = [1e4, 1e8]
    sweep = simulate_sweep(sched, topo, sizes)
    assert sweep == [simulate(sched, topo, s) for s in sizes]
    assert sweep == simulate_sweep(sched, topo, sizes)


def test_maxmin_matches_textbook_progressive_filling() -> None:
    def reference(weight, pair_path, pair_link, cap):  # type: ignore[no-untyped-def]
        rate = np.zeros(weight.size)
        frozen = weight == 0
        residual = cap.astype(float).copy()
        level = 0.0
        while not frozen.all():
            load = np.zeros(cap.size)
            for p, lk in zip(pair_path, pair_link):
                if not frozen[p]:
                    load[lk] += weight[p]
            used = load > 0
            delta = (residual[used] / load[used]).min()
            level += delta
            residual[used] -= delta * load[used]
            full = {int(lk) for lk in np.flatnonzero(used & (residual <= 1e-9 * cap))}
            for p, lk in zip(pair_path, pair_link):
                if not frozen[p] and lk in full:
                    frozen[p], rate[p] = True, level
        return rate

    rng = np.random.default_rng(7)
    for _ in range(200):
        nlinks, npaths = int(rng.integers(1, 8)), int(rng.integers(1, 10))
        pairs = [(p, int(lk)) for p in range(npaths)
                 for lk in sorted(rng.choice(nlinks, size=int(rng.integers(1, min(nlinks, 3) + 1)), replace=False))]
        pp = np.array([p for p, _ in pairs])
        pl = np.array([lk for _, lk in pairs])
        weight = rng.integers(0, 4, size=npaths)
        cap = rng.integers(1, 5, size=nlinks).astype(float)
        np.testing.assert_allclose(maxmin_rates(weight, pp, pl, cap), reference(weight, pp, pl, cap), rtol=1e-9)


# -- validation ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"nbytes": 0}, r"`nbytes` must be a finite number > 0, got 0"),
        ({"nbytes": math.inf}, r"`nbytes`.*inf"),
        ({"slices_per_chunk": 0}, r"`slices_per_chunk` must be an integer >= 1, got 0"),
        ({"slices_per_chunk": 2.0}, r"`slices_per_chunk`.*2\.0"),
        ({"rtol": -1.0}, r"`rtol`.*-1\.0"),
        ({"rtol": 0.2}, r"`rtol` must be a number in \[0, 0\.1\], got 0\.2"),
    ],
)
def test_simulate_rejects_bad_arguments(kwargs: dict[str, float], match: str) -> None:
    topo = named_topology("ring:3")
    args = {"nbytes": 1e6, **kwargs}
    nbytes = args.pop("nbytes")
    with pytest.raises(ScheduleError, match=match):
        simulate(_one_way_ring("allgather", 3), topo, nbytes, **args)  # type: ignore[arg-type]


def test_simulate_rejects_a_schedule_for_another_topology() -> None:
    with pytest.raises(ScheduleError, match=r"4 ranks but topology 'ring-3' has 3"):
        simulate(_one_way_ring("allgather", 4), named_topology("ring:3"), 1e6)


@pytest.mark.parametrize("check", [True, False])
def test_simulate_transfers_rejects_a_schedule_for_another_topology(check: bool) -> None:
    from synth.simulation import simulate_transfers

    with pytest.raises(ScheduleError, match=r"4 ranks but topology 'ring-3' has 3"):
        simulate_transfers(_one_way_ring("allgather", 4), named_topology("ring:3"), 1e6, check=check)


def test_simulate_without_check_still_rejects_missing_links() -> None:
    topo = named_topology("ring:4")
    bad = Schedule("alltoall", 4, 1, tuple(
        Route(RouteKind.PATH, s, 1, (Hop(s, d, (f"gpu{s}", f"gpu{d}")),), dest=d)
        for s in range(4) for d in range(4) if s != d
    ))
    with pytest.raises(ScheduleError, match=r"gpu0->gpu2, absent from topology 'ring-4'"):
        simulate(bad, topo, 1e6, check=False)


def test_route_multiplicity_weighs_its_fair_share() -> None:
    # Two paths share one 50 GB/s link; the route with 3 chunks stands for 3 chunk transfers and
    # gets 3/4 of the link, so both finish together at the bandwidth term.
    topo = named_topology("ring:2")
    a = Route(RouteKind.PATH, 0, 3, (Hop(0, 1, ("gpu0", "gpu1")),), dest=1)
    b = Route(RouteKind.PATH, 0, 1, (Hop(0, 1, ("gpu0", "gpu1")),), dest=1)
    back = Route(RouteKind.PATH, 1, 4, (Hop(1, 0, ("gpu1", "gpu0")),), dest=0)
    sched = Schedule("alltoall", 2, 4, (a, b, back))
    res = simulate(sched, topo, 1e9, slices_per_chunk=8)
    assert res.algbw_GBps == pytest.approx(res.bandwidth_term_algbw_GBps, rel=0.02)
    rates = maxmin_rates(np.array([1, 1]), np.array([0, 1]), np.array([0, 0]), np.array([4.0]), np.array([3, 1]))
    assert [float(r) for r in rates] == [3.0, 1.0]


@pytest.mark.parametrize(
    "spec, fail, per_source_bytes",
    [("hpn:1x2x8", "fail1", 1e9), ("hpn:1x2x8", "fail2", 1e9), ("hpn:1x2x8", "fail3", 1e9), ("hpn:1x4x8", "fail2", 128e6)],
)
def test_degraded_forestcoll_schedules_reach_their_bandwidth_term_on_large_messages(
    spec: str, fail: str, per_source_bytes: float
) -> None:
    from synth.forestcoll_warm import synthesize_allgather
    from synth.simulation import auto_slices
    from synth.topologies import load_topology

    topo = load_topology(spec, [fail])
    sched = synthesize_allgather(topo, max_chunks=4).schedule
    nbytes = per_source_bytes * topo.nranks
    res = simulate(sched, topo, nbytes, slices_per_chunk=auto_slices(sched, nbytes))
    assert res.bandwidth_term_algbw_GBps * 0.95 <= res.algbw_GBps <= res.bandwidth_term_algbw_GBps * (1 + 1e-9)


# -- time-window batching (rtol) against the exact mode --------------------------------------------
def _longest_chain(sched: Schedule, spc: int) -> int:
    """C of the error bound: deepest route's hop levels + most slices on one hop-flow."""
    depth = 0
    for route in sched.routes:
        level = {route.root: 0}
        for hop in route.hops:
            level[hop.dst] = level.get(hop.src, 0) + 1
        depth = max(depth, *level.values())
    return depth + max(r.chunks for r in sched.routes) * spc


def _assert_batched_within_bound(sched: Schedule, topo: Topology, rtols: tuple[float, ...]) -> None:
    for spc in (1, 4):
        bound = _longest_chain(sched, spc)
        for nbytes in (1e4, 1e6, GB):
            exact = simulate(sched, topo, nbytes, slices_per_chunk=spc, rtol=0.0, check=False)
            for rtol in rtols:
                fast = simulate(sched, topo, nbytes, slices_per_chunk=spc, rtol=rtol, check=False)
                assert abs(fast.time_s / exact.time_s - 1.0) <= bound * rtol, (rtol, spc, fast.message, exact.message)
                assert fast.algbw_GBps <= fast.bandwidth_term_algbw_GBps * (1 + 1e-9), fast.message
                assert fast.steps == exact.steps


def _degraded_cases() -> list[tuple[str, str, str]]:
    return [("hpn:1x2x8", "fail1", "ag"), ("hpn:1x2x8", "fail2", "ag"), ("hpn:1x2x8", "fail3", "ag"),
            ("hpn:1x2x4", "fail2", "ag"), ("hpn:1x2x8", "fail2", "a2a"), ("hpn:1x2x8", "fail3", "a2a")]


@pytest.mark.parametrize(("spec", "fail", "coll"), _degraded_cases())
def test_batched_mode_stays_within_its_error_bound_on_degraded_schedules(spec: str, fail: str, coll: str) -> None:
    from synth.alltoall_cg import synthesize_alltoall
    from synth.forestcoll_warm import synthesize_allgather
    from synth.topologies import load_topology

    topo = load_topology(spec, [fail])
    result = synthesize_allgather(topo, max_chunks=4) if coll == "ag" else synthesize_alltoall(topo, nchunks=4)
    sched = result.schedule
    sched.validate(topo)
    _assert_batched_within_bound(sched, topo, (3e-4, 1e-2))


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(topo=random_topologies(min_gpus=3, max_gpus=6, max_switches=2), chunks=st.integers(1, 3))
def test_batched_mode_stays_within_its_error_bound_on_random_topologies(topo: Topology, chunks: int) -> None:
    from synth.forestcoll_warm import synthesize_allgather

    sched = synthesize_allgather(topo, max_chunks=chunks).schedule
    _assert_batched_within_bound(sched, topo, (1e-3, 1e-2))


def test_batching_merges_events_of_an_asymmetric_schedule() -> None:
    from synth.forestcoll_warm import synthesize_allgather
    from synth.topologies import load_topology

    topo = load_topology("hpn:1x2x8", ["fail2"])
    sched = synthesize_allgather(topo, max_chunks=4).schedule
    exact = simulate(sched, topo, GB, rtol=0.0)
    fast = simulate(sched, topo, GB, rtol=1e-2)
    assert fast.events < exact.events / 2
    assert fast.rate_solves < exact.rate_solves / 2


@pytest.mark.parametrize("rtol", [0.0, 1e-3, 0.1])
def test_batching_keeps_a_pipelined_single_transfer_exact(rtol: float) -> None:
    # Every slice after the first is available when the previous one finishes, so batched
    # finishes restart from their true finish time: no byte is lost and no time is added.
    topo = named_topology("ring:2")
    res = simulate(_point_to_point(topo, ("gpu0", "gpu1"), ("gpu1", "gpu0"), nchunks=3), topo, 6e8,
                   slices_per_chunk=7, rtol=rtol)
    assert res.time_s == pytest.approx(0.5e-6 + 3e8 / 50e9, rel=1e-12)


@pytest.mark.parametrize(("name", "sched", "topo"), _large_message_cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_widest_batching_never_exceeds_the_bandwidth_term(name: str, sched: Schedule, topo: Topology) -> None:
    for res in simulate_sweep(sched, topo, [1e3, 1e6, GB], rtol=0.1):
        assert res.algbw_GBps <= res.bandwidth_term_algbw_GBps * (1 + 1e-9), res.message


@pytest.mark.parametrize("rtol", [0.0, 1e-2])
def test_cyclic_dependencies_stall_with_an_error(rtol: float) -> None:
    # An (invalid) in-tree whose hops 1->2 and 2->1 each wait for the other; check=False skips
    # validation, so the engine itself must notice that nothing can move.
    topo = named_topology("ring:3")
    route = Route(RouteKind.IN_TREE, 0, 1, (_hop(1, 2), _hop(2, 1), _hop(1, 0)))
    sched = Schedule("reducescatter", 3, 1, (route,))
    with pytest.raises(ScheduleError, match=r"simulation stalled at t=0\.0 s with 3 slice transfer\(s\) left"):
        simulate(sched, topo, 1e6, slices_per_chunk=1, rtol=rtol, check=False)
