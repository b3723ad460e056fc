"""Versions with identity (issue 30 item 2): store epoch, digests, lock, corrupt-entry refusal, agreement.

Real stores, a real in-process daemon on loopback and a real client; every test fails on the main of
before this change (no epoch, no digests, no lock, files never read at load).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime import Client, Controller, profile_from_dict, serve
from runtime.errors import StoreError, WireError
from runtime.executor.errors import StagingError
from runtime.executor.agreement import choose
from runtime.executor.sources import entry_programs
from runtime.formats.store import VersionStore
from synth import load_topology, synthesize

TOKEN = "identity-token"
TOPO = load_topology("ring:4")


def _store(tmp_path: Path, versions: int = 2) -> VersionStore:
    store = VersionStore(tmp_path / "store")
    for _ in range(versions):
        store.publish("world", "allgather", [(0, None, synthesize("allgather", TOPO))], reason="t", topology=TOPO)
    return store


def _manifest(store: VersionStore) -> dict[str, Any]:
    return json.loads(store.manifest_path.read_text())


def test_lost_manifest_numbers_from_1_under_a_new_epoch(tmp_path: Path) -> None:
    old = _store(tmp_path)
    assert _manifest(old)["epoch"] == old.epoch and {e.epoch for e in old.entries()} == {old.epoch}
    assert VersionStore(old.directory, create=False).epoch == old.epoch  # kept across a restart
    old.manifest_path.unlink()
    new = VersionStore(old.directory)
    e = new.publish("world", "allgather", [(0, None, synthesize("allgather", TOPO))], reason="t", topology=TOPO)
    assert e.version == 1 and e.epoch == new.epoch != old.epoch
    # an executor holding (old epoch, v2) takes the new epoch's v1; a stale old-epoch v3 does not win it back
    held = {"allgather": (2, old.epoch, str(old.entries()[1].digest))}
    pushed = [(1, e.epoch, str(e.digest))]
    assert choose([{"allgather": pushed}, {"allgather": pushed}], held)[0] == {"allgather": pushed[0]}
    assert choose([{"allgather": pushed}], {"allgather": pushed[0]})[0] == {}


def test_digests_per_band_and_version_match_the_bytes(tmp_path: Path) -> None:
    import hashlib

    store = _store(tmp_path, 1)
    e = store.entries()[0]
    b = e.bands[0]
    assert b.schedule_sha256 == hashlib.sha256(store.path(b.schedule).read_bytes()).hexdigest()
    assert b.xml is not None and b.xml_sha256 == hashlib.sha256(store.path(b.xml).read_bytes()).hexdigest()
    assert _manifest(store)["versions"][0]["digest"] == e.digest and e.digest is not None
    from msccl_xml.deploy import deploy

    v = deploy(TOPO, "allgather", target="msccl-executor-nccl", bands=[(0, 4095), (4096, None)])
    fitted = store.publish("world", "allgather", v, reason="t", topology=TOPO)
    assert fitted.digest == v.digest and [b.digest for b in fitted.bands] == [b.digest for b in v.bands]


def _corrupt(store: VersionStore, how: str) -> str:
    """Damage ``store`` one way; returns the name the error must contain."""
    doc = _manifest(store)
    band = doc["versions"][-1]["bands"][0]
    if how == "garbage schedule":
        store.path(band["schedule"]).write_bytes(b"\xff\xfe\x00garbage\x80")
        return band["schedule"]
    if how == "garbage schedule, no digests":
        store.path(band["schedule"]).write_bytes(b"\xff\xfe\x00garbage\x80")
        band["schedule_sha256"] = band["xml_sha256"] = doc["versions"][-1]["digest"] = None
        store.manifest_path.write_text(json.dumps(doc))
        return band["schedule"]
    if how == "swapped xml":
        other = doc["versions"][0]["bands"][0]
        store.path(band["xml"]).write_bytes(store.path(other["schedule"]).read_bytes())
        return band["xml"]
    if how == "wrong-collective xml":
        res = synthesize("allreduce", TOPO)
        side = VersionStore(store.directory.parent / "side")
        e = side.publish("world", "allreduce", [(0, None, res)], reason="t", topology=TOPO)
        assert e.bands[0].xml is not None
        store.path(band["xml"]).write_bytes(side.path(e.bands[0].xml).read_bytes())
        band["schedule_sha256"] = band["xml_sha256"] = doc["versions"][-1]["digest"] = None
        store.manifest_path.write_text(json.dumps(doc))
        return band["xml"]
    if how == "huge version":
        doc["versions"][-1]["version"] = 10**30
        store.manifest_path.write_text(json.dumps(doc))
        return "manifest.json"
    assert how == "manifest not JSON"
    store.manifest_path.write_bytes(b"\x89PNG not json")
    return "manifest.json"


@pytest.mark.parametrize("how", ["garbage schedule", "garbage schedule, no digests", "swapped xml",
                                 "wrong-collective xml", "huge version", "manifest not JSON"])
def test_corrupt_entries_are_refused_at_load_naming_the_file(tmp_path: Path, how: str) -> None:
    store = _store(tmp_path)
    name = _corrupt(store, how)
    with pytest.raises(StoreError) as info:
        VersionStore(store.directory, create=False)
    assert name in str(info.value)
    assert how != "huge version" or "outside 1.." in str(info.value)


@pytest.fixture()
def daemon(tmp_path: Path) -> Iterator[Any]:
    store = tmp_path / "store"
    profile = profile_from_dict({"format": "loopcoll.profile/1", "topology": "ring:4", "communicators": [
        {"name": "world", "ranks": [0, 1, 2, 3], "collectives": [{"collective": "allgather", "sizes": [1 << 20]}]}]})
    records: list[dict[str, Any]] = []
    handle = serve(Controller(TOPO, profile, store), token=TOKEN, store_dir=store, log=records.append)
    handle.store = store  # type: ignore[attr-defined]
    handle.records = records  # type: ignore[attr-defined]
    handle.profile = profile  # type: ignore[attr-defined]
    try:
        yield handle
    finally:
        handle.close()


def test_a_second_daemon_on_one_store_is_refused(daemon: Any, tmp_path: Path) -> None:
    import os

    with pytest.raises(StoreError, match=rf"{daemon.store.name}.* in use by another daemon \(pid {os.getpid()}\)"):
        serve(Controller(TOPO, daemon.profile, daemon.store), token=TOKEN, store_dir=daemon.store)
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps({"format": "loopcoll.profile/1", "topology": "ring:4", "communicators": [
        {"name": "world", "ranks": [0, 1, 2, 3], "collectives": [{"collective": "allgather", "sizes": [1024]}]}]}))
    tok = tmp_path / "tok"
    tok.write_text(TOKEN)
    tok.chmod(0o600)
    cli = subprocess.run([sys.executable, "-m", "loopcoll", "daemon", "run", "--topology", "ring:4",
                          "--profile", str(prof), "--store", str(daemon.store), "--token-file", str(tok),
                          "--port", "0"], capture_output=True, text=True, timeout=60)
    assert cli.returncode == 2 and "Traceback" not in cli.stderr, cli.stderr
    assert cli.stderr.startswith(f"loopcoll: error: store {str(daemon.store)!r} is in use by another daemon (pid {os.getpid()})")


def test_a_changed_file_is_neither_served_nor_staged(daemon: Any) -> None:
    with Client(daemon.address, token=TOKEN, comms=["world"]) as c:
        entry = c.wait_version("world", "allgather", timeout_s=60)
        assert entry is not None
        band = entry.bands[0]
        assert band.xml is not None and entry.epoch and entry.digest
        assert [p.coll for p in entry_programs(entry, c.get)] == ["allgather"]
        (daemon.store / band.xml).write_bytes(b"<algo swapped/>")
        with pytest.raises(WireError, match="does not match its manifest sha256"):
            c.get(band.xml)
        # the executor's own check, on bytes the daemon still serves
        other = dataclasses.replace(band, xml=None, xml_sha256=None, schedule_sha256="0" * 64)
        with pytest.raises(StagingError, match=f"{band.schedule}: fetched bytes do not match the manifest's sha256"):
            entry_programs(dataclasses.replace(entry, bands=(other,)), c.get)
    assert any(r.get("reason") == "digest" for r in daemon.records)


def test_a_reconnecting_client_takes_the_new_epochs_version_1(tmp_path: Path) -> None:
    store = _store(tmp_path)  # epoch 1: v1, v2
    profile = profile_from_dict({"format": "loopcoll.profile/1", "topology": "ring:4", "communicators": [
        {"name": "world", "ranks": [0, 1, 2, 3], "collectives": [{"collective": "allgather", "sizes": [1 << 20]}]}]})
    a = serve(Controller(TOPO, profile, store.directory), token=TOKEN, store_dir=store.directory, log=lambda r: None)
    with Client(a.address, token=TOKEN, role="executor", comms=["world"]) as c:
        held = c.wait_version("world", "allgather", newer_than=1, timeout_s=30)
        assert held is not None and (held.version, held.epoch) == (2, store.epoch)
        a.close()
        store.manifest_path.unlink()
        controller = Controller(TOPO, profile, store.directory)
        with serve(controller, port=a.port, token=TOKEN, store_dir=store.directory, log=lambda r: None):
            got = _wait_for(lambda: [v for v in c.versions() if v.epoch == controller.store.epoch], "the new epoch")
    assert [(v.version, v.digest) for v in got] == [(1, controller.store.latest()[0].digest)]


def test_agreement_needs_the_same_digest_on_every_rank() -> None:
    same, other = (3, "e1", "a" * 64), (3, "e1", "b" * 64)
    chosen, disagreed = choose([{"allgather": [same]}, {"allgather": [same]}, {"allgather": [other]}], {})
    assert chosen == {} and disagreed == {"allgather": (2,)}
    chosen, disagreed = choose([{"allgather": [same]}] * 3, {"allgather": (2, "e1", "c" * 64)})
    assert chosen == {"allgather": same} and disagreed == {}


def _wait_for(pred: Any, what: str, timeout_s: float = 30.0) -> Any:
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _follow_two_epochs(rank: int, world: int, sync_dir: str) -> dict[str, Any]:
    """A gloo rank: follow daemon A (v2 of epoch 1); its client reconnects to daemon B, started on the same
    address and store after the manifest was lost."""
    from runtime.executor.executor import Executor

    d = Path(sync_dir)
    ex = Executor(comm="world", control_timeout_s=20)
    out: dict[str, Any] = {}
    addr = _wait_for(lambda: (d / "a.addr").exists() and (d / "a.addr").read_text(), "daemon A")
    client = Client(addr, token=TOKEN, role="executor", rank=rank, comms=["world"])
    ex.follow(client, telemetry=False)
    for phase in ("a", "b"):
        _wait_for(lambda: any(i[1] != out.get("a", ("", ""))[1] for i in ex._staged.get("allgather", {})),
                  f"a version of daemon {phase}")
        ex.sync_versions()
        out[phase] = ex.active_identity["allgather"]
        (d / f"{phase}.done{rank}").write_text("")
    client.close()
    # ranks staging different programs as one version: not switched, the odd rank reported
    from msccl_xml import lower

    prog = lower(synthesize("allgather", load_topology("ring:2")).schedule, verify=False)
    ex.stage(dataclasses.replace(prog, name=f"program of rank {rank}"), version=7, background=False).result()
    out["disagreed"] = ex.sync_versions().disagreed
    out["after"] = ex.active_identity["allgather"]
    return out


@pytest.mark.slow
def test_gloo_ranks_take_a_new_epoch_and_refuse_mixed_digests(tmp_path: Path) -> None:
    import threading

    from runtime.executor.launch import launch

    pytest.importorskip("torch")
    topo2 = load_topology("ring:2")
    store = VersionStore(tmp_path / "store")
    for _ in range(2):  # epoch 1 holds v1 and v2
        store.publish("world", "allgather", [(0, None, synthesize("allgather", topo2))], reason="t", topology=topo2)
    profile = profile_from_dict({"format": "loopcoll.profile/1", "topology": "ring:2", "communicators": [
        {"name": "world", "ranks": [0, 1], "collectives": [{"collective": "allgather", "sizes": [1 << 20]}]}]})
    sync = tmp_path / "sync"
    sync.mkdir()
    epochs: list[str] = []

    def daemons() -> None:
        port = 0
        for phase in ("a", "b"):
            controller = Controller(topo2, profile, store.directory)
            epochs.append(controller.store.epoch)
            with serve(controller, port=port, token=TOKEN, store_dir=store.directory, log=lambda r: None) as h:
                port = h.port
                (sync / f"{phase}.addr").write_text(h.address)
                _wait_for(lambda: all((sync / f"{phase}.done{r}").exists() for r in (0, 1)), "ranks", 60)
            store.manifest_path.unlink()  # the manifest is lost before daemon B starts

    t = threading.Thread(target=daemons, daemon=True)
    t.start()
    res = launch(_follow_two_epochs, 2, str(sync), timeout_s=90)
    t.join(10)
    for r in res:
        assert r["a"][:2] == (2, epochs[0])
        assert r["b"][:2] == (1, epochs[1]) and epochs[1] != epochs[0]
        assert r["disagreed"] == {"allgather": (1,)} and r["after"] == r["b"]
