"""Tests of msccl_xml.lowering (and msccl_xml.algbw on lowered programs)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msccl_xml import (
    StepType, check, lower, parse, program_algbw_GBps, program_link_loads, program_to_schedule, switch_path, write,
)
from synth.errors import RuntimeLimitError, XmlError
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


@pytest.mark.parametrize("coll", ["allgather", "reducescatter", "allreduce", "alltoall"])
def test_relay_chains_that_fit_no_channel_are_cut_into_recv_and_send(coll: str) -> None:
    # On one channel a GPU has one threadblock per recv peer, so random trees cannot keep every
    # relay fused (rcs / rrs): the lowering cuts chains and the program stays exact.
    topo = load_topology("nvswitch:8")
    sched = random_schedule(topo, coll, 4, random.Random(2))
    wide, narrow = lower(sched), lower(sched, max_channels=1)
    assert wide.nchannels > 1 and narrow.nchannels == 1
    kinds = {st.type for g in narrow.gpus for tb in g.threadblocks for st in tb.steps}
    assert StepType.SEND in kinds and (StepType.RECV in kinds or StepType.RECV_REDUCE_COPY in kinds)
    for program in (wide, narrow):
        for g in program.gpus:  # threadblocks waited on take the lowest ids (depid is an int8)
            waited = {st.depid for tb in g.threadblocks for st in tb.steps if st.depid >= 0}
            assert waited == set(range(len(waited)))
        verdict = check(parse(write(program)))
        assert verdict.valid, verdict.errors[:3]
        back = program_to_schedule(program, topo)
        assert back.link_loads() == sched.link_loads()
        assert program_algbw_GBps(program, topo) == pytest.approx(sched.algbw_GBps(topo), rel=1e-12)


def test_deep_forestcoll_trees_on_64_gpus_lower_and_check() -> None:
    # Regression: fused relay chains of ForestColl's AllGather on 64 GPUs fit on no channel.
    from synth.forestcoll_warm import synthesize_allgather

    topo = load_topology("hpn:1x8x8", ["fail2"])
    sched = synthesize_allgather(topo, max_chunks=4).schedule
    program = lower(sched)
    assert program.nchannels <= 32
    assert check(program).valid
    assert program_algbw_GBps(program, topo) == pytest.approx(sched.algbw_GBps(topo), rel=1e-12)
    assert program_to_schedule(program, topo).link_loads() == sched.link_loads()


def test_offset_limit_is_a_runtime_limit_error_naming_the_chunk_cap() -> None:
    routes = tuple(Route(RouteKind.OUT_TREE, r, 16385, (Hop(r, 1 - r, (f"gpu{r}", f"gpu{1 - r}")),))
                   for r in range(2))
    with pytest.raises(RuntimeLimitError, match=r"2 ranks x 16385 chunks = 32770 .*at most 16384 chunks per source"):
        lower(Schedule("allgather", 2, 16385, routes))


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


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(2, 7), nchunks=st.integers(1, 3), coll=st.sampled_from(COLLS),
       inplace=st.booleans(), channels=st.sampled_from([1, 2, None]), seed=st.integers(0, 10**6))
def test_lowered_random_schedules_are_valid_round_trip_and_keep_algbw(
    n: int, nchunks: int, coll: str, inplace: bool, channels: int | None, seed: int
) -> None:
    # Few channels force relay chains to be cut into recv + send (assign_channels).
    if coll == "alltoall":
        inplace = False
    topo = load_topology(f"nvswitch:{n}")
    sched = random_schedule(topo, coll, nchunks, random.Random(seed))
    sched.validate(topo)
    p = lower(sched, inplace=inplace, max_channels=channels)
    result = check(p)
    assert result.valid, result.errors[:3]
    assert parse(write(p)) == p
    assert program_algbw_GBps(p, topo) == pytest.approx(sched.algbw_GBps(topo))
    assert program_to_schedule(p, topo).link_loads() == sched.link_loads()


def test_more_peers_than_a_channel_holds_spread_over_channels() -> None:
    # 40 ranks: every GPU sends to and receives from 39 peers; a channel holds 32 of each.
    topo = load_topology("nvswitch:40")
    sched = random_schedule(topo, "alltoall", 1, random.Random(0))
    program = lower(sched)
    assert check(program).valid
    for g in program.gpus:
        for chan in range(program.nchannels):
            tbs = [tb for tb in g.threadblocks if tb.chan == chan]
            assert sum(tb.send >= 0 for tb in tbs) <= 32 and sum(tb.recv >= 0 for tb in tbs) <= 32
    assert program_algbw_GBps(program, topo) == pytest.approx(sched.algbw_GBps(topo), rel=1e-12)
