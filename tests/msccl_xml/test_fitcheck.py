"""msccl_xml.fitcheck: lower bounds that no lowering beats, and the fit that uses them to skip doomed tries."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from msccl_xml import lower
from msccl_xml._structure import rank_xml_nodes
from msccl_xml.deploy import fit
from msccl_xml.fitcheck import Pressure, fit_pressure
from msccl_xml.targets import MscclTarget
from synth import Schedule, load_topology, synthesize
from synth.errors import LoopcollError, RuntimeLimitError
from synth.schedule import Hop, Route, RouteKind
from tests.strategies import random_topologies


def _ring_allgather(n: int, routes_per_root: int, *, both: bool = False) -> Schedule:
    """ring:n AllGather, each root's chunks on ``routes_per_root`` one-chunk routes along the ring
    (``both``: half of them each way round)."""
    routes = []
    for root in range(n):
        for j in range(routes_per_root):
            step = -1 if both and j % 2 else 1
            order = [(root + step * i) % n for i in range(n)]
            hops = tuple(Hop(a, b, (f"gpu{a}", f"gpu{b}")) for a, b in zip(order[:-1], order[1:]))
            routes.append(Route(RouteKind.OUT_TREE, root, 1, hops))
    return Schedule("allgather", n, routes_per_root, tuple(routes))


def test_bounds_on_a_hand_built_ring_are_exact_counts() -> None:
    ok = fit_pressure(_ring_allgather(8, 2))
    assert ok.fits and ok.limit == "pair_steps"  # 7 * 2 = 14 pieces per pair against 32 * 64
    assert ok.scale == pytest.approx(2048 / 14)
    over = fit_pressure(_ring_allgather(40, 110))  # 39 * 110 = 4290 steps on every rank
    assert not over.fits and over.limit == "xml_nodes"
    assert over.scale == pytest.approx((4095 - 42) / 4290)
    assert "gpu 0 needs at least 4332 XML nodes (4290 steps" in over.message
    assert over.chunk_cap(110) == 103
    pairs = fit_pressure(_ring_allgather(8, 2), max_channels=1)  # 14 pieces per pair against 1 * 64
    assert pairs.fits and pairs.scale == pytest.approx(64 / 14)
    assert fit_pressure(synthesize("alltoall", load_topology("ring:4")).schedule).limit == "none"
    assert Pressure(float("inf"), "none", "").chunk_cap(7) == 7


def test_lowering_refuses_at_once_what_the_bound_rules_out() -> None:
    with pytest.raises(RuntimeLimitError, match=r"4290 steps.*holds at most 103 chunks per source"):
        lower(_ring_allgather(40, 110))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topo=random_topologies(min_gpus=2, max_gpus=6, max_switches=2),
       collective=st.sampled_from(["allgather", "reducescatter", "allreduce"]),
       chunks=st.sampled_from([None, 1, 3]))
def test_no_lowered_program_beats_the_bounds(topo, collective, chunks) -> None:
    """The bounds are lower bounds: every program lowering makes has at least as many XML nodes per
    rank, and at least as many steps between a GPU pair, as :func:`fit_pressure` counts."""
    try:
        sched = synthesize(collective, topo, chunks=chunks).schedule
        program = lower(sched)
    except LoopcollError:
        return
    assert sched is not None
    p = fit_pressure(sched)
    assert p.fits
    n = sched.nranks
    nodes = max(rank_xml_nodes(n, g.threadblocks) for g in program.gpus)
    sends: Counter[tuple[int, int]] = Counter()
    recvs: Counter[tuple[int, int]] = Counter()
    for g in program.gpus:
        for tb in g.threadblocks:
            for step in tb.steps:
                if step.type.value in ("s", "rcs", "rrs", "rrcs"):
                    sends[(g.id, tb.send)] += 1
                if step.type.value in ("r", "rcs", "rrc", "rrs", "rrcs"):
                    recvs[(tb.recv, g.id)] += 1
    per_pair = max([*sends.values(), *recvs.values()], default=0)
    if p.limit == "xml_nodes":
        assert nodes <= 4095 and 4095 / nodes <= p.scale + 1e-9
    else:
        assert per_pair > 0 and 2048 / per_pair <= p.scale + 1e-9


def test_fit_goes_straight_to_the_bound_and_refuses_a_far_slower_cap() -> None:
    topo = load_topology("ring:40")
    sched = _ring_allgather(40, 110, both=True)  # optimal rate, but 4290 steps on every rank
    assert sched.algbw_GBps(topo) == pytest.approx(synthesize("allgather", topo).algbw_GBps)
    caps: list[int] = []

    def again(cap: int):
        caps.append(cap)
        return synthesize("allgather", topo, chunks=cap)

    v = fit(sched, topo, MscclTarget(), resynthesize=again, min_capped_share=0.9)
    assert caps == [103]  # the bound's cap, not 109 (k - 1), and no second try
    assert v.capped_chunks == 103 and v.bands[0].program is not None

    def one_way(cap: int) -> Schedule:  # half the rate: every chunk the same way round
        caps.append(cap)
        return _ring_allgather(40, cap)

    caps.clear()
    kept = fit(sched, topo, MscclTarget(), resynthesize=one_way, strict=False, min_capped_share=0.9)
    band = kept.bands[0]
    assert caps == [103] and band.program is None and band.schedule is sched
    assert "under 90% of this schedule's" in band.error and "4290 steps" in band.error
    with pytest.raises(RuntimeLimitError, match="gets no program for it"):
        fit(sched, topo, MscclTarget(), resynthesize=one_way, min_capped_share=0.9)
    caps.clear()
    taken = fit(sched, topo, MscclTarget(), resynthesize=one_way)  # without a share: the slower caps are taken
    # 103 one-way routes carry 39 * 103 pieces per pair: the pair bound leaves 52 without lowering; 52 fails
    # in lowering (the nops on top), which halves to 26
    assert caps == [103, 52, 26] and taken.capped_chunks == 26 and taken.schedule.nchunks == 26


def test_a_limit_without_re_synthesis_is_recorded_after_one_render() -> None:
    from tests.msccl_xml.test_deploy import Tight

    ring = load_topology("ring:4")
    res = synthesize("allgather", ring)
    seen: list[int] = []
    kept = fit(res, ring, Tight(1, renders=seen), strict=False)
    assert seen == [2] and kept.bands[0].program is None
    assert kept.bands[0].error == "2 chunks per source exceed tight's 1"
