"""`loopcoll synth alltoallv` and `loopcoll bound alltoallv`: JSON, schedule file, errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from loopcoll.cli import main
from synth import load_topology
from synth.alltoall_cg import alltoallv_lp_bound
from synth.alltoallv_schedule import AllToAllvSchedule


def _matrix(tmp_path: Path, n: int = 8, suffix: str = ".npy") -> Path:
    rng = np.random.default_rng(3)
    m = rng.integers(0, 10**7, (n, n)) * (1 + 9 * (np.arange(n) == 2))[None, :]  # rank 2 is a hot expert
    p = tmp_path / f"m{suffix}"
    if suffix == ".npy":
        np.save(p, m)
    else:
        p.write_text(json.dumps(m.tolist()))
    return p


@pytest.mark.parametrize("suffix", [".npy", ".json"])
def test_synth_alltoallv_json_and_schedule_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                suffix: str) -> None:
    m = _matrix(tmp_path, suffix=suffix)
    out = tmp_path / "s.json"
    assert main(["synth", "alltoallv", "hpn:1x2x4", "--fail", "fail2", "--demand", str(m), "--chunks", "4",
                 "--schedule-out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    topo = load_topology("hpn:1x2x4", ["fail2"])
    sched = AllToAllvSchedule.from_json(out.read_text())
    sched.validate(topo)
    assert sched.nchunks == 4 and doc["nchunks"] == 4
    assert doc["completion_time_s"] == pytest.approx(sched.completion_time_s(topo), rel=1e-9)
    assert doc["optimal_time_s"] <= doc["completion_time_s"] * (1 + 1e-9)
    assert doc["direct_time_s"] >= doc["optimal_time_s"] and doc["two_phase_time_s"] >= doc["optimal_time_s"]


def test_bound_alltoallv_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = _matrix(tmp_path)
    assert main(["bound", "alltoallv", "hpn:1x2x4", "--demand", str(m), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    ref = alltoallv_lp_bound(load_topology("hpn:1x2x4"), np.load(m)).time_s
    assert doc["status"] == "optimal" and doc["time_s"] == pytest.approx(ref, rel=1e-12)
    assert main(["bound", "alltoallv", "hpn:1x2x4", "--demand", str(m)]) == 0
    assert "optimal completion time" in capsys.readouterr().out


@pytest.mark.parametrize("argv, culprit", [
    (["synth", "alltoallv", "hpn:1x2x4", "--demand", "missing.npy"], "cannot read"),
    (["bound", "alltoallv", "hpn:1x2x4"], "needs --demand"),
    (["bound", "allgather", "hpn:1x2x4", "--demand", "x.npy"], "alltoallv only"),
])
def test_errors_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], culprit: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("loopcoll: error:") and culprit in err and len(err.strip().splitlines()) == 1


def test_wrong_size_and_xml_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = _matrix(tmp_path, n=4)
    assert main(["synth", "alltoallv", "hpn:1x2x4", "--demand", str(m)]) == 2
    assert "4x4 but the topology has 8 ranks" in capsys.readouterr().err
    m8 = _matrix(tmp_path)
    assert main(["synth", "alltoallv", "hpn:1x2x4", "--demand", str(m8), "-o", str(tmp_path / "x.xml")]) == 2
    assert "MSCCL XML export is not supported" in capsys.readouterr().err
