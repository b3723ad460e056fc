"""NCCL-like baselines: valid schedules, rail-aware rings, PXN AllToAll, closed forms."""

from __future__ import annotations

from fractions import Fraction

import pytest

from synth import ScheduleError, load_topology, optimal_bound
from synth.baselines import nccl_direct_alltoall, nccl_ring, ring_orders

SPECS = ["hpn:1x2x8", "hpn:1x3x4", "hpn:2x2x4", "dgx-a100:3", "nvswitch:6", "ring:5", "torus:4x4", "torus:3x3", "hpn:1x5x4", "hpn:1x3x2"]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "allreduce"])
def test_ring_baseline_validates_and_never_beats_the_bound(spec: str, collective: str) -> None:
    topo = load_topology(spec)
    sched = nccl_ring(collective, topo)
    sched.validate(topo)
    assert sched.algbw_GBps(topo) <= optimal_bound(collective, topo).algbw_GBps * (1 + 1e-12)


@pytest.mark.parametrize("spec", SPECS)
def test_direct_alltoall_validates_and_never_beats_the_bound(spec: str) -> None:
    topo = load_topology(spec)
    sched = nccl_direct_alltoall(topo)
    sched.validate(topo)
    assert sched.algbw_GBps(topo) <= optimal_bound("alltoall", topo).algbw_GBps * (1 + 1e-6)


@pytest.mark.parametrize("n", [3, 4, 8])
def test_ring_on_one_nvswitch_is_optimal(n: int) -> None:
    topo = load_topology(f"nvswitch:{n}")
    ring = nccl_ring("allgather", topo)
    assert ring.rate_GBps(topo) * n == optimal_bound("allgather", topo).rate_GBps * n
    # nccl-tests closed form: algbw = N * ingress / (N - 1)
    assert ring.algbw_GBps(topo) == pytest.approx(n * 360.0 / (n - 1))


def test_rail_rings_leave_each_host_on_different_nics() -> None:
    topo = load_topology("hpn:1x4x8")
    orders = ring_orders(topo, 8)
    exits: dict[int, set[int]] = {}
    for order in orders:
        for a, b in zip(order, order[1:] + order[:1]):
            if a // 8 != b // 8:
                assert a % 8 == b % 8, f"inter-host hop {a}->{b} changes rail"
                exits.setdefault(a // 8, set()).add(a % 8)
    assert all(len(rails) == 8 for rails in exits.values())


def test_ring_allgather_on_hpn_matches_hand_count() -> None:
    # 8 rings, one chunk each; each NIC uplink lies on exactly one ring and carries N-1 = 15
    # chunks at 50 GB/s, each NVSwitch uplink carries 7 * 15 chunks at 360 GB/s: NIC-bound.
    topo = load_topology("hpn:1x2x8")
    sched = nccl_ring("allgather", topo)
    assert sched.rate_GBps(topo) == Fraction(8) / Fraction(15, 50)


def test_direct_alltoall_uses_pxn_for_cross_rail_blocks() -> None:
    topo = load_topology("hpn:1x2x8")
    sched = nccl_direct_alltoall(topo)
    route = next(r for r in sched.routes if r.root == 0 and r.dest == 9)
    assert [(h.src, h.dst) for h in route.hops] == [(0, 1), (1, 9)]
    assert route.hops[0].path == ("gpu0", "nvs0.0", "gpu1")
    assert route.hops[1].path == ("gpu1", "tor0.1", "gpu9")


def test_fail2_collapses_the_ring_to_the_slow_nic() -> None:
    # The paper's headline: the ring runs at the degraded NIC's speed; the bound barely moves.
    topo = load_topology("hpn:1x2x8", ["fail2"])
    ring = nccl_ring("allgather", topo).algbw_GBps(topo)
    best = optimal_bound("allgather", topo).algbw_GBps
    assert ring == pytest.approx(16 * 8 * 6.25 / 15)
    assert best / ring == pytest.approx(7.325, abs=1e-3)


def test_ring_rejects_alltoall() -> None:
    with pytest.raises(ScheduleError, match="alltoall"):
        nccl_ring("alltoall", load_topology("ring:4"))
