"""A feasible (gapped) schedule says so, with its gap, in every output (issue 28): ``synth --json``,
``synth`` text, the store manifest and ``daemon status``. Fails on 0d66542, which said ``optimal``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopcoll._cmd_daemon import render_status
from runtime.formats.store import VersionStore
from synth import synthesize
from synth.result import Status
from synth.routed.fabrics import mi250_like
from synth.topologies.io import write_topology
from tests.loopcoll._run import run


def test_routed_alltoall_with_a_gap_is_feasible_in_json_text_store_and_daemon_status(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topo = mi250_like(1)  # routed AllToAll, 10 chunks per block (--chunks 10): 148.1 of 150 GB/s
    path = tmp_path / "fabric.json"
    write_topology(topo, path)
    code, out, _ = run(capsys, "synth", "alltoall", str(path), "--chunks", "10", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["status"] == "feasible" and doc["routing"] == "routed"
    assert doc["binding_limit"] == "nchunks=10"
    assert doc["gap_pct"] == pytest.approx(100 * (1 - doc["algbw_GBps"] / doc["optimal_algbw_GBps"]), rel=1e-9)
    code, out, _ = run(capsys, "synth", "alltoall", str(path), "--chunks", "10")
    assert code == 0 and f"status: feasible (gap {doc['gap_pct']:.2f} % vs optimum 150.00 GB/s)" in out
    res = synthesize("alltoall", topo, chunks=10)
    assert res.status is Status.FEASIBLE
    entry = VersionStore(tmp_path / "store").publish("world", "alltoall", [(1, None, res)], reason="bootstrap",
                                                     topology=topo, export_xml=False)
    assert entry.status == "feasible"
    text = render_status({"controller": {"versions": [entry.to_dict()]}})
    assert f"status feasible (gap {res.gap_pct:.2f} % vs optimum 150.00 GB/s)" in text
