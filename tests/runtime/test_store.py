"""Versioned schedule store: manifest format, atomic publication, crash safety, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runtime.errors import StoreError
from runtime.formats.store import STORE_FORMAT, VersionEntry, VersionStore
from synth import CutLink, load_topology, synthesize


@pytest.fixture(scope="module")
def ring() -> tuple:
    topo = load_topology("ring:4")
    return topo, synthesize("allgather", topo)


def test_publish_writes_files_then_manifest(tmp_path: Path, ring: tuple) -> None:
    topo, res = ring
    store = VersionStore(tmp_path / "s")
    e1 = store.publish("world", "allgather", [(1, 1000, res), (1001, None, res)], reason="bootstrap", topology=topo)
    doc = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert doc["format"] == STORE_FORMAT and len(doc["versions"]) == 1
    assert e1.version == 1 and len(e1.bands) == 2
    assert e1.bands[0].schedule == e1.bands[1].schedule  # one result shared by two bands: written once
    assert store.path(e1.bands[0].schedule).is_file() and store.path(e1.bands[0].xml).is_file()
    assert e1.band_for(5000) == 1 and e1.band_for(10) == 0
    assert e1.reason == "bootstrap" and e1.algbw_GBps == pytest.approx(res.algbw_GBps)
    assert e1.cut == res.schedule.bottleneck and all(isinstance(c, CutLink) for c in e1.cut)
    e2 = store.publish("world", "allgather", [(1, None, res)], reason="detector: x", topology=topo,
                       verdict={"flagged": True}, trigger_samples=7, created_t_s=3.5)
    assert e2.version == 2 and store.latest() == [e2] and store.entries() == [e1, e2]
    again = VersionStore(tmp_path / "s", create=False)
    assert again.entries() == [e1, e2]
    assert VersionEntry.from_dict(json.loads(json.dumps(e2.to_dict()))) == e2
    assert again.load_schedule(e2) == res.schedule


def test_measured_capacities_recorded_against_nominal(tmp_path: Path) -> None:
    topo = load_topology("ring:4")
    measured = topo.with_link("gpu0", "gpu1", gbps=100.0)
    res = synthesize("allgather", measured)
    e = VersionStore(tmp_path).publish("c", "allgather", [(1, None, res)], reason="r", topology=measured,
                                       nominal=topo)
    assert dict(e.capacities_gbps) == {"gpu0->gpu1": 100.0}
    assert e.topology_fingerprint == measured.fingerprint


def test_injected_failure_before_manifest_keeps_previous_version(tmp_path: Path, ring: tuple) -> None:
    topo, res = ring
    store = VersionStore(tmp_path)
    e1 = store.publish("w", "allgather", [(1, None, res)], reason="a", topology=topo)
    with pytest.raises(StoreError, match="injected failure"):
        store.publish("w", "allgather", [(1, None, res)], reason="b", topology=topo, _fail_before_manifest=True)
    reread = VersionStore(tmp_path, create=False)
    assert reread.entries() == [e1]
    assert reread.load_schedule(e1) == res.schedule
    # the next publication reuses the number the failed one never made visible, overwriting its files
    assert store.publish("w", "allgather", [(1, None, res)], reason="c", topology=topo).version == 2


def test_killed_publisher_keeps_previous_version_loadable(tmp_path: Path, ring: tuple) -> None:
    """A real process killed (SIGKILL) in the middle of publishing: the manifest still loads."""
    topo, res = ring
    store = VersionStore(tmp_path)
    e1 = store.publish("w", "allgather", [(1, None, res)], reason="first", topology=topo)
    script = textwrap.dedent(f"""
        import os, signal
        from runtime.formats.store import VersionStore
        import runtime.formats.store as st
        from synth import load_topology, synthesize
        topo = load_topology("ring:4")
        res = synthesize("allgather", topo)
        real = st.VersionStore._write_manifest
        def die(self, entries):
            os.kill(os.getpid(), signal.SIGKILL)   # files written, manifest not yet
        st.VersionStore._write_manifest = die
        VersionStore({str(tmp_path)!r}).publish("w", "allgather", [(1, None, res)], reason="second", topology=topo)
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()[-400:]
    assert (tmp_path / "w" / "allgather" / "v2" / "b0.schedule.json").exists()  # it got that far
    reread = VersionStore(tmp_path, create=False)
    assert reread.entries() == [e1] and reread.load_schedule(e1) == res.schedule


def test_path_refuses_escapes(tmp_path: Path) -> None:
    store = VersionStore(tmp_path)
    for bad in ("../x", "/etc/passwd", "", "a/../../b"):
        with pytest.raises(StoreError, match="path"):
            store.path(bad)
    assert store.path("a/b.json") == (tmp_path / "a" / "b.json").resolve()


