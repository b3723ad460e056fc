"""Ring schedules validated and rated without per-hop Python work (issue 31, 2048 GPUs): the cycle-window
fast path of ``Schedule.validate`` / ``link_loads`` must agree with the full checks on every schedule,
including broken ones, and ``PairRoutes`` must give ``route_table``'s routes."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.baselines import nccl_ring
from synth.errors import ScheduleError
from synth.routing import PairRoutes, route_table
from synth.schedule import Route, Schedule
from synth.schedule._windows import RingWindows, ring_windows
from synth.schedule.validate import validate_schedule
from synth.topologies import Topology, load_topology, named_topology
from tests.strategies import switch_fabrics


def _slow_loads(s: Schedule) -> dict[tuple[str, str], int]:
    loads: dict[tuple[str, str], int] = defaultdict(int)
    for route in s.routes:
        for hop in route.hops:
            for key in hop.links:
                loads[key] += route.chunks
    return dict(sorted(loads.items()))


def _slow_verdict(s: Schedule, topo: Topology) -> str | None:
    """The full checks' verdict (no route taken as a window)."""
    none = RingWindows((), (None,) * len(s.routes))
    try:
        validate_schedule(s.collective, s.nranks, s.nchunks, s.routes, topo, none)
    except ScheduleError:
        return "invalid"
    return None


def _fast_verdict(s: Schedule, topo: Topology) -> str | None:
    try:
        s.validate(topo)
    except ScheduleError:
        return "invalid"
    return None


@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "allreduce"])
@pytest.mark.parametrize("spec", ["hpn:1x2x4", "hpn:2x4x4", "dgx-h100:2", "ring:5", "nvswitch:4"])
def test_ring_routes_are_windows_and_loads_agree(spec: str, collective: str) -> None:
    topo = named_topology(spec)
    s = nccl_ring(collective, topo)
    w = ring_windows(s.routes, s.nranks)
    assert w.cycles, "an NCCL-like ring schedule has cycles"
    # every route, including those met before their cycle was closed (matched again once it is)
    assert all(x is not None for x in w.where)
    for cycle in w.cycles:
        assert sorted(h.src for h in cycle) == list(range(s.nranks))
        assert all(a.dst == b.src for a, b in zip(cycle, cycle[1:] + cycle[:1]))
    assert s.link_loads() == _slow_loads(s)
    assert _slow_verdict(s, topo) is None


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["allgather", "reducescatter", "allreduce"]), st.integers(0, 10**6), st.integers(0, 10**6),
       st.sampled_from(["swap", "drop", "root", "chunks", "dup"]))
def test_broken_ring_schedules_fail_as_the_full_checks_do(collective: str, i: int, j: int, how: str) -> None:
    """A mutated ring schedule (hops swapped or dropped, a wrong root, a duplicated route) is judged by
    the fast path exactly as by the full checks, and its loads stay exact."""
    topo = named_topology("hpn:1x2x4")
    s = nccl_ring(collective, topo)
    routes = list(s.routes)
    k = i % len(routes)
    r = routes[k]
    if how == "swap" and len(r.hops) > 2:
        a, b = j % (len(r.hops) - 1), (j % (len(r.hops) - 1)) + 1
        hops = list(r.hops)
        hops[a], hops[b] = hops[b], hops[a]
        routes[k] = replace(r, hops=tuple(hops))
    elif how == "drop":
        routes[k] = replace(r, hops=r.hops[:-1])
    elif how == "root":
        routes[k] = replace(r, root=(r.root + 1 + j % (s.nranks - 1)) % s.nranks)
    elif how == "chunks":
        routes[k] = replace(r, chunks=2)
    else:
        routes.append(routes[j % len(routes)])
    broken = Schedule(s.collective, s.nranks, s.nchunks, tuple(routes))
    assert _fast_verdict(broken, topo) == _slow_verdict(broken, topo)
    assert broken.link_loads() == _slow_loads(broken)


def test_window_needs_the_same_hops_in_order() -> None:
    topo = named_topology("ring:4")
    s = nccl_ring("allgather", topo)
    r: Route = s.routes[-1]
    reordered = replace(r, hops=r.hops[::-1])
    bad = Schedule(s.collective, s.nranks, s.nchunks, (*s.routes[:-1], reordered))
    with pytest.raises(ScheduleError, match="before it holds the data"):
        bad.validate(topo)


@pytest.mark.parametrize("spec", ["hpn:1x2x4", "hpn:2x4x4", "dgx-a100:2", "dgx-h100:2", "ring:6", "torus:3x3",
                                  "nvswitch:4", "h200-proto"])
@pytest.mark.parametrize("failure", [[], ["fail1"], ["fail2"], ["fail3"]])
def test_pair_routes_are_the_route_table(spec: str, failure: list[str]) -> None:
    try:
        topo = load_topology(spec, failure)
    except Exception:  # noqa: BLE001 - a scenario the fabric has no switch for
        pytest.skip(f"{failure} does not apply to {spec}")
    table, pairs, n = route_table(topo), PairRoutes(topo), topo.nranks
    assert {(a, b): pairs.route(a, b) for a in range(n) for b in range(n) if a != b} == \
        {(a, b): table.get((a, b)) for a in range(n) for b in range(n) if a != b}


@settings(max_examples=25, deadline=None)
@given(switch_fabrics())
def test_pair_routes_break_ties_as_the_route_table(topo: Topology) -> None:
    """Fabrics with a route choice: ties between shortest paths go the same way."""
    table, pairs, n = route_table(topo), PairRoutes(topo), topo.nranks
    for a in range(n):
        for b in range(n):
            if a != b:
                assert pairs.route(a, b) == table.get((a, b))
