"""Measured (arbitrary float) capacities through every exact and LP solver path.

The property of ``synth.topologies.capacity``: capacities are rounded to one decimal grid per
topology, and every tree collective is then *exactly* optimal for the capacities as rounded
(cold, warm and the fixed-k search), AllToAll within its stated gap (HiGHS and OR-Tools).

Examples per test: ``LOOPCOLL_FUZZ_EXAMPLES`` (default 20; this module adds about 3 s to CI).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from fractions import Fraction
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth import optimal_bound, synthesize
from synth.errors import TopologyError
from synth.result import Status
from synth.topologies import Link, Topology, named_topology
from synth.topologies.capacity import INT_BUDGET, RELATIVE_FLOOR, decimal_gbps
from tests.strategies import random_topologies

T = TypeVar("T")
EXAMPLES = int(os.environ.get("LOOPCOLL_FUZZ_EXAMPLES", "20"))

#: Measured-looking floats: full 17-digit mantissas over 1e-9 … 1e6 Gbit/s, plus round values.
measured_gbps = st.one_of(
    st.builds(lambda m, e: m * 10.0**e, st.floats(1.0, 10.0, exclude_max=True), st.integers(-9, 5)),
    st.floats(1e-9, 1e6, allow_nan=False, allow_infinity=False),
    st.sampled_from([53.74569764496049, 0.3333333333333333, 400.0, 1e-9, 1e6]),
)


@st.composite
def measured_topologies(draw: st.DrawFn, symmetric: bool = True, max_gpus: int = 4) -> Topology:
    """A random small topology whose live capacities are replaced by measured floats (pairwise equal if symmetric)."""
    base = draw(random_topologies(min_gpus=2, max_gpus=max_gpus, max_switches=2, symmetric=symmetric,
                                  allow_down=False))
    new: dict[tuple[str, str], float] = {}
    for lk in base.links:
        if lk.key in new:
            continue
        new[lk.key] = draw(measured_gbps)
        if symmetric and base.has_link(lk.dst, lk.src):
            new[(lk.dst, lk.src)] = new[lk.key]
    return base.with_links([Link(lk.src, lk.dst, new[lk.key], lk.latency_us) for lk in base.links])


def _brute_force_allgather_gbps(topo: Topology, capacity: Callable[[Link], Fraction] | None = None) -> Fraction:
    """min over node sets S (some GPU in, some out) of B+(S)/|S ∩ GPUs|, on the rounded capacities
    (or on ``capacity(link)``: tests/synth/test_extreme_capacities.py passes the unrounded decimals)."""
    cap = capacity or (lambda lk: topo.exact_capacity(*lk.key))
    ids = [n.id for n in topo.nodes]
    gpus = {g.id for g in topo.gpus}
    best: Fraction | None = None
    for size in range(1, len(ids)):
        for subset in itertools.combinations(ids, size):
            s = set(subset)
            inside = len(s & gpus)
            if inside == 0 or inside == len(gpus):
                continue
            out = sum((cap(lk) for lk in topo.live_links if lk.src in s and lk.dst not in s), Fraction(0))
            ratio = out / inside
            best = ratio if best is None or ratio < best else best
    assert best is not None
    return best


@settings(max_examples=EXAMPLES * 4)
@given(measured_topologies(symmetric=False, max_gpus=6))
def test_grid_is_exact_bounded_and_never_zeroes_a_live_link(topo: Topology) -> None:
    grid = topo.capacity_grid
    step = grid.step_gbps
    n = topo.nranks
    units = 0
    # Rule 0: a dominant link reads as N × the other live links' sum (tests/synth/test_extreme_capacities.py).
    clamp = n * sum((decimal_gbps(lk.gbps) for lk in topo.live_links if lk.key not in grid.clamped), Fraction(0))
    assert all(value > clamp for value in grid.clamped.values())

    def reading(lk: Link) -> Fraction:
        return clamp if lk.key in grid.clamped else decimal_gbps(lk.gbps)

    floor = max(reading(lk) for lk in topo.links) * RELATIVE_FLOOR
    for lk in topo.links:
        exact, dec = grid.caps[lk.key], reading(lk)
        assert (exact % step) == 0
        if dec == 0:
            assert exact == 0
            continue
        assert exact > 0, f"{lk.key} rounded to 0"
        dec = max(dec, floor)
        assert abs(exact - dec) <= step / 2 or (dec < step / 2 and exact == step)
        units += int(exact / step)
    assert n * n * units <= INT_BUDGET
    assert grid.rounded == any(grid.caps[lk.key] != decimal_gbps(lk.gbps) for lk in topo.links)
    assert max(grid.caps.values()) <= max(decimal_gbps(lk.gbps) for lk in topo.links) + step / 2


def test_exactly_representable_capacities_are_not_rounded() -> None:
    t = named_topology("hpn:1x2x8").with_failure("scale:gpu0:tor0.0:0.1")
    assert not t.capacity_grid.rounded
    assert t.exact_capacity("gpu0", "tor0.0") == Fraction(40)  # 400 · 0.1 as the float prints it


@pytest.mark.parametrize("failure", ["scale:gpu0:tor0.0:0.3333333333333333", "scale:gpu0:nvs0.0:0.5374569764496049"])
@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "allreduce"])
def test_issue_repro_measured_failure_is_exactly_optimal(collective: str, failure: str) -> None:
    topo = named_topology("hpn:1x2x8").with_failure(failure)
    res = synthesize(collective, topo)  # type: ignore[arg-type]
    bound = optimal_bound(collective, topo)  # type: ignore[arg-type]
    assert res.status is Status.OPTIMAL and res.schedule is not None and res.gap_pct == 0.0
    res.schedule.validate(topo)
    assert res.schedule.rate_GBps(topo) == bound.rate_GBps


def _unless_refused(topo: Topology, call: Callable[[], T]) -> T | None:
    """``call()``, or None when it refused with TopologyError, which only a fabric with links lifted to
    the solvers' resolution may do (docs/exactness.md, "Extreme capacity ratios")."""
    try:
        return call()
    except TopologyError:
        assert topo.capacity_grid.lifted, "refused a fabric with no lifted link"
        return None


