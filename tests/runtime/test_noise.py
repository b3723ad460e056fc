"""The loop under noisy telemetry (issue 32): lognormal busy-time noise plus rare 3x outliers.

The end-to-end test runs 2 seeds per noise level by default; ``LOOPCOLL_NOISE_SEEDS=5`` runs the
acceptance's 5 (docs/controller.md §2, "Noise"). ``LOOPCOLL_HEAVY=1`` adds the hpn:1x2x8 AllReduce and ReduceScatter fail2 runs.
"""

from __future__ import annotations

import math
import os
import statistics

import pytest

from runtime.errors import ProfileError
from runtime.loop.estimator import LinkEstimator, ScheduleRouting
from runtime.scenarios.noise import TimingNoise
from runtime.scenarios.timeline import TimelineResult, _samples, run_timeline, scenario_from_dict
from synth import Schedule, Topology, load_topology, synthesize
from synth.simulation import TransferTimes, simulate_transfers

SEEDS = int(os.environ.get("LOOPCOLL_NOISE_SEEDS", "2"))
HEAVY = os.environ.get("LOOPCOLL_HEAVY") == "1"
LEVELS = [(0.05, 0.01), (0.10, 0.01)]  # (lognormal sigma, outlier fraction); outliers at 3x busy time
FAIL2_LINKS = {("gpu0", "tor0.0"), ("tor0.0", "gpu0"), ("gpu8", "tor0.0"), ("tor0.0", "gpu8")}  # and its rail twin


def test_noise_model_is_seeded_and_validated() -> None:
    s = {"kind": "pair", "src": 0, "dst": 1, "bytes": 100, "busy_s": 1.0}
    a = [x["busy_s"] for x in TimingNoise(0.05, 0.01, seed=3).apply([s] * 20_000)]
    assert a == [x["busy_s"] for x in TimingNoise(0.05, 0.01, seed=3).apply([s] * 20_000)]
    assert a != [x["busy_s"] for x in TimingNoise(0.05, 0.01, seed=4).apply([s] * 20_000)]
    logs = [math.log(x) for x in a if x < 2.0]
    assert statistics.pstdev(logs) == pytest.approx(0.05, rel=0.05)
    assert sum(x > 2.0 for x in a) / len(a) == pytest.approx(0.01, abs=0.003)  # the 3x outliers
    with pytest.raises(ProfileError, match="outlier_factor"):
        TimingNoise(0.05, 0.01, outlier_factor=0.5)
    with pytest.raises(ProfileError, match="sigma"):
        TimingNoise(-0.1)


@pytest.fixture(scope="module")
def hpn16() -> tuple[Topology, Schedule, TransferTimes, TransferTimes]:
    """hpn:1x2x8's AllGather and its simulated transfers (16 MiB per rank), healthy and under fail2."""
    topo = load_topology("hpn:1x2x8")
    sched = synthesize("allgather", topo).schedule
    healthy_tt, fail2_tt = (simulate_transfers(sched, t, 16 << 24, slices_per_chunk=4, check=False)
                            for t in (topo, topo.with_failure("fail2")))
    return topo, sched, healthy_tt, fail2_tt


@pytest.mark.parametrize("sigma,outliers", LEVELS)
def test_healthy_links_estimated_within_5_percent_under_fail2(
        hpn16: tuple[Topology, Schedule, TransferTimes, TransferTimes], sigma: float, outliers: float) -> None:
    # fails on main: relays paced by their slow input, kept as evidence on one noisy pair of samples,
    # drag healthy NVLinks (2880 Gbit/s) towards ~340 Gbit/s
    topo, sched, healthy_tt, fail2_tt = hpn16
    routing = ScheduleRouting.build(sched, topo)
    host = {g.rank: g.host for g in topo.gpus if g.rank is not None}
    est = LinkEstimator(topo)  # alpha 0.012, the controller default
    noise = TimingNoise(sigma, outliers, seed=1)
    for seq in range(140):  # 20 healthy collectives, then fail2
        tt = healthy_tt if seq < 20 else fail2_tt
        rows = noise.apply(_samples(tt, 0.0, "world", "allgather", seq, 1, list(range(topo.nranks)), host))
        est.observe_group(routing, [(r["kind"], r["src"], r["dst"], r["bytes"], r["busy_s"]) for r in rows], t_s=0.0)
    healthy = [x for x in est.snapshot() if (x.src, x.dst) not in FAIL2_LINKS]
    assert len(healthy) > 30
    worst = min(healthy, key=lambda x: x.estimate_gbps / x.nominal_gbps)
    assert worst.estimate_gbps >= 0.95 * worst.nominal_gbps, worst
    assert est.estimate_gbps(("gpu0", "tor0.0")) < 0.6 * 400  # the failed link is found (the EWMA still falling)


