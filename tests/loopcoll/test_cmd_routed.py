"""`loopcoll synth -o` and `loopcoll bound` on fabrics with several switch paths per pair (issue 16).

Every collective exports on every fabric class of the issue (ForestColl's DGX-A100 model, an
MI250-like box, a random irregular fabric): the XML checks valid and its algbw under the
executor's routing equals the schedule's. About 10 s of CI time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopcoll.cli import main
from msccl_xml import check, program_algbw_GBps, read
from synth.routed.fabrics import forestcoll_dgx_a100, mi250_like, random_fabric
from synth.topologies import Topology, read_topology
from synth.topologies.io import write_topology

FABRICS = {"dgx-a100-model": lambda: forestcoll_dgx_a100(1), "mi250-like": lambda: mi250_like(1),
           "random": lambda: random_fabric(3, 8)}


def _file(tmp_path: Path, name: str) -> tuple[str, Topology]:
    topo = FABRICS[name]()
    path = tmp_path / f"{name}.json"
    write_topology(topo, path)
    return str(path), read_topology(path)


@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "allreduce", "alltoall"])
@pytest.mark.parametrize("fabric", sorted(FABRICS))
def test_synth_exports_routed_schedules_at_their_rate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fabric: str, collective: str
) -> None:
    path, topo = _file(tmp_path, fabric)
    out = tmp_path / "x.xml"
    argv = ["synth", collective, path, "-o", str(out), "--json"] + (["--chunks", "4"] if collective == "alltoall" else [])
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["routing"] == "routed"
    assert doc["routed_optimal_algbw_GBps"] <= doc["free_optimal_algbw_GBps"] * (1 + 1e-9)
    assert doc["routing_gap_pct"] >= 0.0
    program = read(str(out))
    assert check(program).valid
    assert program_algbw_GBps(program, topo) == pytest.approx(doc["algbw_GBps"], rel=1e-12)


def test_free_routing_stays_available(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = _file(tmp_path, "dgx-a100-model")
    # The free synthesizer is still available; its schedule is not what the executor runs.
    code = main(["synth", "allgather", path, "--routing", "free", "--json"])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["routing"] == "free"


def test_bound_reports_both_optima(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = _file(tmp_path, "random")
    assert main(["bound", "allgather", path, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["routed_algbw_GBps"] <= doc["algbw_GBps"] * (1 + 1e-9)
    assert doc["routing_gap_pct"] == pytest.approx(max(0.0, 100 * (1 - doc["routed_algbw_GBps"] / doc["algbw_GBps"])),
                                                   abs=1e-6)
    assert main(["bound", "alltoall", path]) == 0
    text = capsys.readouterr().out
    assert "free-routing optimum" in text and "routed optimum" in text and "the executor loses" in text
