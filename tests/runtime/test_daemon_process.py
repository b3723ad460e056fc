"""The daemon as a real process: ``loopcoll daemon run`` with the real controller, real client processes.

Every daemon is started with ``subprocess`` on port 0 (``--port-file``), bound to loopback, and always
terminated by the ``daemons`` fixture, even when a test fails. About 25 s of CI time in all.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.service.client import Client
from runtime.errors import WireError
from tests.runtime.drill import degraded_samples

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = "hpn:1x2x4"
SIZE_BYTES = 16 << 20
START_TIMEOUT_S = 90.0


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LOOPCOLL_TOKEN"}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _loopcoll(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loopcoll", *args], cwd=REPO, env=_env(), capture_output=True,
                          text=True, timeout=timeout_s)


class DaemonProc:
    """One ``loopcoll daemon run`` process over a store directory."""

    def __init__(self, base: Path, store: Path, *extra: str) -> None:
        self.base, self.store, self.extra = base, store, extra
        self.profile = base / "profile.json"
        if not self.profile.exists():
            self.profile.write_text(json.dumps({
                "format": "loopcoll.profile/1", "topology": TOPOLOGY,
                "communicators": [{"name": "world", "ranks": list(range(8)),
                                   "collectives": [{"collective": "allgather", "sizes": [SIZE_BYTES]}]}]}))
        self.token_file = base / "token"
        self.port_file = base / "daemon.port"
        self.log_file = base / "daemon.log"
        self.proc: subprocess.Popen[str] | None = None
        self.address = ""

    def start(self) -> DaemonProc:
        self.port_file.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "loopcoll", "daemon", "run", "--profile", str(self.profile),
             "--store", str(self.store), "--token-file", str(self.token_file), "--port-file", str(self.port_file),
             "--log-file", str(self.log_file), "--poll-interval-s", "0.05", *self.extra],
            cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.port_file.exists():
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited with {self.proc.returncode}: {self.proc.stderr.read()}")
            if time.monotonic() > deadline:
                raise AssertionError("daemon did not write its port file in time")
            time.sleep(0.05)
        self.address = self.port_file.read_text().strip()
        assert self.address.startswith("127.0.0.1:")
        return self

    @property
    def token(self) -> str:
        return self.token_file.read_text().strip()

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def rss_mib(self) -> float:
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    def events(self) -> list[dict[str, Any]]:
        if not self.log_file.exists():
            return []
        return [json.loads(line) for line in self.log_file.read_text().splitlines() if line.strip()]

    def client(self, **kw: Any) -> Client:
        kw.setdefault("token", self.token)
        return Client(self.address, **kw)


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[list[DaemonProc]]:
    started: list[DaemonProc] = []
    try:
        yield started
    finally:
        for d in started:
            if d.proc is not None and d.proc.poll() is None:
                d.proc.kill()
                d.proc.wait()


def _start(daemons: list[DaemonProc], base: Path, store: Path, *extra: str) -> DaemonProc:
    d = DaemonProc(base, store, *extra)
    daemons.append(d)
    return d.start()


def _degraded_samples(schedule_json: bytes, version: int, n_collectives: int) -> dict[int, list[dict[str, Any]]]:
    """Per host, the samples its executors emit for ``n_collectives`` AllGathers of the deployed schedule
    while rank 0's NIC runs at a quarter of its capacity (both directions); other pairs run at full speed."""
    import tempfile

    from synth import load_topology, read_schedule

    with tempfile.NamedTemporaryFile("wb", suffix=".json", delete=False) as fh:
        fh.write(schedule_json)
    try:
        sched = read_schedule(fh.name)
    finally:
        os.unlink(fh.name)
    return degraded_samples(sched, load_topology(TOPOLOGY), version=version, n_collectives=n_collectives,
                            size_bytes=SIZE_BYTES)


