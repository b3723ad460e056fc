"""runtime.Controller: bootstrap, restart, bad input, status and Prometheus text, thread safety."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from runtime import Controller, ControllerConfig, ProfileError, StoreError, profile_from_dict
from synth import load_topology

TOPO = "hpn:1x2x4"


def _profile(ranks: list[int] | None = None, colls: tuple[str, ...] = ("allgather",)) -> Any:
    return profile_from_dict({"format": "loopcoll.profile/1", "topology": TOPO, "communicators": [
        {"name": "world", "ranks": list(range(8)) if ranks is None else ranks,
         "collectives": [{"collective": c, "sizes": [1 << 24, 1 << 27]} for c in colls]}]})


def _sample(**over: Any) -> dict[str, Any]:
    s = {"format": "loopcoll.telemetry/1", "t_s": 1.0, "comm": "world", "seq": 1, "version": 1, "kind": "pair",
         "src": 0, "dst": 4, "bytes": 1 << 20, "busy_s": 1e-3, "collective": "allgather", "origin": "executor"}
    s.update(over)
    return s


@pytest.fixture()
def ctl(tmp_path: Path) -> Controller:
    logs: list[dict[str, Any]] = []
    c = Controller(load_topology(TOPO), _profile(), tmp_path / "store",
                   config=ControllerConfig(export_xml=False), clock=lambda: 5.0, log=logs.append)
    c.logs = logs  # type: ignore[attr-defined]
    return c


def test_bootstrap_publishes_one_version_with_a_band_per_size(ctl: Controller) -> None:
    (e,) = ctl.bootstrap()
    assert (e.comm, e.collective, e.version, e.reason) == ("world", "allgather", 1, "bootstrap")
    assert [(b.min_bytes, b.max_bytes) for b in e.bands] == [(1, 47453132), (47453133, None)]
    assert ctl.bootstrap() == []  # nothing missing any more
    assert ctl.latest() == [e] and ctl.latest("other") == []
    assert [r["event"] for r in ctl.logs] == ["bootstrap", "publish"]  # type: ignore[attr-defined]


def test_restart_reloads_the_store(tmp_path: Path) -> None:
    c1 = Controller(load_topology(TOPO), _profile(), tmp_path, config=ControllerConfig(export_xml=False))
    (e,) = c1.bootstrap()
    c2 = Controller(load_topology(TOPO), _profile(), tmp_path, config=ControllerConfig(export_xml=False))
    assert c2.bootstrap() == [] and c2.latest() == [e]
    assert c2.deployed_schedule("world", "allgather")[1] == c1.deployed_schedule("world", "allgather")[1]


def test_bad_samples_are_counted_never_raised(ctl: Controller) -> None:
    ctl.bootstrap()
    rep = ctl.ingest([_sample(), _sample(src=99), _sample(comm="nope"), _sample(busy_s=0), "{", 17,
                      _sample(kind="pair", dst=None)])
    assert rep.accepted == 1
    assert dict(rep.rejected) == {"bad_json": 1, "dst": 1, "nonpositive_busy": 1, "type": 1, "unknown_comm": 1,
                                  "unknown_rank": 1}
    assert ctl.ingest(None).accepted == 0  # type: ignore[arg-type]
    assert ctl.ingest(json.dumps(_sample())).accepted == 1  # a bare JSON line is one sample
    st = ctl.status()
    assert st["counters"]["samples_rejected"]["unknown_rank"] == 1
    assert any(r["event"] == "samples_rejected" for r in ctl.logs)  # type: ignore[attr-defined]


def test_samples_of_unknown_versions_and_rooted_reduces_are_skipped(ctl: Controller) -> None:
    ctl.bootstrap()
    ctl.ingest([_sample(version=7), _sample(collective="reduce"), _sample(version=None),
                _sample(collective="allreduce")])  # no allreduce in this profile: no such version
    ctl.poll()
    assert ctl.status()["counters"]["samples_skipped"] == {"no_schedule_version": 1, "rooted_reduce": 1,
                                                           "unknown_version": 2}


def test_allreduce_and_reducescatter_samples_feed_the_estimator(tmp_path: Path) -> None:
    ctl = Controller(load_topology(TOPO), _profile(colls=("allreduce", "reducescatter")), tmp_path,
                     config=ControllerConfig(export_xml=False), clock=lambda: 5.0)
    ctl.bootstrap()
    rs = ctl._routing_for("world", "allreduce", 1, "reducescatter")
    ag = ctl._routing_for("world", "allreduce", 1, "allgather")
    whole = ctl._routing_for("world", "allreduce", 1)
    assert rs is not None and ag is not None and whole is not None
    assert {**rs.pair_chunks} != {**ag.pair_chunks}
    assert all(rs.pair_chunks.get(p, 0) + ag.pair_chunks.get(p, 0) == n for p, n in whole.pair_chunks.items())
    assert rs.link_chunks == ag.link_chunks == whole.link_chunks  # the phases overlap: loads of both
    assert ag.before and not rs.before  # the AllGather's roots are fed by the ReduceScatter into them
    (u, v), n = next(iter(sorted(rs.pair_chunks.items())))
    # 50 Gbit/s achieved, one group each (no seq)
    ctl.ingest([_sample(collective="allreduce", src=u, dst=v, bytes=int(50e9 / 8), busy_s=1.0, seq=None,
                        extra={"phase": "reducescatter"}),
                _sample(collective="reducescatter", src=u, dst=v, busy_s=1.0, bytes=int(50e9 / 8), seq=None),
                _sample(collective="allgather", extra={"phase": "allgather"})])  # phase on an allgather: rejected
    ctl.poll()
    st = ctl.status()
    assert st["counters"]["samples_rejected"] == {"type": 1}
    assert st["counters"]["samples_skipped"] == {} and st["counters"]["groups"] == 2
    first = rs.pair_links[(u, v)][0]
    assert ctl.estimator.estimate_gbps(first) < ctl.topology.link(*first).gbps  # the slow pair's link moved


def test_communicator_subsets_get_their_own_schedules(tmp_path: Path) -> None:
    prof = profile_from_dict({"format": "loopcoll.profile/1", "topology": TOPO, "communicators": [
        {"name": "world", "ranks": list(range(8)), "collectives": [{"collective": "allgather", "sizes": [1 << 24]}]},
        {"name": "rail1", "ranks": [5, 1], "collectives": [{"collective": "alltoall", "sizes": [1 << 24]}]},
        {"name": "host0", "ranks": [0, 1, 2, 3], "collectives": [{"collective": "allgather", "sizes": [1 << 22]}]}]})
    ctl = Controller(load_topology(TOPO), prof, tmp_path, config=ControllerConfig(export_xml=False))
    entries = {e.comm: e for e in ctl.bootstrap()}
    assert sorted(entries) == ["host0", "rail1", "world"]
    rail = ctl.deployed_schedule("rail1", "alltoall")[1]
    assert rail.nranks == 2 and list(rail.meta["global_ranks"]) == [5, 1]
    assert entries["rail1"].topology_fingerprint == load_topology(TOPO).communicator([5, 1]).fingerprint
    routing = ctl._routing_for("rail1", "alltoall", 1)
    assert set(routing.pair_chunks) == {(5, 1), (1, 5)}  # global ranks
    assert ctl.ingest([_sample(comm="rail1", src=5, dst=1, collective="alltoall")]).accepted == 1
    assert ctl.ingest([_sample(comm="rail1", src=0, dst=1, collective="alltoall")]).rejected["unknown_rank"] == 1


def test_a_communicator_that_cannot_connect_is_a_profile_error(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="communicator 'world'"):
        Controller(load_topology(TOPO), _profile(ranks=[0, 5]), tmp_path)  # different rails, no relay


def test_profile_rank_outside_topology_and_bad_config(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="rank 9 is not a GPU"):
        Controller(load_topology(TOPO), _profile(ranks=list(range(8)) + [9]), tmp_path)
    with pytest.raises(ProfileError, match="alpha must be in"):
        Controller(load_topology(TOPO), _profile(), tmp_path, config=ControllerConfig(alpha=0.0))


def test_unusable_store_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="file"):
        Controller(load_topology(TOPO), _profile(), tmp_path / "file" / "store")


def test_status_and_prometheus_carry_the_same_figures(ctl: Controller) -> None:
    ctl.bootstrap()
    ctl.ingest([_sample(), _sample(src=99)])
    ctl.poll()
    st = ctl.status()
    assert st["format"] == "loopcoll.controller-status/1"
    assert [v["version"] for v in st["versions"]] == [1]
    text = ctl.prometheus()
    assert "# TYPE loopcoll_samples_accepted_total counter" in text
    assert "loopcoll_samples_accepted_total 1\n" in text
    assert 'loopcoll_samples_rejected_total{reason="unknown_rank"} 1\n' in text
    assert 'loopcoll_schedule_version{collective="allgather",comm="world"} 1\n' in text
    assert 'loopcoll_detector_flagged{collective="allgather",comm="world"} 0.0\n' in text
    for line in text.splitlines():
        assert line.startswith("#") or len(line.rsplit(" ", 1)) == 2


def test_ingest_and_status_run_while_poll_synthesizes(tmp_path: Path) -> None:
    ctl = Controller(load_topology(TOPO), _profile(colls=("allgather", "alltoall")), tmp_path,
                     config=ControllerConfig(export_xml=False))
    errors: list[BaseException] = []
    stop = threading.Event()

    def feeder() -> None:
        try:
            while not stop.is_set():
                ctl.ingest([_sample()] * 20)
                ctl.status()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    th = threading.Thread(target=feeder)
    th.start()
    try:
        ctl.bootstrap()
        for _ in range(5):
            ctl.poll()
    finally:
        stop.set()
        th.join(timeout=30)
    assert not errors
    assert ctl.status()["counters"]["samples_accepted"] >= 20


def test_restart_after_a_degradation_keeps_the_degraded_version(tmp_path: Path) -> None:
    # A restarted controller starts its estimates at the capacities the deployed version was made for: with no
    # new evidence it must not flag that version against nominal links and swap back.
    from tests.runtime.drill import degraded_samples

    topo = load_topology(TOPO)
    cfg = ControllerConfig(export_xml=False, cooldown_s=0.0)
    c1 = Controller(topo, _profile(), tmp_path, config=cfg)
    (v1,) = c1.bootstrap()
    _, sched = c1.deployed_schedule("world", "allgather")
    by_host = degraded_samples(sched, topo, version=1, n_collectives=400)
    c1.ingest([s for host in sorted(by_host) for s in by_host[host]])
    published = c1.poll()
    assert [e.version for e in published] == [2]
    assert "gpu0->tor0.0" in published[0].capacities_gbps
    c2 = Controller(topo, _profile(), tmp_path, config=cfg)
    assert c2.latest() == c1.latest()
    assert c2.estimator.estimate_gbps(("gpu0", "tor0.0")) == published[0].capacities_gbps["gpu0->tor0.0"]
    assert c2.poll() == [] and c2.latest()[0].version == 2
    # a fresh controller on an empty store is still at nominal
    c3 = Controller(topo, _profile(), tmp_path / "other", config=cfg)
    assert c3.estimator.estimate_gbps(("gpu0", "tor0.0")) == topo.link("gpu0", "tor0.0").gbps


def test_manager_config_carries_every_manager_knob_with_the_same_defaults() -> None:
    from runtime.loop.manager import ManagerConfig

    assert ControllerConfig().manager_config() == ManagerConfig()
    cfg = ControllerConfig(gamma=0.3, cooldown_s=2.5, solver="glop", export_xml=False, contention_gate={})
    mc = cfg.manager_config()
    assert (mc.gamma, mc.cooldown_s, mc.solver, mc.export_xml) == (0.3, 2.5, "glop", False)
    assert mc.gate is not None
