"""A DDP-only job on the live loop (issue 32): a loopcoll daemon on loopback, gloo ranks training a DDP model
whose gradient AllReduce runs through ``ddp_comm_hook``; fail2 is emulated as ``loopcoll demo --live`` does
(runtime.executor.throttle) and the loop must detect it, re-synthesize the AllReduce and switch to it."""

from __future__ import annotations

import secrets
import statistics
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from runtime import Controller, ControllerConfig, profile_from_dict, serve  # noqa: E402
from runtime.executor.launch import launch  # noqa: E402
from runtime.executor.throttle import Emulation, Fault  # noqa: E402
from runtime.scenarios.live_config import LIVE_CONTROLLER  # noqa: E402
from tests.runtime import reduction_workers as W  # noqa: E402

STEPS = 120
FAULT_SEQ = 31  # fail2 from the 31st AllReduce (one bucket per step) to the end


def test_ddp_only_job_adapts_to_fail2(tmp_path: Path) -> None:
    # fails on main: AllReduce samples were skipped (reduction_phase), so a DDP-only job never adapted
    emu = Emulation("hpn:1x2x2", 1000.0, (Fault(failure="fail2", start_seq=FAULT_SEQ),))
    topo = emu.scaled_topology()
    world = topo.nranks
    hosts = [g.host if g.host is not None else 0 for g in topo.gpus]
    nparams = 32 * W.HIDDEN + W.HIDDEN + W.HIDDEN * 4 + 4
    profile = profile_from_dict({"format": "loopcoll.profile/1", "topology": "hpn:1x2x2", "communicators": [
        {"name": "world", "ranks": list(range(world)),
         "collectives": [{"collective": "allreduce", "sizes": [nparams * 4]}]}]})
    events: list[dict] = []
    ctl = Controller(topo, profile, tmp_path, config=ControllerConfig(**LIVE_CONTROLLER), log=events.append)
    token = secrets.token_hex(16)
    handle = serve(ctl, token=token, store_dir=tmp_path, poll_interval_s=0.05, log=lambda rec: None)
    try:
        ranks = launch(W.ddp_live, world, handle.address, token, emu.to_dict(), hosts, STEPS, timeout_s=240)
    finally:
        handle.close()
    kinds = [e["event"] for e in events]
    assert "flag" in kinds, kinds
    pubs = [e for e in events if e["event"] == "publish" and e["version"] >= 2]
    assert pubs and all(e["collective"] == "allreduce" for e in pubs), kinds
    assert pubs[0]["t_s"] >= next(e["t_s"] for e in events if e["event"] == "flag")
    for r in ranks:
        assert r["same_params"] and r["sent_samples"] > 0
        versions = [v for _seq, coll, v in r["history"] if coll == "allreduce"]
        assert len(versions) == STEPS and versions[0] == 1 and versions[-1] >= 2, versions  # switched mid-training
        assert versions.index(versions[-1]) >= FAULT_SEQ  # after the fault, not before
        assert any(sw.get("allreduce") for sw in r["swaps"])
    versions = [v for _seq, _coll, v in ranks[0]["history"]]
    switched = versions.index(versions[-1])
    step_s = ranks[0]["step_s"]
    healthy, stale, after = (statistics.median(step_s[a:b]) for a, b in
                             ((5, FAULT_SEQ - 1), (FAULT_SEQ, switched), (STEPS - 20, STEPS)))
    assert stale > 1.3 * healthy and after < stale, (healthy, stale, after)  # fail2 slowed it; the new version is faster