def test_bad_names_and_directories(tmp_path: Path, ring: tuple) -> None:
    topo, res = ring
    store = VersionStore(tmp_path)
    with pytest.raises(StoreError, match="communicator '../x'"):
        store.publish("../x", "allgather", [(1, None, res)], reason="r", topology=topo)
    with pytest.raises(StoreError, match="does not exist"):
        VersionStore(tmp_path / "nope", create=False)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "manifest.json").write_text('{"format": "other"}')
    with pytest.raises(StoreError, match="format must be 'loopcoll.store/1'"):
        VersionStore(tmp_path / "m")
    (tmp_path / "m" / "manifest.json").write_text('{"format": "loopcoll.store/1", "versions": [{"comm": 1}]}')
    with pytest.raises(StoreError, match=r"versions\[0\]: malformed"):
        VersionStore(tmp_path / "m")


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores directory permissions")
def test_unwritable_directory_is_one_clear_error(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(StoreError, match="not writable"):
            VersionStore(ro)
    finally:
        ro.chmod(0o700)


def test_xml_export_failure_is_recorded_not_fatal(tmp_path: Path) -> None:
    # hpn hops between hosts may take paths the MSCCL runtime would not; whichever happens, the
    # band has either an XML file or the reason it has none, and the schedule is always there.
    topo = load_topology("hpn:1x2x4")
    res = synthesize("alltoall", topo)
    e = VersionStore(tmp_path).publish("w", "alltoall", [(1, None, res)], reason="r", topology=topo)
    b = e.bands[0]
    assert (b.xml is None) != (b.xml_error is None)
    assert (tmp_path / b.schedule).is_file()


def test_store_path_that_is_a_file_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(StoreError, match="cannot create"):
        VersionStore(tmp_path / "f" / "store")


def test_cut_links_round_trip_through_the_manifest(tmp_path: Path) -> None:
    topo = load_topology("hpn:1x2x4")  # its AllGather schedule has a bottleneck cut of 4 links
    sched = synthesize("allgather", topo).schedule
    assert sched is not None and len(sched.bottleneck) == 4
    store = VersionStore(tmp_path / "s")
    entry = store.publish("world", "allgather", [(1, None, sched)], reason="bootstrap", topology=topo)
    doc = json.loads((tmp_path / "s" / "manifest.json").read_text())["versions"][0]
    assert doc["cut"] == [{"src": c.src, "dst": c.dst, "base_slack": c.base_slack} for c in sched.bottleneck]
    back = VersionEntry.from_dict(doc)
    assert back.cut == sched.bottleneck and all(type(c) is CutLink for c in back.cut)
    assert back.to_dict() == doc == entry.to_dict()
    again = VersionStore(tmp_path / "s", create=False).latest()[0]
    assert again.cut == sched.bottleneck


def test_malformed_cut_link_names_the_field(tmp_path: Path, ring: tuple) -> None:
    topo, res = ring
    doc = VersionStore(tmp_path / "s").publish("world", "allgather", [(1, None, res)], reason="r",
                                               topology=topo).to_dict()
    doc["cut"] = [{"src": "gpu0", "dst": "gpu1"}]
    with pytest.raises(StoreError, match=r"^entry 3: cut: bottleneck entry gpu0->gpu1 needs a numeric 'base_slack'"):
        VersionEntry.from_dict(doc, where="entry 3")


def test_store_writes_compact_schedules_read_back_with_shared_hops(tmp_path: Path, ring: tuple) -> None:
    """Band files are ``loopcoll-schedule/2`` (old ``/1`` files: tests/synth/test_schedule_compact.py)."""
    topo, res = ring
    store = VersionStore(tmp_path / "s")
    entry = store.publish("world", "allgather", [(1, None, res)], reason="bootstrap", topology=topo)
    doc = json.loads(store.path(entry.bands[0].schedule).read_text())
    assert doc["format"] == "loopcoll-schedule/2" and isinstance(doc["hops"], list)
    back = VersionStore(tmp_path / "s", create=False).load_schedule(entry)
    assert back == res.schedule
    assert len({id(h) for r in back.routes for h in r.hops}) == len(doc["hops"])


def test_executor_programs_read_both_schedule_forms(ring: tuple) -> None:
    """The executor lowers a band file of either form to the same program."""
    from runtime.executor.sources import program_from_bytes

    _, res = ring
    new = program_from_bytes(res.schedule.to_json().encode(), name="v1/b0.schedule.json")
    old = program_from_bytes(json.dumps(res.schedule.to_dict(legacy=True)).encode(), name="v0/b0.schedule.json")
    assert new == old and new.ngpus == 4
