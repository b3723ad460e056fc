"""The store publishes a fitted version's bytes as they are; the executor stages a pushed entry in memory."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from msccl_xml.deploy import fit
from msccl_xml.targets import target
from runtime.executor.sources import entry_programs
from runtime.formats.store import VersionStore
from synth import load_topology, synthesize

RING = load_topology("ring:4")


def test_store_writes_a_versions_bytes_and_the_executor_reads_them_in_memory(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    res = synthesize("allgather", RING)
    v = fit(res, RING, target("msccl-executor-nccl"), bands=[(0, 999), (1000, None)])
    store = VersionStore(tmp_path / "s")
    e = store.publish("w", "allgather", v, reason="r", topology=RING)
    assert store.path(e.bands[0].xml).read_bytes() == v.bands[0].program
    assert e.bands[1].xml == e.bands[0].xml and e.bands[1].schedule == e.bands[0].schedule
    plain = store.publish("w", "allgather", [(0, 999, res), (1000, None, res)], reason="r", topology=RING,
                          export_xml=False)
    assert [b.xml for b in plain.bands] == [None, None] and plain.status == "optimal"
    # Staging a pushed entry builds its programs from the fetched bytes, never through a file.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-dir"))
    for entry in (e, plain):
        progs = entry_programs(entry, lambda rel: store.path(rel).read_bytes())
        assert [(p.min_bytes, p.max_bytes) for p in progs] == [(0, 999), (1000, 0)]
        assert all(p.ngpus == 4 and p.coll == "allgather" for p in progs)
    assert not (tmp_path / "no-such-dir").exists()
