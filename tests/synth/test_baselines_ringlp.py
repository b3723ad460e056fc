"""Degraded-aware weighted rings (synth.baselines.ringlp, issue 31): on rail fabrics with a random NIC
slowed, the LP-weighted rings validate, rate at least the NCCL-like ring and at most the exact optimum,
stay within the MSCCL executor's chunk limit, and the time-limited tree collectives fall back to them."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth import synthesize
from synth.baselines import nccl_ring, weighted_rings
from synth.baselines.ringlp import EXECUTOR_CHUNK_SLOTS
from synth.bounds import optimal_bound
from synth.result import Status
from synth.topologies import Topology, load_topology, named_topology
from synth.topologies.structure import switch_roles

SPECS = ("hpn:1x2x4", "hpn:1x4x4", "hpn:2x2x4", "hpn:2x4x4")


def _slow_nic(spec: str, gpu: int, factor: float) -> Topology:
    """``spec`` with GPU ``gpu``'s link to its network switch (both ways) at ``factor`` of its capacity."""
    topo = named_topology(spec)
    gid = topo.gpu_id(gpu % topo.nranks)
    roles = switch_roles(topo)
    nic = next(lk.dst for lk in topo.out_links(gid) if roles.get(lk.dst, "nvswitch") != "nvswitch")
    return topo.scaled(gid, nic, factor)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(SPECS), st.integers(0, 63), st.floats(0.05, 0.9), st.integers(0, 2**31),
       st.sampled_from(["allgather", "reducescatter", "allreduce"]))
def test_weighted_rings_on_degraded_rail_fabrics(spec: str, gpu: int, factor: float, seed: int,
                                                 collective: str) -> None:
    # A measured capacity is never exactly a round fraction: 5 % lognormal noise on the slowdown.
    noisy = min(0.95, factor * math.exp(random.Random(seed).gauss(0.0, 0.05)))
    topo = _slow_nic(spec, gpu, noisy)
    lp = weighted_rings(collective, topo)
    plain = nccl_ring(collective, topo)
    lp.validate(topo)
    assert lp.rate_GBps(topo) >= plain.rate_GBps(topo)
    assert lp.algbw_GBps(topo) <= optimal_bound(collective, topo).algbw_GBps * (1 + 1e-9)
    assert lp.nchunks <= 64 and lp.nchunks * lp.nranks <= EXECUTOR_CHUNK_SLOTS
    assert weighted_rings(collective, topo).to_json() == lp.to_json()  # deterministic
    if lp.meta["synthesizer"] == "ring-lp":
        assert sum(lp.meta["ring_chunks"]) == lp.nchunks


@pytest.mark.parametrize("spec", ["hpn:1x2x8", "hpn:2x4x4", "dgx-h100:2"])
def test_weighted_rings_recover_most_of_a_slow_nic(spec: str) -> None:
    """fail2 (rank 0's NIC at 1/8): the plain ring collapses to about its speed; the rings with
    detours keep at least 55 % of the exact optimum on these fabrics."""
    topo = load_topology(spec, ["fail2"])
    lp, plain = weighted_rings("allgather", topo), nccl_ring("allgather", topo)
    exact = optimal_bound("allgather", topo).algbw_GBps
    assert plain.algbw_GBps(topo) < 0.2 * exact
    assert lp.meta["synthesizer"] == "ring-lp" and lp.algbw_GBps(topo) >= 0.55 * exact


def test_healthy_fabric_keeps_the_plain_ring() -> None:
    topo = named_topology("hpn:2x4x4")
    assert weighted_rings("allgather", topo) == nccl_ring("allgather", topo)


def test_max_chunks_caps_the_rounding() -> None:
    topo = load_topology("hpn:2x4x4", ["fail2"])
    for cap in (4, 6, 9):
        s = weighted_rings("allgather", topo, max_chunks=cap)
        assert s.nchunks <= cap
        s.validate(topo)


@pytest.mark.parametrize("warm_kind", ["result", "schedule"])
def test_time_limited_warm_path_uses_the_weighted_rings(warm_kind: str) -> None:
    """128 GPUs, fail2, a tiny limit: the warm solve cannot finish (or is not started, after a
    time-limited result), and the degraded-aware rings replace the collapsed ring it started from."""
    topo = named_topology("hpn:1x16x8")
    cold = synthesize("allgather", topo, time_limit_s=1e-4)
    assert cold.status is Status.TIME_LIMIT and cold.schedule is not None
    degraded = load_topology("hpn:1x16x8", ["fail2"])
    warm = synthesize("allgather", degraded, warm_from=cold if warm_kind == "result" else cold.schedule,
                      time_limit_s=1e-4)
    assert warm.status is Status.TIME_LIMIT and warm.schedule is not None
    assert warm.schedule.meta["synthesizer"] == "ring-lp"
    warm.schedule.validate(degraded)
    assert warm.algbw_GBps > 5 * cold.schedule.algbw_GBps(degraded)
    assert warm.optimal_algbw_GBps >= optimal_bound("allgather", degraded).algbw_GBps * (1 - 1e-9)
    assert warm.gap_pct < 10.0
    assert ("tree solve not started" in warm.message) == (warm_kind == "result")
