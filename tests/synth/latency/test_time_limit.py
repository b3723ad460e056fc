"""Depth-bounded synthesis under a time limit (issue 31): the limit bounds the whole call, shared by
AllReduce's two sides and by the depth bounds of a Pareto set, and a limit hit states its certified gap."""

from __future__ import annotations

import time

import pytest

import synth.latency.bounded as bounded
import synth.latency.pareto as pareto
from synth import load_topology
from synth.latency import synthesize_depth_bounded
from synth.latency.bounded import MIN_SHARE_S, time_share
from synth.result import Status, gap_pct

#: the time between a share's computation and the spied call (argument evaluation, on a loaded machine)
GRACE_S = 0.05
SPEC = "hpn:1x4x8"  # 32 GPUs: depth 2 needs tens of column-generation rounds, more than a 1 ms limit allows


def test_a_limit_hit_returns_a_valid_schedule_with_its_certified_gap() -> None:
    r = synthesize_depth_bounded("allgather", load_topology(SPEC), 2, time_limit_s=1e-3)
    assert r.status is Status.TIME_LIMIT
    assert r.schedule is not None and r.figures.depth <= 2
    assert r.algbw_GBps <= r.optimal_algbw_GBps * (1 + 1e-9)
    assert r.gap_pct == pytest.approx(gap_pct(r.algbw_GBps, r.optimal_algbw_GBps))
    assert "time limit" in r.message


def test_allreduce_sides_never_get_more_than_the_time_left(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[float, float | None]] = []
    real = bounded.solve_depth_lp

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append((time.perf_counter(), kwargs["time_limit_s"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(bounded, "solve_depth_lp", spy)
    limit = 0.5
    start = time.perf_counter()
    synthesize_depth_bounded("allreduce", load_topology(SPEC), 2, time_limit_s=limit)
    assert len(calls) == 2
    for at, share in calls:
        assert share is not None and share <= max(MIN_SHARE_S, start + limit - at) + GRACE_S
    assert calls[0][1] <= limit / 2 + 1e-6  # the first side leaves the second its half


def test_pareto_bounds_share_one_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[float, float | None]] = []
    real = pareto.synthesize_depth_bounded

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append((time.perf_counter(), kwargs["time_limit_s"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(pareto, "synthesize_depth_bounded", spy)
    limit = 1.0
    start = time.perf_counter()
    points = pareto.pareto_set("allgather", load_topology(SPEC), depths=(1, 2, 3, None), time_limit_s=limit)
    assert calls and points
    for at, share in calls:
        assert share is not None and share <= max(MIN_SHARE_S, start + limit - at) + GRACE_S
    assert calls[0][1] <= limit / 4 + 1e-6
    for p in points:
        assert p.result.algbw_GBps <= p.result.optimal_algbw_GBps * (1 + 1e-9)


def test_time_share() -> None:
    assert time_share(None, 2) is None
    share = time_share(time.perf_counter() + 10.0, 4)
    assert share is not None and 2.4 < share <= 2.5
    assert time_share(time.perf_counter() - 5.0, 1) == MIN_SHARE_S
