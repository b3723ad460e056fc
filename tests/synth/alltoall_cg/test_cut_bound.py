"""The AllToAll cut lower bound (synth.alltoall_cg._cuts): never above the LP optimum, tight on rails.

A bound above the LP optimum would certify a wrong gap; a loose one (a single GPU's links, 87.8 %
at 2048 GPUs in issue 31) certifies nothing useful. Hypothesis draws random fabrics and degraded
links; the LP optimum comes from the independent compact LP.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.alltoall_cg import synthesize_alltoall
from synth.alltoall_cg._cuts import cut_lower_bound
from synth.alltoall_cg._expanded import Network
from synth.bounds.alltoall import alltoall_rate_GBps
from synth.result import Status
from synth.topologies import Topology, named_topology
from tests.strategies import random_topologies


def _cut_algbw(topo: Topology) -> float:
    """The algbw upper bound the cut bound certifies (N / T_lower)."""
    return topo.nranks / cut_lower_bound(Network.from_topology(topo))


@settings(max_examples=80, deadline=None)
@given(random_topologies(min_gpus=2, max_gpus=7, max_switches=3))
def test_cut_bound_never_above_lp_optimum(topo: Topology) -> None:
    lp = topo.nranks * alltoall_rate_GBps(topo).rate_GBps
    assert _cut_algbw(topo) >= lp * (1 - 1e-9)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 15), st.sampled_from([0.05, 0.3, 0.5, 0.9]), st.booleans())
def test_cut_bound_valid_on_degraded_rail_fabric(gpu: int, factor: float, nvlink: bool) -> None:
    topo = named_topology("hpn:1x2x8")
    other = next(lk.dst for lk in topo.out_links(f"gpu{gpu}") if lk.dst.startswith("nvs") == nvlink)
    degraded = topo.scaled(f"gpu{gpu}", other, factor)
    lp = degraded.nranks * alltoall_rate_GBps(degraded).rate_GBps
    assert _cut_algbw(degraded) >= lp * (1 - 1e-9)


@pytest.mark.parametrize("spec", ["hpn:1x2x8", "hpn:2x2x4", "hpn:1x4x8"])
def test_cut_bound_tight_on_healthy_rail_fabrics(spec: str) -> None:
    topo = named_topology(spec)
    lp = topo.nranks * alltoall_rate_GBps(topo).rate_GBps
    # The host cut: H hosts' NICs carry g·(N − g) blocks each way.
    assert _cut_algbw(topo) == pytest.approx(lp, rel=1e-9)


def test_cut_bound_proves_the_first_master_optimal_on_rails() -> None:
    """An expired limit still ends OPTIMAL on a healthy rail fabric: the host cut meets the first
    master's value, so no pricing round is needed (issue 31: 58.7 s → 24.7 s at 1024 GPUs)."""
    topo = named_topology("hpn:2x4x8")
    lp = topo.nranks * alltoall_rate_GBps(topo).rate_GBps
    res = synthesize_alltoall(topo, nchunks=4, time_limit_s=1e-6)
    assert res.status is Status.OPTIMAL
    assert res.figures.cg_iterations == 1
    assert res.optimal_algbw_GBps == pytest.approx(lp, rel=1e-9)
    assert res.schedule is not None
    res.schedule.validate(topo)


def test_time_limited_gap_is_against_a_valid_cut_bound() -> None:
    """Degraded (one NIC at 30 %), stopped at once: the certified bound is the degraded host's cut,
    valid (≥ the LP optimum) and far below a single GPU's 410 GB/s."""
    topo = named_topology("hpn:2x4x8").scaled("gpu3", "tor0.3", 0.3)
    lp = topo.nranks * alltoall_rate_GBps(topo).rate_GBps
    res = synthesize_alltoall(topo, nchunks=4, time_limit_s=1e-6)
    assert res.status is Status.TIME_LIMIT
    assert lp * (1 - 1e-9) <= res.optimal_algbw_GBps <= _cut_algbw(topo) * (1 + 1e-9)
    assert res.optimal_algbw_GBps < 1.05 * lp
    assert res.schedule is not None
    res.schedule.validate(topo)


@pytest.mark.parametrize("spec", ["torus:4x4", "torus:6x6", "ring:8"])
def test_distance_bound_tight_on_switchless_fabrics(spec: str) -> None:
    """No cut binds on a torus (torus:6x6: 205.7 GB/s from cuts, 66.7 optimum); the traffic's length does."""
    topo = named_topology(spec)
    lp = topo.nranks * alltoall_rate_GBps(topo).rate_GBps
    assert _cut_algbw(topo) == pytest.approx(lp, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 5), st.integers(2, 5), st.data())
def test_distance_bound_valid_on_degraded_tori(x: int, y: int, data: st.DataObject) -> None:
    """Uneven lengths (some links slowed or cut) keep the bound at or above the LP optimum."""
    topo = named_topology(f"torus:{x}x{y}")
    for _ in range(data.draw(st.integers(1, 3))):
        lk = data.draw(st.sampled_from(topo.links))
        factor = data.draw(st.sampled_from([0.1, 0.25, 0.5, 0.8]))
        topo = topo.scaled(lk.src, lk.dst, factor)
    lp = topo.nranks * alltoall_rate_GBps(topo).rate_GBps
    assert _cut_algbw(topo) >= lp * (1 - 1e-9)


def test_time_limited_torus_certificate_is_useful() -> None:
    """Stopped at once on torus:6x6, the certified bound is the optimum (the distance bound), not 205.7."""
    topo = named_topology("torus:6x6")
    lp = topo.nranks * alltoall_rate_GBps(topo).rate_GBps
    res = synthesize_alltoall(topo, nchunks=4, time_limit_s=1e-6)
    assert res.optimal_algbw_GBps == pytest.approx(lp, rel=1e-6)
