"""Acceptance (issue 23): every schedule of the test matrix lowers to an MSCCL++ plan that parses
back, checks valid, and has the schedule's algbw; limits are named when a schedule does not fit.

Matrix: 4 collectives x (hpn:1x2x4, ring:4, nvswitch:8, nvswitch:8+fail1, hpn:1x2x4+fail2), with at
most 2 chunks per source (ForestColl) or 2 chunks per block (AllToAll); in place for the three
that have an in-place form. About 3 s on one core.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings

from msccl_xml import lower as msccl_lower
from msccl_xml import switch_path
from mscclpp_plan import (
    PlanError,
    PlanLimitError,
    check,
    lower,
    lower_schedule,
    parse,
    plan_algbw_GBps,
    plan_link_loads,
    write,
)
from mscclpp_plan.model import Op
from synth.alltoall_cg import synthesize_alltoall
from synth.forestcoll_warm import synthesize_allgather, synthesize_allreduce, synthesize_reducescatter
from synth.schedule import Schedule
from synth.topologies import Topology, load_topology

from tests.strategies import random_topologies

from ._plan_helpers import with_ops

TOPOLOGIES = [("hpn:1x2x4", None), ("ring:4", None), ("nvswitch:8", None), ("nvswitch:8", "fail1"),
              ("hpn:1x2x4", "fail2")]  # fmt: skip
COLLECTIVES = ("allgather", "reducescatter", "allreduce", "alltoall")
_FORESTCOLL = {
    "allgather": synthesize_allgather,
    "reducescatter": synthesize_reducescatter,
    "allreduce": synthesize_allreduce,
}


@cache
def _topology(spec: str, failure: str | None) -> Topology:
    return load_topology(spec, [failure] if failure else [])


def _synthesize(topo: Topology, coll: str, chunks: int) -> Schedule:
    result = synthesize_alltoall(topo, nchunks=chunks) if coll == "alltoall" else _FORESTCOLL[coll](
        topo, max_chunks=chunks)  # fmt: skip
    assert result.schedule is not None, result.message
    return result.schedule


@cache
def _schedule(spec: str, failure: str | None, coll: str, chunks: int = 2) -> Schedule:
    return _synthesize(_topology(spec, failure), coll, chunks)


def assert_plan_round_trips(sched: Schedule, topo: Topology, *, inplace: bool = False) -> None:
    plan = lower_schedule(sched, topo, inplace=inplace, verify=False)
    back = parse(write(plan))
    assert back == plan
    verdict = check(back)
    assert verdict.valid, verdict.errors[:3]
    assert plan_algbw_GBps(back, topo) == pytest.approx(sched.algbw_GBps(topo), rel=1e-12)
    assert back.inplace is inplace


@pytest.mark.parametrize("coll", COLLECTIVES)
@pytest.mark.parametrize(("spec", "failure"), TOPOLOGIES, ids=[f"{s}-{f or 'healthy'}" for s, f in TOPOLOGIES])
def test_matrix_schedule_lowers_to_a_valid_plan_with_its_algbw(spec: str, failure: str | None, coll: str) -> None:
    topo = _topology(spec, failure)
    sched = _schedule(spec, failure, coll)
    sched.validate(topo)
    assert_plan_round_trips(sched, topo)


@pytest.mark.parametrize("coll", ["allgather", "reducescatter", "allreduce"])
@pytest.mark.parametrize(("spec", "failure"), [("hpn:1x2x4", "fail2"), ("nvswitch:8", "fail1")])
def test_matrix_schedule_lowers_in_place_too(spec: str, failure: str | None, coll: str) -> None:
    assert_plan_round_trips(_schedule(spec, failure, coll), _topology(spec, failure), inplace=True)


def test_pairs_across_hosts_use_port_channels_within_a_host_memory_channels() -> None:
    topo = _topology("hpn:1x2x4", None)
    plan = lower_schedule(_schedule("hpn:1x2x4", None, "allgather"), topo)
    hosts = [topo.node(topo.gpu_id(r)).host for r in range(topo.nranks)]
    kinds = set()
    for g in plan.gpus:
        for decl in g.channels:
            for peer in decl.connected_to:
                assert decl.channel_type == ("memory" if hosts[peer] == hosts[g.id] else "port")
                kinds.add(decl.channel_type)
    assert kinds == {"memory", "port"}
    ops = {op.name for g in plan.gpus for tb in g.threadblocks for op in tb.ops}
    assert {"pwsf", "signal", "wait"} <= ops  # port puts signal (and flush) themselves


def test_link_loads_follow_the_schedule() -> None:
    topo = _topology("ring:4", None)
    sched = _schedule("ring:4", None, "allgather")
    loads = plan_link_loads(lower_schedule(sched, topo), topo)["all"]
    assert loads == {k: v for k, v in sched.link_loads().items() if v}


def test_long_threadblocks_run_as_a_chain_within_max_operation() -> None:
    # A ring allreduce on 16 ranks has 30 steps per threadblock: more than 64 ops in one block.
    topo = _topology("ring:16", None)
    sched = _synthesize(topo, "allreduce", 2)
    program = msccl_lower(sched)
    plan = lower_schedule(sched, topo)
    assert check(plan).valid
    assert max(len(tb.ops) for g in plan.gpus for tb in g.threadblocks) <= 64
    assert sum(len(g.threadblocks) for g in plan.gpus) > sum(len(g.threadblocks) for g in program.gpus)
    assert plan.gpus[0].semaphores  # the chain's links
    assert plan_algbw_GBps(plan, topo) == pytest.approx(sched.algbw_GBps(topo), rel=1e-12)


def test_unflushed_port_puts_race_with_the_next_launch() -> None:
    # pws leaves the source in use by the proxy; a forwarded scratch slot is rewritten next launch.
    topo = _topology("hpn:1x2x4", "fail2")
    plan = lower_schedule(_schedule("hpn:1x2x4", "fail2", "allgather"), topo)
    assert any(op.name == "pwsf" for g in plan.gpus for tb in g.threadblocks for op in tb.ops)
    gpus = []
    for g in plan.gpus:
        tbs = [replace(tb, ops=tuple(replace(op, name="pws") if op.name == "pwsf" else op for op in tb.ops))
               for tb in g.threadblocks]
        gpus.append(replace(g, threadblocks=tuple(tbs)))
    errors = check(replace(plan, gpus=tuple(gpus))).errors
    assert any("which the proxy may still be reading" in e for e in errors), errors[:3]


def test_many_dependency_pairs_get_many_semaphores() -> None:
    # MAX_DEVICE_SEMAPHORES (16) bounds the ids of one op, not a GPU's semaphores: this plan needs 18.
    topo = load_topology("dgx-a100:2", ["fail2"])
    sched = synthesize_allreduce(topo, max_chunks=2).schedule
    assert sched is not None
    plan = lower_schedule(sched, topo, inplace=True)
    assert max(len(g.semaphores) for g in plan.gpus) > 16
    assert all(len(op.semaphore_ids or ()) <= 16 for g in plan.gpus for tb in g.threadblocks for op in tb.ops)
    assert check(plan).valid
    assert plan_algbw_GBps(plan, topo) == pytest.approx(sched.algbw_GBps(topo), rel=1e-12)


def test_dropping_the_credit_wait_races_with_the_previous_launch() -> None:
    # Without it a fast sender's next launch overwrites a slot the receiver may still be reading.
    topo = _topology("nvswitch:8", None)
    plan = lower_schedule(_schedule("nvswitch:8", None, "allgather"), topo)
    t, ops, k = next((t, list(tb.ops), k) for t, tb in enumerate(plan.gpus[0].threadblocks)
                     for k, o in enumerate(tb.ops) if o.name == "wait" and tb.ops[k + 2].name == "put")
    assert [o.name for o in ops[k:k + 3]] == ["wait", "nop", "put"]  # the credit, before the first put
    broken = with_ops(plan, 0, t, ops[:k] + ops[k + 2:])
    errors = check(broken).errors
    assert errors and all(e.startswith("launch 2: ") or "more time(s)" in e for e in errors), errors[:3]
    assert any("race" in e for e in errors)


def test_dropping_a_semaphore_acquire_is_a_race() -> None:
    topo = _topology("hpn:1x2x4", "fail2")
    plan = lower_schedule(_schedule("hpn:1x2x4", "fail2", "allreduce"), topo)
    for r, g in enumerate(plan.gpus):
        for t, tb in enumerate(g.threadblocks):
            ops = list(tb.ops)
            for k, op in enumerate(ops):
                if op.name == "sem_acquire":
                    broken = with_ops(plan, r, t, ops[:k] + ops[k + 1:])
                    errors = check(broken).errors
                    assert any("semaphore" in e for e in errors) or any("race" in e for e in errors)
                    return
    raise AssertionError("no cross-threadblock dependency in this plan")


def test_legacy_step_type_and_foreign_collective_are_refused() -> None:
    program = msccl_lower(_schedule("ring:4", None, "allgather"))
    with pytest.raises(PlanError, match="collective 'broadcast' has no MSCCL\\+\\+ lowering"):
        lower(program.__class__(**{**{f: getattr(program, f) for f in program.__slots__}, "coll": "broadcast"}))
    with pytest.raises(PlanError, match="hosts has 3 entries for 4 ranks"):
        lower(program, hosts=[0, 0, 0])


def test_plan_ops_are_known_to_the_model() -> None:
    plan = lower_schedule(_schedule("nvswitch:8", "fail1", "allreduce"), _topology("nvswitch:8", "fail1"))
    names = {op.name for g in plan.gpus for tb in g.threadblocks for op in tb.ops}
    assert names <= {"nop", "copy", "re", "res", "put", "pwsf", "signal", "wait", "sem_acquire", "sem_release"}
    assert all(isinstance(op, Op) for g in plan.gpus for tb in g.threadblocks for op in tb.ops)


def _follows_runtime_paths(sched: Schedule, topo: Topology) -> bool:
    return all(hop.path == switch_path(topo, topo.gpu_id(hop.src), topo.gpu_id(hop.dst))
               for route in sched.routes for hop in route.hops)  # fmt: skip


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(topo=random_topologies(min_gpus=2, max_gpus=5, max_switches=2, symmetric=True))
def test_random_topology_schedules_lower_to_valid_plans(topo: Topology) -> None:
    for coll in ("allgather", "allreduce", "alltoall"):
        sched = _synthesize(topo, coll, 2)
        try:
            plan = lower_schedule(sched, topo)
        except PlanLimitError:
            continue  # a named limit, not a wrong plan
        assert check(parse(write(plan))).valid
        if _follows_runtime_paths(sched, topo):
            assert plan_algbw_GBps(plan, topo) == pytest.approx(sched.algbw_GBps(topo), rel=1e-12)
