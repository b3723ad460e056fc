"""The loop on the NCCL-like baseline deployed as is: detection without a synthesized cut, the reaction budget.

The baseline carries no ``bottleneck``; with an empty cut Algorithm 1 never flagged and fail2 was seen only by
the periodic recovery check (28 collectives late at 512 ranks). The manager now watches the links the
schedule saturates (:func:`runtime.loop.detector.watched_cut`). Telemetry: one sample per flow per
collective, lognormal busy-time noise and 1 % outliers at 3×; the recovery check is off, so only the
detector can flag.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

from runtime import Controller, ControllerConfig, profile_from_dict
from runtime.loop.bootstrap import fallback_schedule
from runtime.loop.estimator import ScheduleRouting
from runtime.scenarios.loadgen import collective_samples, flow_table
from synth import load_topology
from synth.result import Status

SPEC, SIZE = "hpn:1x2x8", 64 << 20


def _noisy(table, seq, t, sigma, rng):
    out = collective_samples(table, seq, t, sigma=sigma, rng=rng)
    for s in out:
        if rng.random() < 0.01:
            s["busy_s"] *= 3.0
    return out


def _run_failed(ctl, fail, events, until_version, collectives=60):
    """Feed ``collectives`` noisy collectives of the failed fabric (seed 3), polling after each; stop early once
    ``until_version`` is published."""
    rng = np.random.default_rng(3)
    t = time.time() + 10.0
    for k in range(collectives):
        ctl.ingest(_noisy(fail, k, t, 0.05, rng))
        t += 0.1
        ctl.poll(now_s=t)
        if until_version is not None and any(e["event"] == "publish" and e["version"] == until_version
                                             for e in events):
            return


def _setup(tmp_path, **config):
    topo = load_topology(SPEC)
    ring = fallback_schedule("allgather", topo)
    assert ring.bottleneck == ()
    routing = ScheduleRouting.build(ring, topo)
    healthy = flow_table(ring, topo, comm="world", version=1, size_bytes=SIZE, routing=routing)
    fail = flow_table(ring, topo, comm="world", version=1, size_bytes=SIZE, routing=routing,
                      true=topo.with_failure("fail2"))
    prof = profile_from_dict({"format": "loopcoll.profile/1", "topology": SPEC, "communicators": [
        {"name": "world", "ranks": list(range(topo.nranks)), "collectives": [{"collective": "allgather",
                                                                              "sizes": [SIZE]}]}]})
    events: list[dict] = []
    ctl = Controller(topo, prof, tmp_path, config=ControllerConfig(export_xml=False, recovery_check_s=None,
                                                                   **config), log=events.append)
    ctl.deploy("world", "allgather", ring, reason="test: the baseline as version 1")
    return ctl, events, healthy, fail


@pytest.mark.parametrize("sigma", [0.05, 0.10])
@pytest.mark.parametrize("seed", [1, 2])
def test_fail2_on_the_ring_baseline_is_flagged_by_the_detector(tmp_path, sigma, seed):
    ctl, events, healthy, fail = _setup(tmp_path)
    assert len(ctl.manager.deployed[("world", "allgather")].cut) > 0
    rng = np.random.default_rng(seed)
    t = time.time() + 10.0
    for k in range(60):
        ctl.ingest(_noisy(healthy, k, t, sigma, rng))
        t += 0.1
        ctl.poll(now_s=t)
    assert [e for e in events if e["event"] == "flag"] == []
    flagged_after = None
    for k in range(60, 80):
        ctl.ingest(_noisy(fail, k, t, sigma, rng))
        t += 0.1
        ctl.poll(now_s=t)
        flags = [e for e in events if e["event"] == "flag"]
        if flags:
            flagged_after = k - 59
            assert flags[0]["reason"].startswith("detector")
            break
    assert flagged_after is not None and flagged_after <= 13


def test_a_reaction_cut_short_by_its_budget_is_published_then_the_optimum_follows(tmp_path):
    ctl, events, _healthy, fail = _setup(tmp_path, reaction_time_limit_s=0.5, time_limit_s=20.0)
    mgr = ctl.manager
    limits: list[object] = []
    real = mgr._synthesize

    def synthesize(key, topo, warm, chunks=None, limit_s="config"):
        limits.append(limit_s)
        res = real(key, topo, warm, chunks=chunks, limit_s=limit_s)
        # the budget binds: the incumbent is what a time-limited solve returns (a schedule, status time_limit)
        return dataclasses.replace(res, status=Status.TIME_LIMIT) if limit_s == 0.5 else res

    mgr._synthesize = synthesize
    _run_failed(ctl, fail, events, until_version=None)
    flags = [e["reason"] for e in events if e["event"] == "flag"]
    pubs = [e for e in events if e["event"] == "publish"]
    assert flags[0].startswith("detector") and limits[0] == 0.5
    assert pubs[1]["version"] == 2 and pubs[1]["reason"].startswith("detector")
    assert flags[1] == "reaction: optimum (version 2 was made within the reaction budget)"
    assert limits[1] == "config"  # the optimum runs under time_limit_s
    assert not mgr.deployed[("world", "allgather")].provisional


def test_a_reaction_budget_too_short_to_build_the_schedule_runs_again_under_the_full_limit(tmp_path, monkeypatch):
    """At 1024 ranks an AllToAll's million routes are not even built within a 3 s budget: the synthesizer raises
    TimeLimitError. The manager must neither retry cold under the same budget (slower still) nor give up: it runs
    the warm re-synthesis again under ``time_limit_s`` and publishes that (not provisional)."""
    import runtime.loop.manager as manager_module
    from synth.errors import TimeLimitError

    ctl, events, _healthy, fail = _setup(tmp_path, reaction_time_limit_s=0.5, time_limit_s=20.0)
    calls: list[tuple[bool, object]] = []
    real = manager_module.synthesize

    def synthesize(collective, topo, **kw):
        calls.append((kw.get("warm_from") is not None, kw.get("time_limit_s")))
        if kw.get("time_limit_s") == 0.5:
            raise TimeLimitError("alltoall: time limit of 0.5 s (and its grace) reached while building the "
                                 "schedule (524288 of 1047552 routes built)")
        return real(collective, topo, **kw)

    monkeypatch.setattr(manager_module, "synthesize", synthesize)
    _run_failed(ctl, fail, events, until_version=2)
    kinds = [e["event"] for e in events]
    assert "synthesis_failed" not in kinds and "warm_failed" not in kinds
    missed = next(e for e in events if e["event"] == "reaction_budget_missed")
    assert "routes built" in missed["error"]
    assert calls[:2] == [(True, 0.5), (True, 20.0)]  # warm under the budget, then warm under time_limit_s
    pub = next(e for e in events if e["event"] == "publish" and e["version"] == 2)
    assert pub["reason"].startswith("detector")
    assert not ctl.manager.deployed[("world", "allgather")].provisional
    assert ("world", "allgather") in ctl.manager.budget_missed  # the next reaction skips the hopeless budget
    assert sum(limit == 0.5 for _, limit in calls) == 1