def test_two_clients_degrade_rank0_nic_publish_kill_restart(daemons: list[DaemonProc], tmp_path: Path) -> None:
    store = tmp_path / "store"
    d = _start(daemons, tmp_path, store)
    with d.client(role="executor", rank=0, comms=["world"]) as executor:
        v1 = executor.wait_version("world", "allgather", timeout_s=START_TIMEOUT_S)
        assert v1 is not None, "no bootstrap version pushed"
        band = v1.bands[0]
        schedule_json = executor.get(band.schedule)  # fetched over the wire, byte-identical to the store's file
        assert schedule_json == (store / band.schedule).read_bytes()

        # Two executor processes (one per host) push their samples concurrently.
        files = []
        for host, samples in _degraded_samples(schedule_json, v1.version, 200).items():
            path = tmp_path / f"host{host}.jsonl"
            path.write_text("".join(json.dumps(s) + "\n" for s in samples))
            files.append(path)
        pushers = [subprocess.Popen([sys.executable, "-m", "loopcoll", "daemon", "push", "--address", d.address,
                                     "--token-file", str(d.token_file), "--json", str(f)], cwd=REPO, env=_env(),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for f in files]
        outs = [p.communicate(timeout=60) for p in pushers]
        for p, (out, err) in zip(pushers, outs):
            assert p.returncode == 0, err
            totals = json.loads(out)
            assert totals["accepted"] == totals["sent"] > 0 and not totals["rejected"], totals

        v2 = executor.wait_version("world", "allgather", newer_than=v1.version, timeout_s=60)
        assert v2 is not None, f"no new version after the degradation: {executor.status()['controller']}"
        assert v2.reason != v1.reason
        latest = _settle(executor)  # the controller may refine further while the last samples are folded in
        assert [v.to_dict() for v in executor.versions()] == latest
        schedule_v = executor.get(latest[0]["bands"][0]["schedule"])
        assert schedule_v == (store / latest[0]["bands"][0]["schedule"]).read_bytes() != schedule_json

        # A client killed mid-message: the daemon keeps serving the others.
        killed = subprocess.Popen([sys.executable, "-c", _HALF_MESSAGE, d.address, d.token], cwd=REPO, env=_env(),
                                  stdout=subprocess.PIPE, text=True)
        assert killed.stdout is not None and killed.stdout.readline().strip() == "sent"
        killed.kill()
        killed.wait()
        # ... and one sending garbage gets a fatal error naming the problem.
        with socket.create_connection(tuple_address(d.address), timeout=10) as raw:
            raw.sendall(b"\x00garbage\n")
            reply = json.loads(raw.makefile("rb").readline())
        assert reply["type"] == "error" and reply["fatal"] and "not JSON" in reply["message"]
        # A client with a wrong token is refused, as a library call and as a command.
        with pytest.raises(WireError) as refused:
            d.client(token="not-the-token")
        assert refused.value.reason == "auth"
        wrong = tmp_path / "wrong-token"
        wrong.write_text("nope\n")
        out = _loopcoll("daemon", "status", "--address", d.address, "--token-file", str(wrong))
        assert out.returncode == 2 and out.stderr.count("\n") == 1
        assert out.stderr.startswith("loopcoll: error:") and "wrong token" in out.stderr
        status = executor.status()
        assert status["daemon"]["clients"] == 1
        assert status["daemon"]["counters"]["refused_token"] == 2
        assert status["daemon"]["counters"]["dropped_bad_json"] == 1
        assert _wait(lambda: any(e["event"] == "truncated" for e in d.events()))
        before = executor.versions()

    # The CLI status sees the same versions; --prometheus prints the text exposition.
    out = _loopcoll("daemon", "status", "--address", d.address, "--token-file", str(d.token_file), "--json")
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert [v["version"] for v in shown["controller"]["versions"]] == [v.version for v in before]
    assert any(lk["estimate_gbps"] < 0.5 * lk["nominal_gbps"] for lk in shown["controller"]["links"]
               if lk["link"] == "gpu0->tor0.0"), "rank 0's NIC is not estimated degraded"
    prom = _loopcoll("daemon", "status", "--address", d.address, "--token-file", str(d.token_file), "--prometheus")
    assert "loopcoll_daemon_clients" in prom.stdout
    text = _loopcoll("daemon", "status", "--address", d.address, "--token-file", str(d.token_file))
    assert f"world/allgather v{before[0].version}" in text.stdout and "gpu0->tor0.0" in text.stdout

    # SIGTERM: clean exit, port file removed; a restarted daemon (same port) serves the same latest versions,
    # to new clients and to an executor that stayed up and reconnected; SIGINT stops it cleanly too.
    survivor = d.client(role="executor", rank=4, comms=["world"])
    try:
        assert survivor.wait_version("world", "allgather", newer_than=v1.version, timeout_s=10) is not None
        assert d.stop() == 0
        assert not d.port_file.exists()
        assert {"stopped", "publish", "hello", "drop", "truncated"} <= {e["event"] for e in d.events()}
        assert _wait(lambda: not survivor.connected)
        survivor.send_samples([{"kind": "coll"}])  # queued while the daemon is down
        # The restarted daemon polls as usual: its controller starts from the store's measured capacities, so
        # with no new evidence it keeps serving the degraded version instead of swapping back to nominal.
        d2 = _start(daemons, tmp_path, store, "--port", d.address.rpartition(":")[2])
        assert d2.address == d.address
        with d2.client(role="executor", comms=["world"]) as executor:
            assert executor.wait_version("world", "allgather", newer_than=v1.version, timeout_s=30) is not None
            time.sleep(1.0)  # twenty polls
            assert executor.versions() == before
        again = _loopcoll("daemon", "status", "--address", d2.address, "--token-file", str(d2.token_file), "--json")
        assert again.returncode == 0, again.stderr
        assert any(lk["estimate_gbps"] < 0.5 * lk["nominal_gbps"] for lk in json.loads(again.stdout)["controller"]["links"]
                   if lk["link"] == "gpu0->tor0.0"), "the restarted controller forgot rank 0's degraded NIC"
        assert _wait(lambda: survivor.connections == 2, 30), "the executor client did not reconnect"
        assert survivor.versions() == before
        assert survivor.flush(10) and survivor.sent_samples == 1 and survivor.dropped_samples == 0
    finally:
        survivor.close()
    assert d2.stop(signal.SIGINT) == 0


_HALF_MESSAGE = """
import json, socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)))
s.sendall(json.dumps({"type": "hello", "token": sys.argv[2]}).encode() + b"\\n")
s.sendall(b'{"type": "samples", "samples": [{"format": "loopcoll.telemetry/1", "t_s": 1.0, "comm": "wor')
print("sent", flush=True)
time.sleep(60)
"""


def tuple_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def _settle(client: Client, quiet_s: float = 1.0, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """The latest versions once the controller has no synthesis pending and they stayed the same ``quiet_s``."""
    deadline = time.monotonic() + timeout_s
    last: list[dict[str, Any]] = []
    since = time.monotonic()
    while time.monotonic() < deadline:
        ctl = client.status()["controller"]
        now = ctl["versions"]
        if now != last or ctl.get("pending"):
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return now
        time.sleep(0.1)
    raise AssertionError("the controller did not settle")


def _wait(cond: Any, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


_FLOODER = """
import json, socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
sample = {"format": "loopcoll.telemetry/1", "t_s": 1.0, "comm": "world", "seq": 1, "version": None, "kind": "coll",
          "src": 3, "dst": None, "bytes": 16777216, "busy_s": 0.002, "collective": "allgather", "origin": "probe"}
batch = [dict(sample, seq=i) for i in range(3000)] + [{"kind": "bogus"}] * 100
line = json.dumps({"type": "samples", "samples": batch}).encode() + b"\\n"
s = socket.create_connection((host, int(port)))
s.sendall(json.dumps({"type": "hello", "token": sys.argv[2]}).encode() + b"\\n")
s.settimeout(1.0)
sent = messages = 0
end = time.monotonic() + float(sys.argv[3])
try:
    while time.monotonic() < end:
        s.sendall(line)
        sent += len(line)
        messages += 1
except (socket.timeout, OSError):
    pass
print(json.dumps({"bytes": sent, "messages": messages, "samples": messages * len(batch)}), flush=True)
"""

FLOODERS = 4
#: Seconds of flood; ``LOOPCOLL_FLOOD_S=30`` runs a longer one (the RSS plateau is the same).
FLOOD_S = float(os.environ.get("LOOPCOLL_FLOOD_S", "4"))
#: The daemon's RSS may grow by at most this much under the flood (the ingest queue is bounded at 4 MiB of
#: messages, one partial message per client; the controller keeps a bounded sample store).
RSS_GROWTH_BOUND_MIB = 160.0


def test_flood_keeps_memory_bounded_and_clients_capped(daemons: list[DaemonProc], tmp_path: Path) -> None:
    d = _start(daemons, tmp_path, tmp_path / "store", "--max-clients", str(FLOODERS + 2))
    with d.client() as tool, d.client(role="executor", rank=3, comms=["world"], max_queued_samples=20_000) as ex:
        assert _wait(lambda: tool.status()["daemon"]["latest"], START_TIMEOUT_S)  # bootstrap done
        rss_before = d.rss_mib()
        flooders = [subprocess.Popen([sys.executable, "-c", _FLOODER, d.address, d.token, str(FLOOD_S)], cwd=REPO,
                                     env=_env(), stdout=subprocess.PIPE, text=True) for _ in range(FLOODERS)]
        peak = rss_before
        deadline = time.monotonic() + FLOOD_S + 30
        refused_extra = False
        offered = 0
        coll = {"format": "loopcoll.telemetry/1", "t_s": 1.0, "comm": "world", "kind": "coll", "src": 3,
                "bytes": 1, "busy_s": 1.0, "origin": "executor"}
        while any(f.poll() is None for f in flooders) and time.monotonic() < deadline:
            ex.send_samples([coll] * 5000)  # an executor in the flood: never blocks, drops past its queue bound
            offered += 5000
            peak = max(peak, d.rss_mib())
            if not refused_extra and tool.status()["daemon"]["clients"] == FLOODERS + 2:
                with pytest.raises(WireError, match="too many clients"):
                    d.client()  # one connection over --max-clients is refused
                refused_extra = True
            time.sleep(0.05)
        pushed = [json.loads(f.communicate(timeout=30)[0]) for f in flooders]
        peak = max(peak, d.rss_mib())
        total_bytes = sum(p["bytes"] for p in pushed)
        total_samples = sum(p["samples"] for p in pushed)
        # Every sample the daemon read was ingested (accepted or rejected by reason), none lost in between.
        assert _wait(lambda: tool.status()["daemon"]["ingest_queue_bytes"] == 0, 60)
        counters = tool.status()["daemon"]["counters"]
        assert ex.flush(60)
        # Back-pressure slowed the executor's sender; it never cost it its connection.
        assert ex.connections == 1 and ex.connected
        assert ex.sent_samples + ex.dropped_samples == offered
    # The client side of the bound: a full send queue drops and counts, never blocks.
    with d.client(max_queued_samples=100) as small:
        small.send_samples({"kind": "coll", "i": i} for i in range(10_000))
        assert small.flush(30)
        assert small.sent_samples + small.dropped_samples == 10_000 and small.dropped_samples > 0
    print(f"flood: {FLOODERS} clients x {FLOOD_S} s pushed {total_bytes / 2**20:.1f} MiB ({total_samples} samples); "
          f"daemon RSS {rss_before:.1f} -> peak {peak:.1f} MiB; ingest pauses {counters.get('ingest_pauses', 0)}")
    assert refused_extra
    assert counters["refused_full"] >= 1
    # What the flooders wrote but the daemon never read sat in kernel socket buffers, reset at their exit.
    assert 0 < counters["samples_received"] <= total_samples + ex.sent_samples
    rejected = sum(v for k, v in counters.items() if k.startswith("rejected_"))
    assert counters["accepted"] + rejected == counters["samples_received"]
    assert rejected == counters["rejected_missing_field"] > 0  # the flooders' bad samples, counted by reason
    assert counters["ingest_pauses"] > 0, "the flood never outran ingestion: the bound was not exercised"
    assert peak - rss_before < RSS_GROWTH_BOUND_MIB
    assert d.stop() == 0