@settings(max_examples=EXAMPLES)
@given(measured_topologies(symmetric=True), st.sampled_from(["allgather", "reducescatter", "allreduce"]),
       measured_gbps.map(lambda g: min(g / 1e6, 1.0)))
def test_tree_collectives_exact_on_rounded_capacities_cold_warm_fixed_k(topo: Topology, collective: str,
                                                                       factor: float) -> None:
    bound = _unless_refused(topo, lambda: optimal_bound(collective, topo))  # type: ignore[arg-type]
    if bound is None:
        return
    if collective == "allgather":
        assert bound.rate_GBps == _brute_force_allgather_gbps(topo) / 8
    cold = _unless_refused(topo, lambda: synthesize(collective, topo, routing="free"))  # type: ignore[arg-type]
    if cold is None:
        return
    assert cold.status is Status.OPTIMAL and cold.schedule is not None, cold.message
    cold.schedule.validate(topo)
    rate = cold.schedule.rate_GBps(topo)
    if collective == "allreduce":
        assert rate >= bound.rate_GBps  # may beat the sequential RS+AG bound (see forestcoll_warm)
    else:
        assert rate == bound.rate_GBps and cold.gap_pct == 0.0

    # Warm: a measured degradation of one live link, re-synthesized from the cold schedule.
    lk = topo.live_links[0]
    degraded = topo.with_failure(f"scale:{lk.src}:{lk.dst}:{factor!r}") if factor > 0 else topo
    warm = _unless_refused(degraded, lambda: synthesize(collective, degraded, warm_from=cold, routing="free"))  # type: ignore[arg-type]
    if warm is None:
        return
    assert warm.status is Status.OPTIMAL and warm.schedule is not None, warm.message
    warm.schedule.validate(degraded)
    warm_bound = optimal_bound(collective, degraded)  # type: ignore[arg-type]  # certified with warm's
    if collective != "allreduce":
        assert warm.schedule.rate_GBps(degraded) == warm_bound.rate_GBps

    # Fixed-k search: a valid schedule with at most 2 chunks per source, never above the bound.
    capped = synthesize(collective, topo, chunks=2, routing="free")  # type: ignore[arg-type]  # free optimum (issue 16)
    assert capped.schedule is not None and capped.schedule.nchunks <= 2
    capped.schedule.validate(topo)
    if collective != "allreduce":
        assert capped.schedule.rate_GBps(topo) <= bound.rate_GBps


@settings(max_examples=EXAMPLES)
@given(measured_topologies(symmetric=False), st.sampled_from(["highs", "ortools"]))
def test_alltoall_within_stated_gap_on_measured_capacities(topo: Topology, solver: str) -> None:
    bound = _unless_refused(topo, lambda: optimal_bound("alltoall", topo))
    if bound is None:
        return
    res = _unless_refused(topo, lambda: synthesize("alltoall", topo, chunks=4, solver=solver))
    if res is None:
        return
    assert res.schedule is not None, res.message
    res.schedule.validate(topo)
    algbw = res.schedule.algbw_GBps(topo)
    assert algbw == pytest.approx(res.algbw_GBps, rel=1e-9)
    assert algbw <= bound.algbw_GBps * (1 + 1e-6)
    assert algbw >= res.optimal_algbw_GBps * (1 - res.gap_pct / 100) * (1 - 1e-6)
