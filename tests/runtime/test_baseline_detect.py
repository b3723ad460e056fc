"""The detector on a version without a synthesized cut (the NCCL-like baseline, deployed as is).

The baseline carries no ``bottleneck``; with an empty cut Algorithm 1 never flagged and fail2 was seen only by
the periodic recovery check (28 collectives late at 512 ranks). The manager now watches the links the
schedule saturates (:func:`runtime.loop.detector.watched_cut`). Telemetry: one sample per flow per
collective, lognormal busy-time noise and 1 % outliers at 3×; the recovery check is off, so only the
detector can flag.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from runtime import Controller, ControllerConfig, profile_from_dict
from runtime.loop.bootstrap import fallback_schedule
from runtime.loop.estimator import ScheduleRouting
from runtime.scenarios.loadgen import collective_samples, flow_table
from synth import load_topology

SPEC, SIZE = "hpn:1x2x8", 64 << 20


def _noisy(table, seq, t, sigma, rng):
    out = collective_samples(table, seq, t, sigma=sigma, rng=rng)
    for s in out:
        if rng.random() < 0.01:
            s["busy_s"] *= 3.0
    return out


@pytest.mark.parametrize("sigma", [0.05, 0.10])
@pytest.mark.parametrize("seed", [1, 2])
def test_fail2_on_the_ring_baseline_is_flagged_by_the_detector(tmp_path, sigma, seed):
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
    ctl = Controller(topo, prof, tmp_path, config=ControllerConfig(export_xml=False, recovery_check_s=None),
                     log=events.append)
    ctl.deploy("world", "allgather", ring, reason="test: the baseline as version 1")
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
