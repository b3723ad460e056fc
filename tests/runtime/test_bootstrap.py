"""Bootstrap that always starts (issue 32 item 5): a provisional version 1 within the bootstrap budget, the
optimum as version 2 at the next poll, and ``daemon status`` telling them apart."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from loopcoll._cmd_daemon import render_status
from runtime import Controller, ControllerConfig, profile_from_dict
from runtime.errors import ProfileError
from runtime.loop.bootstrap import BUDGET_REASON, FALLBACK_REASON
from runtime.service.client import Client
from runtime.service.daemon import serve
from synth import load_topology

SPEC = "hpn:1x4x8"  # 32 GPUs: the optimum takes far longer than the 1 ms budget
# AllToAll on hpn is proven optimal by its first master (the host cut bound, issue 31): the torus
# (no switch cut is tight there) keeps the 1 ms budget binding.
SPECS = {"allgather": SPEC, "alltoall": "torus:4x4"}
TOKEN = "t" * 32


def _controller(store: str, collective: str = "allgather", clock: Callable[[], float] = lambda: 0.0,
                **cfg: object) -> Controller:
    spec = SPECS.get(collective, SPEC)
    topo = load_topology(spec)
    prof = profile_from_dict({"format": "loopcoll.profile/1", "topology": spec, "communicators": [
        {"name": "world", "ranks": list(range(topo.nranks)),
         "collectives": [{"collective": collective, "sizes": [1 << 24]}]}]})
    config = ControllerConfig(**{"bootstrap_time_limit_s": 1e-3, "time_limit_s": None, **cfg})  # type: ignore[arg-type]
    return Controller(topo, prof, store, config=config, clock=clock)


@pytest.mark.parametrize("collective", ["allgather", "alltoall"])
def test_budget_bound_bootstrap_publishes_fallback_then_optimum(tmp_path: object, collective: str) -> None:
    ctl = _controller(str(tmp_path), collective, export_xml=collective == "allgather")
    (v1,) = ctl.bootstrap()  # on main: RuntimeStateError (no schedule within the limit)
    # AllGather: no schedule within 1 ms -> the NCCL-like ring; AllToAll: the time-capped incumbent, honestly
    assert (v1.version, v1.reason) == (1, FALLBACK_REASON if collective == "allgather" else BUDGET_REASON)
    assert v1.status != "optimal"
    assert v1.bands[0].schedule is not None  # deployable: a schedule for every band (XML fitted when exported)
    assert collective != "allgather" or v1.bands[0].xml is not None
    deployed = ctl.status()["deployed"][f"world/{collective}"]
    assert deployed["provisional"] is True and deployed["reason"] == v1.reason
    (v2,) = ctl.poll()  # the optimum: published as it beats version 1
    assert v2.version == 2 and v2.reason.startswith("bootstrap: optimum")
    assert v2.algbw_GBps > v1.algbw_GBps
    assert ctl.status()["deployed"][f"world/{collective}"]["provisional"] is False
    assert ctl.poll() == []  # one optimum, no churn


def test_unbound_bootstrap_is_unchanged(tmp_path: object) -> None:
    ctl = _controller(str(tmp_path), bootstrap_time_limit_s=None, export_xml=False)
    (v1,) = ctl.bootstrap()
    assert v1.reason == "bootstrap"
    assert ctl.status()["deployed"]["world/allgather"]["provisional"] is False
    assert ctl.poll() == []


@pytest.mark.parametrize("bad", [0, -1.0, True, "1"])
def test_bad_bootstrap_budget_is_refused(tmp_path: object, bad: object) -> None:
    with pytest.raises(ProfileError, match="bootstrap_time_limit_s"):
        _controller(str(tmp_path), bootstrap_time_limit_s=bad)


def test_daemon_serves_fallback_then_optimum(tmp_path: object) -> None:
    ctl = _controller(str(tmp_path), clock=time.time, export_xml=False)
    with serve(ctl, token=TOKEN, store_dir=str(tmp_path)) as daemon, \
            Client(daemon.address, token=TOKEN, comms=["world"]) as client:
        v2 = client.wait_version("world", "allgather", newer_than=1, timeout_s=60)
        assert v2 is not None and v2.reason.startswith("bootstrap: optimum")
        text = render_status(client.status())
    assert "world/allgather v2" in text and "bootstrap: optimum" in text
    assert [e.reason for e in ctl.store.entries()] == [FALLBACK_REASON, v2.reason]