def _fail2(noise: TimingNoise | None) -> TimelineResult:
    return run_timeline(scenario_from_dict({
        "format": "loopcoll.scenario/1", "topology": "hpn:1x2x8", "duration_s": 0.08,
        "workload": [{"comm": "world", "collective": "allgather", "size_bytes": 16 << 24}],
        "events": [{"start_s": 0.002, "end_s": None, "failure": "fail2"}], "charge_synth_s": 0.002}), noise=noise)


def _adapted_GBps(res: TimelineResult) -> float:
    v = res.changes[0].version_after
    return statistics.median(r["algbw_GBps"] for r in res.rows if r["version"] == v)


@pytest.fixture(scope="module")
def noise_free() -> TimelineResult:
    return _fail2(None)


@pytest.mark.parametrize("seed", range(SEEDS))
@pytest.mark.parametrize("sigma,outliers", LEVELS)
def test_fail2_adapts_under_noise(noise_free: TimelineResult, sigma: float, outliers: float, seed: int) -> None:
    # fails on main at 10 % (no_gain: v1 kept at 55 GB/s) and in some 5 % seeds
    (ref,) = noise_free.changes
    assert ref.detection_collectives == 11 and ref.version_after == 2  # the documented noise-free figure
    res = _fail2(TimingNoise(sigma, outliers, seed=seed))
    (c,) = res.changes
    assert c.version_after == 2 and res.false_positives == 0
    assert c.detection_collectives <= ref.detection_collectives + 2
    assert _adapted_GBps(res) >= 0.95 * _adapted_GBps(noise_free)


def test_no_publication_over_5000_noisy_healthy_collectives() -> None:
    res = run_timeline(scenario_from_dict({
        "format": "loopcoll.scenario/1", "topology": "hpn:1x2x2", "duration_s": 0.112,
        "workload": [{"comm": "world", "collective": "allgather", "size_bytes": 4 << 20}], "events": [],
        "fast_forward": False}),
        noise=TimingNoise(0.10, 0.01, seed=2))
    assert len(res.rows) >= 5000 and not any(r.get("fast_forward") for r in res.rows)
    assert res.publications == 0 and res.syntheses == 1 and res.false_positives == 0  # bootstrap only


def _fail2_reducing(collective: str, topology: str, noise: TimingNoise | None) -> TimelineResult:
    return run_timeline(scenario_from_dict({
        "format": "loopcoll.scenario/1", "topology": topology, "duration_s": 0.06,
        "workload": [{"comm": "world", "collective": collective, "size_bytes": 16 << 20}],
        "events": [{"start_s": 0.002, "end_s": None, "failure": "fail2"}], "charge_synth_s": 0.002}), noise=noise)


@pytest.mark.parametrize("collective,topology", [
    ("allreduce", "hpn:1x2x4"), ("reducescatter", "hpn:1x2x4"),
    *(pytest.param(c, "hpn:1x2x8", marks=pytest.mark.skipif(not HEAVY, reason="LOOPCOLL_HEAVY=1 (~20 s each)"))
      for c in ("allreduce", "reducescatter"))])
def test_reductions_feed_the_loop_under_noise(collective: str, topology: str) -> None:
    # fails on main: every AllReduce/ReduceScatter sample was skipped (reduction_phase), so nothing is detected
    ref = _fail2_reducing(collective, topology, None)
    res = _fail2_reducing(collective, topology, TimingNoise(0.05, 0.0, seed=3))
    for r in (ref, res):
        (c,) = r.changes
        assert c.version_after == 2 and r.false_positives == 0, c
        assert c.detection_collectives is not None and c.detection_collectives <= 20
        assert c.speedup is not None and c.speedup > 3.0, c  # adapted: the stale version runs at ~1/5 of it
    assert _adapted_GBps(res) >= 0.95 * _adapted_GBps(ref)
    v2 = [d for d in res.decisions if d.get("event") == "publish" and d.get("version") == 2]
    assert [(d["comm"], d["collective"]) for d in v2] == [("world", collective)]


def test_no_publication_over_noisy_healthy_allreduces() -> None:
    res = run_timeline(scenario_from_dict({
        "format": "loopcoll.scenario/1", "topology": "hpn:1x2x2", "duration_s": 0.05,
        "workload": [{"comm": "world", "collective": "allreduce", "size_bytes": 4 << 20}], "events": [],
        "fast_forward": False}), noise=TimingNoise(0.10, 0.01, seed=5))
    assert len(res.rows) >= 1000 and not any(r.get("fast_forward") for r in res.rows)
    assert res.publications == 0 and res.syntheses == 1 and res.false_positives == 0  # bootstrap only
