"""Tests of msccl_xml.lowering (and msccl_xml.algbw on lowered programs)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msccl_xml import (
    StepType, check, lower, parse, program_algbw_GBps, program_link_loads, switch_path, write,
)
from synth.errors import XmlError
from synth.schedule import Hop, Route, RouteKind, Schedule
from synth.topologies import load_topology

from tests.msccl_xml._msccl_helpers import random_schedule, ring_schedule

COLLS = ("allgather", "reducescatter", "allreduce", "alltoall")


@pytest.mark.parametrize("coll", COLLS)
@pytest.mark.parametrize("inplace", [False, True])
def test_ring_schedules_lower_to_valid_programs(coll: str, inplace: bool) -> None:
    if coll == "alltoall" and inplace:
        pytest.skip("in-place alltoall is not supported")
    topo = load_topology("ring:4")
    sched = ring_schedule(topo, coll, nchunks=2)
    sched.validate(topo)
    p = lower(sched, inplace=inplace, protocol="LL")
    result = check(p)
    assert result.valid and result.warnings == ()
    assert (p.coll, p.ngpus, p.nchunksperloop, p.inplace, p.outofplace) == (
        coll, 4, 8, int(inplace), int(not inplace))
    assert parse(write(p)) == p
    assert program_algbw_GBps(p, topo) == pytest.approx(sched.algbw_GBps(topo))


def test_relay_and_reduction_step_types_are_used() -> None:
    topo = load_topology("ring:4")
    kinds = {c: {st.type for g in lower(ring_schedule(topo, c)).gpus
                 for tb in g.threadblocks for st in tb.steps} for c in COLLS}
    assert {StepType.SEND, StepType.RECV_COPY_SEND, StepType.RECV} <= kinds["allgather"]
    assert {StepType.SEND, StepType.RECV_REDUCE_SEND, StepType.RECV_REDUCE_COPY} <= kinds["reducescatter"]
    assert StepType.LOCAL_COPY in kinds["alltoall"]


def test_several_dependencies_become_nops_with_hasdep_targets() -> None:
    topo = load_topology("nvswitch:6")
    p = lower(random_schedule(topo, "allreduce", 2, random.Random(2)), inplace=True)
    steps = {(g.id, tb.id, step.s): step for g in p.gpus for tb in g.threadblocks for step in tb.steps}
    nops = [k for k, step in steps.items() if step.type is StepType.NOP]
    assert len(nops) == 40
    for (g, _, _), step in steps.items():
        if step.depid >= 0:
            assert steps[(g, step.depid, step.deps)].hasdep == 1
    assert check(p).valid


def test_lowering_is_deterministic() -> None:
    topo = load_topology("nvswitch:5")
    sched = random_schedule(topo, "allreduce", 3, random.Random(7))
    assert write(lower(sched)) == write(lower(sched))


def test_large_route_chunks_are_split_below_the_cnt_limit() -> None:
    topo = load_topology("ring:3")
    p = lower(ring_schedule(topo, "allgather", nchunks=100))
    cnts = [st.cnt for g in p.gpus for tb in g.threadblocks for st in tb.steps]
    assert max(cnts) == 71 and check(p).valid


def test_options_are_validated() -> None:
    topo = load_topology("ring:3")
    sched = ring_schedule(topo, "alltoall")
    with pytest.raises(XmlError, match="in-place alltoall is not supported"):
        lower(sched, inplace=True)
    with pytest.raises(XmlError, match=r"unknown protocol 'll'"):
        lower(sched, protocol="ll")
    with pytest.raises(XmlError, match=r"max_channels must be in 1\.\.32 for msccl-executor-nccl, got 40"):
        lower(sched, max_channels=40)
    assert lower(ring_schedule(topo, "reducescatter"), runtime="msccl-legacy").coll == "reduce_scatter"


def test_channel_limit_error_names_the_limit_and_the_fix() -> None:
    topo = load_topology("nvswitch:8")
    sched = random_schedule(topo, "allgather", 4, random.Random(2))
    with pytest.raises(XmlError, match=r"fits on none of 1 channels .* raise max_channels"):
        lower(sched, max_channels=1)


def test_step_limit_error_names_the_limit_and_the_fix() -> None:
    routes = tuple(Route(RouteKind.OUT_TREE, r, 1, (Hop(r, 1 - r, (f"gpu{r}", f"gpu{1 - r}")),))
                   for r in range(2) for _ in range(70))
    with pytest.raises(XmlError, match=r"steps per threadblock; raise max_channels .*nchunks"):
        lower(Schedule("allgather", 2, 70, routes), max_channels=1)
    assert check(lower(Schedule("allgather", 2, 70, routes), max_channels=4)).valid


def test_link_loads_follow_switch_paths() -> None:
    topo = load_topology("hpn:1x2x2")
    assert switch_path(topo, "gpu0", "gpu1") == ("gpu0", "nvs0.0", "gpu1")
    with pytest.raises(XmlError, match=r"no path gpu0->gpu3 through switches only"):
        switch_path(topo, "gpu0", "gpu3")
    p = lower(ring_schedule(load_topology("ring:4"), "allgather"))
    with pytest.raises(XmlError, match="has 4 ranks but the program has ngpus=4|no path"):
        program_link_loads(p, topo)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(2, 6), nchunks=st.integers(1, 3), coll=st.sampled_from(COLLS),
       inplace=st.booleans(), seed=st.integers(0, 10**6))
def test_lowered_random_schedules_are_valid_round_trip_and_keep_algbw(
    n: int, nchunks: int, coll: str, inplace: bool, seed: int
) -> None:
    if coll == "alltoall":
        inplace = False
    topo = load_topology(f"nvswitch:{n}")
    sched = random_schedule(topo, coll, nchunks, random.Random(seed))
    sched.validate(topo)
    p = lower(sched, inplace=inplace)
    result = check(p)
    assert result.valid, result.errors[:3]
    assert parse(write(p)) == p
    assert program_algbw_GBps(p, topo) == pytest.approx(sched.algbw_GBps(topo))
