"""The daemon under hostile or broken clients (issue 30 item 4): a real daemon (``runtime.serve`` over the real
Controller) on loopback, raw sockets and real clients. One test per failure; each fails on the daemon before the
fix and takes a few seconds at most."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime import Client, Controller, ControllerConfig, DaemonConfig, ProfileError, WireError, profile_from_dict
from runtime import serve
from runtime.service.client import read_token
from runtime.service.wire import MAX_MESSAGE_BYTES
from synth import load_topology

TOKEN = "s3cret"
PROFILE = {"format": "loopcoll.profile/1", "topology": "ring:4", "communicators": [
    {"name": "world", "ranks": [0, 1, 2, 3], "collectives": [{"collective": "allgather", "sizes": [1 << 20]}]}]}


class Daemon:
    """A daemon over a fresh store, its log records, and raw-socket helpers."""

    def __init__(self, store: Path, config: DaemonConfig, token: str = TOKEN) -> None:
        self.store = store
        self.records: list[dict[str, Any]] = []
        controller = Controller(load_topology("ring:4"), profile_from_dict(PROFILE), store,
                                config=ControllerConfig(export_xml=False))
        self.handle = serve(controller, token=token, store_dir=store, config=config,
                        log=lambda rec: self.records.append(dict(rec)))
        self.token = token

    def raw(self, *, hello: bool = False) -> socket.socket:
        s = socket.create_connection((self.handle.host, self.handle.port), timeout=5)
        if hello:
            s.sendall(json.dumps({"type": "hello", "token": self.token}).encode() + b"\n")
            assert _lines(s, 1)[0]["type"] == "hello"
        return s

    def client(self, **kw: Any) -> Client:
        return Client(self.handle.address, token=self.token, **kw)


@pytest.fixture
def make_daemon(tmp_path: Path) -> Iterator[Any]:
    started: list[Daemon] = []

    def make(token: str = TOKEN, **config: Any) -> Daemon:
        d = Daemon(tmp_path / f"store{len(started)}", DaemonConfig(**config), token)
        started.append(d)
        with d.client(comms=["world"]) as c:  # bootstrap done: versions exist
            assert c.wait_version("world", "allgather", timeout_s=60) is not None
        return d

    try:
        yield make
    finally:
        for d in started:
            d.handle.close()


def _lines(s: socket.socket, n: int, timeout_s: float = 5.0) -> list[dict[str, Any]]:
    """The next ``n`` messages from raw socket ``s`` (fewer when it closes first)."""
    s.settimeout(timeout_s)
    out: list[dict[str, Any]] = []
    buf = b""
    while len(out) < n:
        while b"\n" not in buf:
            try:
                data = s.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                return out
            buf += data
        line, buf = buf.split(b"\n", 1)
        out.append(json.loads(line))
    return out


def _closed_within(s: socket.socket, timeout_s: float) -> list[dict[str, Any]]:
    """Every message up to the daemon closing ``s``; fails when it stays open past ``timeout_s``."""
    s.settimeout(timeout_s)
    data = b""
    try:
        while chunk := s.recv(1 << 16):
            data += chunk
    except socket.timeout:
        pytest.fail(f"the daemon kept the connection open for more than {timeout_s} s")
    except OSError:
        pass
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def test_idle_unauthenticated_sockets_cannot_lock_out_an_executor(make_daemon: Any) -> None:
    d = make_daemon(hello_timeout_s=1.0)
    idle = [d.raw() for _ in range(64)]  # as many as max_clients, never authenticating
    try:
        time.sleep(0.2)
        t0 = time.monotonic()
        with d.client(role="executor", rank=0, comms=["world"]) as ex:  # before: "too many clients"
            assert ex.wait_version("world", "allgather", timeout_s=5) is not None
        assert time.monotonic() - t0 < 2.0
        # Each idle socket got a fatal error (evicted from the 16-slot pool, or its 1 s hello deadline) and is gone.
        for s in idle:
            reply = _closed_within(s, 3.0)
            assert reply and reply[-1]["fatal"], reply
        counters = d.handle.status()["counters"]
        assert counters["evicted_unauthenticated"] >= 64 - 16
    finally:
        for s in idle:
            s.close()


def test_an_idle_authenticated_client_is_dropped_but_a_quiet_subscriber_is_not(make_daemon: Any) -> None:
    d = make_daemon(idle_timeout_s=0.6)
    with d.client(role="executor", rank=1, comms=["world"]) as ex:  # sends nothing itself: only pings
        silent = d.raw(hello=True)
        t0 = time.monotonic()
        reply = _closed_within(silent, 3.0)  # before: kept forever
        assert 0.5 < time.monotonic() - t0 < 2.5
        assert reply[-1]["fatal"] and "no message for 0.6 s" in reply[-1]["message"]
        time.sleep(1.5)  # well past the idle timeout: the executor's pings keep it
        assert ex.connected and ex.connections == 1
        assert ex.status()["daemon"]["counters"]["dropped_idle_timeout"] == 1


def test_a_pipelined_status_burst_is_bounded_per_connection(make_daemon: Any) -> None:
    d = make_daemon()
    n = 2000
    flood = d.raw(hello=True)
    with d.client() as probe:
        probe.status()
        flood.sendall(b"".join(b'{"type":"status","prometheus":true,"id":%d}\n' % i for i in range(n)))
        time.sleep(0.05)
        t0 = time.monotonic()
        probe.status(prometheus=True)
        latency_s = time.monotonic() - t0  # before: ~0.7 s, behind every request of the burst
    replies = _lines(flood, n, timeout_s=30)
    flood.close()
    assert latency_s < 0.3, f"another client's status took {latency_s:.2f} s during the burst"
    # At most max_pending_requests in flight, yet every request is answered, once (two status threads: replies
    # to requests in flight together may swap; the ids match them).
    assert sorted(r["id"] for r in replies) == list(range(n))
    assert {r["type"] for r in replies} == {"status"}


def test_a_pipelined_samples_burst_under_back_pressure_is_read_to_the_end(make_daemon: Any) -> None:
    d = make_daemon(ingest_queue_bytes=8 << 10)  # a few messages fill it: the connection pauses and resumes often
    sample = {"kind": "coll", "comm": "world", "src": 0, "bytes": 1, "busy_s": 1.0}
    batch = json.dumps({"type": "samples", "samples": [sample] * 20}).encode() + b"\n"
    n = 300
    s = d.raw(hello=True)
    s.sendall(batch * n + b'{"type": "samples", "samples": [], "id": "last"}\n')
    reply = _lines(s, 1, timeout_s=20)  # messages read before a pause wait; none is lost, nothing stalls
    s.close()
    assert reply and reply[0]["id"] == "last", reply
    counters = d.handle.status()["counters"]
    assert counters["messages_samples"] == n + 1 and counters["samples_received"] == 20 * n
    assert counters["ingest_pauses"] > 0


def test_auth_failures_are_rate_limited_with_one_log_line_per_window(make_daemon: Any) -> None:
    d = make_daemon(auth_failures_per_window=5, auth_window_s=2.0)
    replies = []
    t0 = time.monotonic()
    for i in range(60):
        with socket.create_connection((d.handle.host, d.handle.port), timeout=5) as s:
            s.sendall(json.dumps({"type": "hello", "token": f"guess{i}"}).encode() + b"\n")
            replies += _closed_within(s, 3.0)
    assert time.monotonic() - t0 < 2.0, "the guesses took longer than one window: slow machine"
    assert len(replies) == 60 and all(r["type"] == "error" and r["fatal"] for r in replies)
    assert sum("wrong token" in r["message"] for r in replies) == 5
    assert sum("too many failed authentications" in r["message"] for r in replies) == 55
    with pytest.raises(WireError, match="too many failed"):  # the right token waits for the window too
        d.client()
    time.sleep(max(0.0, t0 + 2.2 - time.monotonic()))
    with d.client() as c:  # the window is over: served again
        c.status()
    auth_drops = [r for r in d.records if r["event"] == "drop" and r["reason"] in ("auth", "auth_rate")]
    windows = [r for r in d.records if r["event"] == "auth_failures"]
    assert len(auth_drops) == 1  # before: one line per guess
    assert [(w["peer"], w["failures"], w["refused"]) for w in windows] == [("127.0.0.1", 5, 56)]


def test_every_refused_message_gets_a_reply(make_daemon: Any) -> None:
    d = make_daemon()
    cases = [  # (hello first, bytes, what the error names, id it must carry)
        (True, b'{"type": "status", "id": 3\n', "not JSON", None),
        (True, b'{"type": "launch", "id": 7}\n', "launch", 7),
        (True, b'{"type": "status", "prometheus": 1, "id": "s1"}\n', "prometheus", "s1"),
        (True, b'{"type": "get", "path": "\\ud800", "id": 9}\n', "lone surrogate", 9),
        (True, b"x" * (MAX_MESSAGE_BYTES + 10), "longer than", None),
        (False, b'{"type": "hello", "token": "\\ud800", "id": 1}\n', "lone surrogate", 1),
        (False, b'{"type": "status", "id": 2}\n', "first message must be hello", 2),
    ]
    for hello, data, what, rid in cases:
        s = d.raw(hello=hello)
        try:
            s.sendall(data)
        except OSError:
            pass  # the oversized line may be refused before all of it is sent
        reply = _closed_within(s, 3.0)
        s.close()
        assert len(reply) == 1 and reply[0]["type"] == "error" and reply[0]["fatal"], (data[:60], reply)
        assert what in reply[0]["message"], (what, reply)
        assert reply[0].get("id") == rid, (data[:60], reply)
    assert not [r for r in d.records if r["event"] == "internal_error"]
    with d.client() as c:
        assert c.status()["daemon"]["clients"] >= 1


def test_a_token_with_spaces_round_trips_and_a_surrogate_token_is_refused(
        make_daemon: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from loopcoll._cmd_daemon import _daemon_token

    spaced = "  spaced token  "
    monkeypatch.setenv("LOOPCOLL_TOKEN", spaced)
    token_file = tmp_path / "token"
    assert _daemon_token(str(token_file)) == spaced  # written from the variable
    assert read_token(token_file=token_file) == spaced  # read back the same (before: stripped)
    assert _daemon_token(str(token_file)) == spaced  # a restarted daemon reads it the same
    d = make_daemon(token=spaced)
    with Client(d.handle.address, token=read_token(token_file=token_file)) as c:
        c.status()
    monkeypatch.setenv("LOOPCOLL_TOKEN", "bad\udcff")  # undecodable bytes in the environment
    with pytest.raises(WireError, match="lone surrogate"):
        _daemon_token(str(tmp_path / "token2"))
    assert not (tmp_path / "token2").exists()
    with pytest.raises(WireError, match="lone surrogate"):
        serve(None, token="\ud800")  # type: ignore[arg-type]


def test_get_refuses_a_hard_link_to_a_file_outside_the_store(make_daemon: Any, tmp_path: Path) -> None:
    d = make_daemon()
    secret = tmp_path / "outside.txt"
    secret.write_text("not the store's")
    os.link(secret, d.store / "inside.json")  # a path inside the store, an inode outside it
    (d.store / "own.json").write_text("{}")
    with d.client() as c:
        assert c.get("own.json") == b"{}"
        with pytest.raises(WireError, match="not a file of the store"):  # before: served
            c.get("inside.json")
        assert c.status()["daemon"]["counters"]["get_refused"] == 1


@pytest.mark.parametrize("name", ["../escape", "a/b", "a\x00b", ".hidden", "world\n"])
def test_a_profile_communicator_name_must_name_a_store_directory(name: str) -> None:
    doc = json.loads(json.dumps(PROFILE))
    doc["communicators"][0]["name"] = name
    with pytest.raises(ProfileError, match="cannot name a store directory") as info:  # before: accepted
        profile_from_dict(doc)
    assert repr(name) in str(info.value)
