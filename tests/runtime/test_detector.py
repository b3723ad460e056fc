"""MCCL Algorithm 1: hand-computed verdicts and properties on random topologies and synthesized schedules."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from runtime.loop.detector import VerdictCache, detect, verdict_for_schedule
from runtime.loop.estimator import LinkEstimator
from synth import CutLink, Schedule, load_topology, synthesize
from tests.strategies import random_topologies

GAMMA = 0.1
# Three links: a (2 chunks) and b (1 chunk, base slack 0.5) form the cut K_s; c is off the cut.
LOADS = {("x", "a"): 2, ("x", "b"): 1, ("x", "c"): 4}
CUT = (CutLink("x", "a", 0.0), CutLink("x", "b", 0.5))
CAPS = {("x", "a"): 10.0, ("x", "b"): 10.0, ("x", "c"): 100.0}


def test_hand_computed_nominal() -> None:
    v = detect(LOADS, CUT, CAPS, gamma=GAMMA)
    # x_min = min(10/2, 10/1, 100/4) = 5 on a; slack_a = 0, slack_b = (10 - 5)/10 = 0.5 = base.
    assert (v.flagged, v.x_min_gbps, v.x_min_link, v.max_delta) == (False, 5.0, ("x", "a"), 0.0)
    assert [(d.slack, d.delta) for d in v.deviations] == [(0.0, 0.0), (0.5, 0.0)]


def test_hand_computed_cut_link_degrades() -> None:
    v = detect(LOADS, CUT, {**CAPS, ("x", "a"): 6.0}, gamma=GAMMA)
    # x_min = 3; slack_a = 0; slack_b = (10 - 3)/10 = 0.7, delta_b = 0.2 > 0.1.
    assert v.flagged and v.x_min_gbps == 3.0 and v.deciding == (("x", "b"),)
    assert v.max_delta == pytest.approx(0.2)


def test_hand_computed_new_bottleneck_off_the_cut() -> None:
    v = detect(LOADS, CUT, {**CAPS, ("x", "c"): 16.0}, gamma=GAMMA)
    # x_min = 16/4 = 4 on c; slack_a = (10 - 8)/10 = 0.2 (delta 0.2); slack_b = 0.6 (delta 0.1, not > 0.1).
    assert v.flagged and v.x_min_link == ("x", "c") and v.deciding == (("x", "a"),)
    assert [round(d.delta, 12) for d in v.deviations] == [0.2, 0.1]


def test_hand_computed_off_cut_degradation_that_stays_non_binding() -> None:
    v = detect(LOADS, CUT, {**CAPS, ("x", "c"): 24.0}, gamma=GAMMA)  # 24/4 = 6 > x_min 5
    assert not v.flagged and v.max_delta == 0.0


def test_hand_computed_uniform_scaling_and_down_link() -> None:
    assert not detect(LOADS, CUT, {k: 0.37 * c for k, c in CAPS.items()}, gamma=GAMMA).flagged
    v = detect(LOADS, CUT, {**CAPS, ("x", "c"): 0.0}, gamma=GAMMA)
    assert v.flagged and v.deciding == (("x", "c"),) and "down" in v.message
    assert not detect({}, (), {}, gamma=GAMMA).flagged
    with pytest.raises(ValueError, match="gamma"):
        detect(LOADS, CUT, CAPS, gamma=math.nan)


def _caps(topo) -> dict:
    return {lk.key: lk.gbps for lk in topo.links}


@st.composite
def schedules(draw: st.DrawFn) -> tuple:
    """A topology (named or random) and a schedule synthesized on it, with its nominal capacities."""
    kind = draw(st.sampled_from(["named", "random"]))
    if kind == "named":
        spec, coll = draw(st.sampled_from([("hpn:1x2x4", "allgather"), ("hpn:1x2x4", "alltoall"),
                                           ("ring:4", "allgather"), ("nvswitch:4", "allgather")]))
        topo = load_topology(spec)
    else:
        topo = draw(random_topologies(min_gpus=2, max_gpus=4, max_switches=2, symmetric=True, allow_down=False))
        coll = "allgather"
    res = synthesize(coll, topo, chunks=8 if coll == "allgather" else 4)
    assume(res.schedule is not None)
    return topo, res.schedule


def _settle(topo, sched: Schedule, target: dict) -> dict:
    """Feed every used link's target capacity into an EWMA (alpha = 0.012) until it settled."""
    est = LinkEstimator(topo, alpha=0.012)
    for key in sched.link_loads():
        for _ in range(2500):  # (1 - 0.012)^2500 ~ 7e-14
            est.update(key, target[key], 0.0)
    return est.capacities_gbps(sched.link_loads())


PROPS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(schedules(), st.floats(0.05, 1.0))
def test_uniform_scaling_after_the_ewma_settled_never_flags(case: tuple, factor: float) -> None:
    topo, sched = case
    nominal = verdict_for_schedule(sched, _caps(topo), gamma=GAMMA)
    assert not nominal.flagged and nominal.max_delta <= 1e-9
    scaled = _settle(topo, sched, {k: factor * c for k, c in _caps(topo).items()})
    assert not verdict_for_schedule(sched, scaled, gamma=GAMMA).flagged


