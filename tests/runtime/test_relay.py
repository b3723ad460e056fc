"""Host relays as real processes on loopback (runtime.service.relay): local executors' columnar windows reach the
daemon merged, over one connection per relay; versions and files come back through it; bad input stops at it."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from runtime import Client, Controller, ControllerConfig, profile_from_dict, serve
from runtime.errors import WireError
from runtime.loop.bootstrap import fallback_schedule
from runtime.scenarios.loadgen import flow_table, push_windows, window_batch
from runtime.service.daemon import DaemonConfig
from synth import load_topology

SPEC = "hpn:1x2x8"
ROOT = Path(__file__).resolve().parents[2]


def _relay(upstream: str, tmp: Path, name: str) -> tuple[subprocess.Popen[bytes], str]:
    (tmp / f"{name}.token").write_text("local-secret\n")
    (tmp / "up.token").write_text("daemon-secret\n")
    port_file = tmp / f"{name}.addr"
    proc = subprocess.Popen([sys.executable, "-m", "runtime.service.relay", "--upstream", upstream, "--token-file",
                             str(tmp / f"{name}.token"), "--upstream-token-file", str(tmp / "up.token"), "--comms",
                             "world", "--port-file", str(port_file), "--flush-s", "0.05"],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not port_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"relay did not start: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
        time.sleep(0.05)
    return proc, port_file.read_text().strip()


@pytest.fixture()
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def test_two_relays_carry_four_executors_windows_versions_and_files(procs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    topo = load_topology(SPEC)
    sched = fallback_schedule("alltoall", topo)
    prof = profile_from_dict({"format": "loopcoll.profile/1", "topology": SPEC, "communicators": [
        {"name": "world", "ranks": list(range(16)), "collectives": [{"collective": "alltoall", "sizes": [1 << 24]}]}]})
    table = flow_table(sched, topo, comm="world", version=1, size_bytes=1 << 24)
    with tempfile.TemporaryDirectory() as store:
        ctl = Controller(topo, prof, store, config=ControllerConfig(export_xml=False))
        ctl.deploy("world", "alltoall", sched, reason="test: version 1")
        with serve(ctl, token="daemon-secret", store_dir=store, config=DaemonConfig(bootstrap=False),
                   log=lambda r: None) as d:
            relays = []
            for host in range(2):
                proc, addr = _relay(d.address, tmp_path, f"host{host}")
                procs.append(proc)
                relays.append(addr)
            clients = [Client(relays[h], token="local-secret", role="executor", rank=8 * h + 4 * i, comms=["world"])
                       for h in range(2) for i in range(2)]
            try:
                for c in clients:  # version 1 reaches every executor through its relay
                    entry = c.wait_version("world", "alltoall", timeout_s=20)
                    assert entry is not None and entry.version == 1
                manifest = clients[0].get("manifest.json")
                assert b'"alltoall"' in manifest
                reps = [push_windows(c, table.of_ranks(range(4 * i, 4 * i + 4)), windows=3, seed=i)
                        for i, c in enumerate(clients)]
                assert all(r.accepted == r.records and r.rejected == 0 for r in reps)
                (batch,) = window_batch(table.of_ranks([0]), seq_first=64, count=8, t_s=9.0, period_s=0.1,
                                        sigma=0.05, rng=np.random.default_rng(1))
                bad = batch.to_dict()
                bad["columns"] = {**bad["columns"], "src": [0] * (len(batch) - 1)}
                assert clients[0].push_samples([bad]) == {"accepted": 0, "rejected": {"length": len(batch)}}
                status = clients[1].status()  # the connection survived the bad batch on the other client too
                with pytest.raises(WireError):
                    Client(relays[0], token="wrong", role="tool")
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline and (ctl.status()["counters"]["samples_accepted"] < 3 * len(table)
                                                       or ctl.status()["counters"]["groups"] < 3):  # the poll thread folds
                    time.sleep(0.05)
                counters = ctl.status()["counters"]
                daemon = d.status()
            finally:
                for c in clients:
                    c.close()
    assert counters["samples_accepted"] == 3 * len(table) and not counters["samples_rejected"]
    assert counters["groups"] == 3  # each window folded once, whole: the relays' merged batches of all ranks
    assert daemon["clients"] == 2  # one upstream connection per relay, 4 executors behind them
    assert status["relay"]["clients"] >= 1 and status["relay"]["counters"]["rows_in"] > 0
    assert daemon["counters"]["samples_received"] == 3 * len(table)
