"""The daemon in-process (``runtime.serve`` over the real Controller): random garbage, hello timeout, chunked
``get`` and its refusals, pushes filtered by communicator. About 5 s of CI time."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import Client, Controller, ControllerConfig, DaemonConfig, WireError, profile_from_dict, serve
from runtime.formats.store import VersionEntry
from runtime.service.wire import FILE_CHUNK_BYTES
from synth import load_topology

TOKEN = "s3cret"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    store = tmp_path_factory.mktemp("store")
    profile = profile_from_dict({"format": "loopcoll.profile/1", "topology": "ring:4", "communicators": [
        {"name": "world", "ranks": [0, 1, 2, 3], "collectives": [{"collective": "allgather", "sizes": [1 << 20]}]},
        {"name": "pair", "ranks": [0, 1, 2, 3], "collectives": [{"collective": "alltoall", "sizes": [1 << 20]}]}]})
    controller = Controller(load_topology("ring:4"), profile, store, config=ControllerConfig(export_xml=False))
    token_file = store / "token"
    token_file.write_text(TOKEN)
    records: list[dict[str, Any]] = []
    handle = serve(controller, token=TOKEN, store_dir=store, refuse_files=[token_file],
                   config=DaemonConfig(hello_timeout_s=0.3), log=records.append)
    handle.records = records  # type: ignore[attr-defined]
    handle.store = store  # type: ignore[attr-defined]
    try:
        with Client(handle.address, token=TOKEN, comms=["world", "pair"]) as c:
            assert c.wait_version("world", "allgather", timeout_s=60) is not None
            assert c.wait_version("pair", "alltoall", timeout_s=60) is not None
        yield handle
    finally:
        handle.close()


def _address(handle: Any) -> tuple[str, int]:
    return handle.host, handle.port


@settings(max_examples=40)
@given(chunks=st.lists(st.binary(min_size=0, max_size=300), min_size=1, max_size=5), hello=st.booleans())
def test_random_bytes_never_take_the_daemon_down(daemon: Any, chunks: list[bytes], hello: bool) -> None:
    with socket.create_connection(_address(daemon), timeout=5) as raw:
        try:
            if hello:
                raw.sendall(json.dumps({"type": "hello", "token": TOKEN}).encode() + b"\n")
            for chunk in chunks:
                raw.sendall(chunk)
        except OSError:
            pass  # the daemon may already have dropped us
    with Client(daemon.address, token=TOKEN) as probe:
        assert probe.status()["daemon"]["clients"] >= 1


def test_silent_client_is_dropped_after_the_hello_timeout(daemon: Any) -> None:
    with socket.create_connection(_address(daemon), timeout=5) as raw:
        reply = json.loads(raw.makefile("rb").readline())
    assert reply["type"] == "error" and reply["fatal"] and "no hello" in reply["message"]


def test_messages_before_hello_and_twice_hello_are_fatal(daemon: Any) -> None:
    for first in ([{"type": "status"}], [{"type": "hello", "token": TOKEN}, {"type": "hello", "token": TOKEN}]):
        with socket.create_connection(_address(daemon), timeout=5) as raw:
            raw.sendall(b"".join(json.dumps(m).encode() + b"\n" for m in first))
            lines = [json.loads(line) for line in raw.makefile("rb")]
        assert lines[-1]["type"] == "error" and lines[-1]["fatal"], lines


def test_get_is_chunked_and_refuses_paths_outside_the_store(daemon: Any) -> None:
    big = os.urandom(2 * FILE_CHUNK_BYTES + 12345)
    (daemon.store / "big.bin").write_bytes(big)
    with Client(daemon.address, token=TOKEN, comms=["world"]) as c:
        assert c.get("big.bin") == big
        entry = c.versions()[0]
        assert c.get(entry.bands[0].schedule) == (daemon.store / entry.bands[0].schedule).read_bytes()
        assert c.get("manifest.json") == (daemon.store / "manifest.json").read_bytes()
        for bad in ("token", "../" + daemon.store.name + "/big.bin", "/etc/hostname", "nope.json"):
            with pytest.raises(WireError, match="not a file of the store"):
                c.get(bad)
        assert c.status()["daemon"]["clients"] >= 1  # refusals are not fatal


def test_versions_are_pushed_only_for_subscribed_communicators(daemon: Any) -> None:
    seen: list[VersionEntry] = []
    with Client(daemon.address, token=TOKEN, role="executor", rank=1, comms=["pair"]) as c:
        c.on_version(seen.append)
        assert c.wait_version("pair", "alltoall", timeout_s=10) is not None
        time.sleep(0.2)
        assert [(v.comm, v.collective) for v in c.versions()] == [("pair", "alltoall")]
    assert [(v.comm, v.collective) for v in seen] == [("pair", "alltoall")]
    with Client(daemon.address, token=TOKEN) as tool:
        time.sleep(0.2)
        assert tool.versions() == []
        assert [(v["comm"], v["version"]) for v in tool.status()["daemon"]["latest"]] == [("pair", 1), ("world", 1)]
    events = {r["event"] for r in daemon.records}
    assert {"listen", "connect", "hello", "drop", "disconnect", "bootstrap", "publish"} <= events


def test_wrong_token_is_refused_without_retry(daemon: Any) -> None:
    with pytest.raises(WireError) as info:
        Client(daemon.address, token="guess", role="executor", comms=["world"])
    assert info.value.reason == "auth"
    assert any(r["event"] == "drop" and r["reason"] == "auth" for r in daemon.records)


def test_token_from_environment(daemon: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPCOLL_TOKEN", TOKEN)
    with Client(daemon.address) as c:
        assert c.status()["controller"]["counters"]["samples_accepted"] >= 0
    monkeypatch.delenv("LOOPCOLL_TOKEN")
    with pytest.raises(WireError, match="no token"):
        Client(daemon.address)


def test_status_carries_prometheus_text(daemon: Any) -> None:
    with Client(daemon.address, token=TOKEN) as c:
        doc = c.status(prometheus=True)
    text = doc["prometheus"]
    assert "loopcoll_schedule_version" in text and "loopcoll_daemon_clients 1" in text
    for line in text.splitlines():  # every sample line is NAME[{labels}] VALUE
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            float(value)
            assert name and " " not in name.split("{")[0]
    assert isinstance(Path(daemon.store).stat().st_size, int)


class _AlsoPublishesABandlessEntry(Controller):
    """The real controller; its bootstrap also hands the daemon an entry without bands (which no store
    writes), pushed like any other version."""

    def bootstrap(self) -> list[VersionEntry]:
        entries = super().bootstrap()
        return [*entries, dataclasses.replace(entries[0], collective="alltoall", bands=())]


def test_a_malformed_pushed_entry_is_refused_with_a_log_and_the_good_one_arrives_typed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    profile = profile_from_dict({"format": "loopcoll.profile/1", "topology": "ring:4", "communicators": [
        {"name": "world", "ranks": [0, 1, 2, 3], "collectives": [{"collective": "allgather", "sizes": [1 << 20]}]}]})
    controller = _AlsoPublishesABandlessEntry(load_topology("ring:4"), profile, tmp_path,
                                              config=ControllerConfig(export_xml=False))
    seen: list[VersionEntry] = []
    with serve(controller, token=TOKEN, store_dir=tmp_path, log=lambda rec: None) as handle, \
            caplog.at_level(logging.ERROR, logger="runtime.service.client"), \
            Client(handle.address, token=TOKEN, role="executor", comms=["world"]) as c:
        c.on_version(seen.append)
        entry = c.wait_version("world", "allgather", timeout_s=60)
        deadline = time.monotonic() + 10
        while c.refused_versions == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert isinstance(entry, VersionEntry) and entry.version == 1 and entry.bands
        assert c.get(entry.bands[0].schedule) == (tmp_path / entry.bands[0].schedule).read_bytes()
        assert c.refused_versions == 1 and c.connected
        assert c.wait_version("world", "alltoall", timeout_s=0.2) is None
        assert [(v.comm, v.collective, v.version) for v in c.versions()] == [("world", "allgather", 1)]
    assert [type(v) for v in seen] == [VersionEntry]
    refused = [r.getMessage() for r in caplog.records if r.name == "runtime.service.client"]
    assert refused == [f"refused pushed version 1 of world/alltoall from {handle.address}: has no bands"]