@PROPS
@given(schedules(), st.floats(0.0, 0.95), st.data())
def test_off_cut_degradation_that_stays_non_binding_never_flags(case: tuple, depth: float, data: st.DataObject) -> None:
    topo, sched = case
    caps = _caps(topo)
    slacks = sched.slacks(topo)
    cut = {(c.src, c.dst) for c in sched.bottleneck}
    off = sorted(k for k, s in slacks.items() if k not in cut and s > 1e-6)
    unused = sorted(k for k in caps if k not in slacks)
    assume(off or unused)
    key = data.draw(st.sampled_from(off + unused))
    # keep it non-binding: lose at most `depth` of its slack (any amount on an unused link)
    new = caps[key] * (1 - depth * slacks[key]) if key in slacks else caps[key] * (1 - depth)
    assert not verdict_for_schedule(sched, {**caps, key: new}, gamma=GAMMA).flagged


@PROPS
@given(schedules(), st.floats(GAMMA + 0.02, 0.95), st.data())
def test_degrading_a_cut_link_flags_when_another_cut_link_remains(case: tuple, depth: float,
                                                                  data: st.DataObject) -> None:
    topo, sched = case
    caps = _caps(topo)
    loads = sched.link_loads()
    saturated = sorted((c.src, c.dst) for c in sched.bottleneck if loads.get((c.src, c.dst), 0) > 0
                       and c.base_slack <= 1e-9)
    assume(len(saturated) >= 2)
    key = data.draw(st.sampled_from(saturated))
    v = verdict_for_schedule(sched, {**caps, key: caps[key] * (1 - depth)}, gamma=GAMMA)
    assert v.flagged and v.max_delta == pytest.approx(depth, rel=1e-6)


@PROPS
@given(schedules(), st.floats(GAMMA + 0.02, 0.95), st.data())
def test_a_new_bottleneck_off_the_cut_flags(case: tuple, depth: float, data: st.DataObject) -> None:
    topo, sched = case
    caps = _caps(topo)
    loads = sched.link_loads()
    cut = {(c.src, c.dst) for c in sched.bottleneck}
    off = sorted(k for k in loads if k not in cut)
    assume(off and any(loads.get(k, 0) > 0 for k in cut))
    key = data.draw(st.sampled_from(off))
    x_min = min(caps[k] / n for k, n in loads.items())
    v = verdict_for_schedule(sched, {**caps, key: loads[key] * x_min * (1 - depth)}, gamma=GAMMA)
    assert v.flagged and v.x_min_link == key


@PROPS
@given(schedules(), st.floats(0.15, 1.0), st.integers(1, 60), st.data())
def test_microbursts_below_gamma_after_smoothing_never_flag(case: tuple, depth: float, burst: int,
                                                            data: st.DataObject) -> None:
    """A burst of `burst` observations at (1 - depth) of capacity moves the EWMA by depth*(1-(1-a)^burst)."""
    alpha = 0.012
    effect = depth * (1 - (1 - alpha) ** burst)
    assume(effect < GAMMA - 1e-3)
    topo, sched = case
    caps = _caps(topo)
    loads = sched.link_loads()
    key = data.draw(st.sampled_from(sorted(loads)))
    est = LinkEstimator(topo, alpha=alpha)
    for _ in range(burst):
        est.update(key, caps[key] * (1 - depth), 0.0)
    assert est.estimate_gbps(key) == pytest.approx(caps[key] * (1 - effect), rel=1e-9)
    assert not verdict_for_schedule(sched, est.capacities_gbps(loads), gamma=GAMMA).flagged


def test_the_documented_burst_allowance_for_the_default_alpha() -> None:
    # docs/controller.md section 3: depth -> longest burst (observations) that never flags at gamma 0.1
    allowed = {1.0: 8, 0.75: 11, 0.5: 18, 0.25: 42, 0.15: 91}
    for depth, b in allowed.items():
        assert depth * (1 - 0.988 ** b) <= GAMMA < depth * (1 - 0.988 ** (b + 1))


def test_verdict_cache_follows_every_estimate_change() -> None:
    """A cached verdict is reused while no estimate moved, recomputed (and flags) once the cut's link degrades,
    and equals :func:`detect` on the same estimates throughout."""
    topo = load_topology("hpn:1x2x4")
    sched = synthesize("allgather", topo).schedule
    cut = sched.bottleneck_for(topo)
    est, cache = LinkEstimator(topo, alpha=1.0), VerdictCache()
    healthy = cache.verdict("k", sched, cut, est, 0.9)
    assert not healthy.flagged and cache.verdict("k", sched, cut, est, 0.9) is healthy
    est.update((cut[0].src, cut[0].dst), 4.0, t_s=1.0)  # 1 % of nominal
    degraded = cache.verdict("k", sched, cut, est, 0.9)
    loads = sched.link_loads()
    assert degraded.flagged and degraded == detect(loads, cut, est.capacities_gbps(loads), gamma=0.9)
    est.reset()
    assert not cache.verdict("k", sched, cut, est, 0.9).flagged
