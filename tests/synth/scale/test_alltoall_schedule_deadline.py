"""AllToAll schedule building honours the time limit (issue 31, "Scale": at 2048 GPUs building the ~4 M
routes has no deadline, so a 60 s limit was not honoured once the LP was solved). The column generation
and the rounding leave :func:`schedule_reserve_s` for it; past the limit plus ``SCHEDULE_GRACE_S`` it
stops with a :class:`TimeLimitError` that names the phase and carries the LP's proven bound."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.alltoall_cg import _schedule
from synth.alltoall_cg import alltoall_lp_bound, synthesize_alltoall
from synth.alltoall_cg._schedule import RouteCache, make_routes
from synth.alltoall_cg._schedule import schedule_reserve_s
from synth.errors import TimeLimitError
from synth.result import Status
from synth.routed.fabrics import random_fabric
from synth.topologies import load_topology


def test_overrun_names_the_phase_and_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """No grace and small batches: on 256 GPUs (65 280 routes) an expired limit stops the build. (The checks
    between the earlier phases, tested in test_synthesize.py, are switched off here: they would stop it first.)"""
    import synth.alltoall_cg.synthesize as a2a

    monkeypatch.setattr(_schedule, "SCHEDULE_GRACE_S", 0.0)
    monkeypatch.setattr(_schedule, "ROUTE_BATCH", 1024)
    monkeypatch.setattr(a2a, "check_end", lambda *args, **kwargs: None)
    topo = load_topology("hpn:2x16x8", ["fail2"])
    limit_s = 0.05
    start = time.perf_counter()
    with pytest.raises(TimeLimitError, match=r"while building the schedule \(\d+ of 65280 routes built\)") as info:
        synthesize_alltoall(topo, nchunks=None, time_limit_s=limit_s)
    assert time.perf_counter() - start < limit_s + 5.0
    exact = alltoall_lp_bound(topo)
    assert exact.optimal
    assert info.value.upper_algbw_GBps is not None
    assert info.value.upper_algbw_GBps >= exact.algbw_GBps * (1 - 1e-9)  # a proven bound, never below the optimum


def test_small_fabric_still_gets_its_schedule_within_the_grace() -> None:
    """An expired limit on a small fabric: the schedule is built within the grace and returned."""
    topo = load_topology("hpn:1x8x8", ["fail2"])
    start = time.perf_counter()
    res = synthesize_alltoall(topo, nchunks=4, time_limit_s=1e-6)
    assert time.perf_counter() - start < 1e-6 + _schedule.SCHEDULE_GRACE_S + 5.0
    assert res.status in (Status.OPTIMAL, Status.TIME_LIMIT)
    assert res.schedule is not None
    res.schedule.validate(topo)


def test_reserve_is_at_most_half_the_limit() -> None:
    assert schedule_reserve_s(2048, 60.0) == pytest.approx(min(_schedule.ROUTE_COST_S * 2048**2, 30.0))
    assert schedule_reserve_s(2048, 4.0) == 2.0
    assert schedule_reserve_s(8, 60.0) < 1e-3


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(6, 16), batch=st.integers(1, 50))
def test_batched_routes_equal_one_batch(seed: int, n: int, batch: int) -> None:
    """Routes built in batches (a deadline check between each) are the routes built at once."""
    topo = random_fabric(seed, n)
    res = synthesize_alltoall(topo, nchunks=3)
    assert res.schedule is not None and res.warm_state is not None and res.warm_state.rounded is not None
    rounded = res.warm_state.rounded
    paths = res.warm_state.paths
    whole = make_routes(paths, rounded.route_pid, rounded.route_chunks, RouteCache())
    old = _schedule.ROUTE_BATCH
    try:
        _schedule.ROUTE_BATCH = batch
        batched = make_routes(paths, rounded.route_pid, rounded.route_chunks, RouteCache())
    finally:
        _schedule.ROUTE_BATCH = old
    assert batched == whole == list(res.schedule.routes)
    assert len(whole) == len(rounded.route_pid)
