"""The telemetry load generator (runtime.scenarios.loadgen): same records as the executors' aggregation, accepted
by a real daemon on loopback, and a failure it carries is detected through the aggregated path."""

from __future__ import annotations

import tempfile
import time

import numpy as np
import pytest

from runtime import Client, Controller, ControllerConfig, profile_from_dict, serve
from runtime.formats.aggregate import AggRecord, WindowAggregator, validate_records
from runtime.loop.bootstrap import fallback_schedule
from runtime.scenarios.loadgen import collective_samples, flow_table, push_windows, window_records
from runtime.service.daemon import DaemonConfig
from synth import load_topology

SPEC = "hpn:1x2x4"


@pytest.fixture(scope="module")
def table():  # type: ignore[no-untyped-def]
    topo = load_topology(SPEC)
    return flow_table(fallback_schedule("allgather", topo), topo, comm="world", version=1, size_bytes=1 << 24)


def test_window_records_fold_like_the_executors_aggregator(table) -> None:  # type: ignore[no-untyped-def]
    agg = WindowAggregator(window=4)
    recs = []
    for seq in range(4, 8):  # one executor-style batch per collective: seq 7 closes the window 4..7
        recs += agg.add(validate_records(collective_samples(table, seq, 1.0 + seq * 0.01))[0])
    mine = validate_records(window_records(table, seq_first=4, count=4, t_s=1.07, period_s=0.01, sigma=0.0,
                                           rng=np.random.default_rng(0)))[0]
    assert len(recs) == len(mine) == len(table)
    key = (lambda r: (r.flow, r.src, r.dst))
    for a, b in zip(sorted(recs, key=key), sorted(mine, key=key)):
        assert isinstance(a, AggRecord) and isinstance(b, AggRecord)
        assert (a.flow, a.src, a.dst, a.count, a.bytes, a.seq_first, a.seq_last) == \
            (b.flow, b.src, b.dst, b.count, b.bytes, b.seq_first, b.seq_last)
        assert b.busy_s == pytest.approx(a.busy_s) and b.rate_p50_Bps == pytest.approx(a.rate_p50_Bps)


def test_a_real_daemon_takes_the_load_and_detects_fail2_through_it(table) -> None:  # type: ignore[no-untyped-def]
    topo = load_topology(SPEC)
    sched = fallback_schedule("allgather", topo)
    fail = flow_table(sched, topo, comm="world", version=1, size_bytes=1 << 24, true=topo.with_failure("fail2"))
    assert (fail.busy_s >= table.busy_s - 1e-15).all() and (fail.busy_s > 2 * table.busy_s).any()
    prof = profile_from_dict({"format": "loopcoll.profile/1", "topology": SPEC, "communicators": [
        {"name": "world", "ranks": list(range(8)), "collectives": [{"collective": "allgather", "sizes": [1 << 24]}]}]})
    events: list[dict] = []
    with tempfile.TemporaryDirectory() as store:
        ctl = Controller(topo, prof, store, config=ControllerConfig(export_xml=False), log=events.append)
        ctl.deploy("world", "allgather", sched, reason="test: version 1")
        with serve(ctl, token="t", store_dir=store, config=DaemonConfig(bootstrap=False), log=lambda r: None) as d, \
                Client(d.address, token="t") as client:
            half = [table.of_ranks(range(4)), table.of_ranks(range(4, 8))]
            assert sum(len(h) for h in half) == len(table)
            reps = [push_windows(client, h, windows=3, seed=i) for i, h in enumerate(half)]
            assert all(r.accepted == r.records and r.rejected == 0 for r in reps)
            assert ctl.status()["counters"]["samples_accepted"] == 6 * len(table) // 2
            assert not any(e["event"] == "flag" for e in events)
            rep = push_windows(client, fail, windows=4, seq0=24, sigma=0.05)
            assert rep.accepted == rep.records
            deadline = time.monotonic() + 10.0  # the daemon's poll thread folds them
            while not any(e["event"] == "flag" for e in events) and time.monotonic() < deadline:
                time.sleep(0.05)
    assert any(e["event"] == "flag" for e in events)


def test_allreduce_windows_carry_their_phase_through_the_one_writer() -> None:
    from runtime.formats.columnar import parse_batch
    from runtime.scenarios.loadgen import window_batch

    topo = load_topology(SPEC)
    sched = fallback_schedule("allreduce", topo)
    prof = profile_from_dict({"format": "loopcoll.profile/1", "topology": SPEC, "communicators": [
        {"name": "world", "ranks": list(range(8)), "collectives": [{"collective": "allreduce", "sizes": [1 << 24]}]}]})
    with tempfile.TemporaryDirectory() as store:
        ctl = Controller(topo, prof, store, config=ControllerConfig(export_xml=False))
        ctl.deploy("world", "allreduce", sched, reason="test: version 1")
        for phase in ("reducescatter", "allgather"):
            table = flow_table(sched, topo, comm="world", version=1, size_bytes=1 << 24, phase=phase)
            (batch,) = window_batch(table, seq_first=0, count=8, t_s=2.0, period_s=0.1, sigma=0.05,
                                    rng=np.random.default_rng(0))
            doc = batch.to_dict()
            assert doc["phase"] == phase and {r.phase for r in parse_batch(doc).records()} == {phase}
            assert ctl.ingest([doc]).accepted == len(table)
            assert {s["extra"]["phase"] for s in collective_samples(table, 3, 1.0)} == {phase}
        ctl.poll(now_s=3.0)
        assert ctl.status()["counters"]["groups"] == 2  # each phase's window folded on its own routing
