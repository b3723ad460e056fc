"""``loopcoll calibrate`` and ``simulate --profile`` end to end (real fits, real files)."""

from __future__ import annotations

import json

import pytest

from loopcoll.cli import main
from synth.simulation import CostProfile, ExecutorCost, load_profile
from synth.simulation.calibration import format_nccl_tests, synthetic_observations

MB = 2**20


def _table(tmp_path, shape: str, collective: str = "allgather", n: int = 4):
    true = CostProfile("t", {"msccl": ExecutorCost(20.0, 4.0, {"nvlink": 0.7})})
    obs = synthetic_observations(true, f"nvswitch:{n}", collective, (shape,), [256 * 1024, 4 * MB, 64 * MB])
    path = tmp_path / f"{shape}.txt"
    path.write_text(format_nccl_tests(collective, n, [(o.nbytes, o.time_us) for o in obs]))
    return path


def test_calibrate_fits_prints_points_and_writes_profile(tmp_path, capsys):
    files = [f"{_table(tmp_path, s)}@{s}" for s in ("ring", "tree", "direct")]
    out = tmp_path / "mine.json"
    rc = main(["calibrate", *files, "--topology", "nvswitch:4", "--executor", "msccl", "--name", "mine", "-o", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "msccl: launch 20.0" in text and "hop 4.0" in text and "nvlink 0.7000" in text
    assert text.count("ring.txt") == 3 and "LOO" in text
    prof = load_profile(str(out))
    assert prof.name == "mine" and prof.cost("msccl").launch_us == pytest.approx(20.0, rel=1e-3)
    # the fitted profile has msccl costs only: simulating the NCCL ring baseline with it is a one-line error
    rc = main(["simulate", "allgather", "nvswitch:4", "--schedules", "nccl", "--sizes", "4M", "--profile", str(out)])
    assert rc == 2 and "profile 'mine' has no costs for executor 'nccl_ring'" in capsys.readouterr().err
    rc = main(["simulate", "allgather", "nvswitch:4", "--schedules", "loopcoll", "--sizes", "4M", "--profile", str(out), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["profile"] == "mine" and doc["results"][0]["executor"] == "msccl"


def test_calibrate_errors_are_one_line(tmp_path, capsys):
    f = _table(tmp_path, "ring")
    assert main(["calibrate", str(f), "--topology", "nvswitch:8"]) == 2
    assert "measured on 4 ranks but topology 'nvswitch:8' has 8" in capsys.readouterr().err
    assert main(["calibrate", f"{f}@star", "--topology", "nvswitch:4"]) == 2
    assert "unknown schedule shape 'star'" in capsys.readouterr().err
    assert main(["calibrate", str(f)]) == 2
    assert "--topology is required" in capsys.readouterr().err


def test_simulate_names_the_profile(capsys):
    assert main(["simulate", "alltoall", "nvswitch:2", "--schedules", "nccl", "--sizes", "1G", "--profile", "h200"]) == 0
    out = capsys.readouterr().out
    assert "(profile h200)" in out
    calibrated = float(out.splitlines()[-1].split()[-1])
    assert 0.85 * 622 <= calibrated <= 1.15 * 622  # measured 2xH200 NCCL AllToAll at 1 GB: 622 GB/s
    assert main(["simulate", "alltoall", "nvswitch:2", "--schedules", "nccl", "--sizes", "1G", "--profile", "nope"]) == 2
    assert "neither a shipped profile" in capsys.readouterr().err


def test_demo_names_the_profile_and_simulates_under_it(tmp_path, capsys):
    assert main(["demo", "--topology", "hpn:1x2x2", "--profile", "h200", "--size", "16M", "--out-dir", str(tmp_path), "--quiet",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["profile"] == "h200"
    for row in doc["rows"]:
        assert row["profile"] == "h200"
        # fixed costs and efficiencies < 1 make every schedule slower than its bandwidth term
        assert 0 < row["nccl_sim_GBps"] < row["nccl_GBps"] and 0 < row["resynth_sim_GBps"] < row["resynth_GBps"]


def test_calibrate_from_telemetry(tmp_path, capsys):
    """coll samples of native collectives (version null) fit NCCL's kernel; malformed lines are skipped."""
    true = CostProfile("t", {"nccl_p2p": ExecutorCost(40.0, 3.4, {"nvlink": 0.8})})
    obs = synthetic_observations(true, "nvswitch:2", "alltoall", ("direct",), [MB, 16 * MB, 256 * MB], executor="nccl_p2p")
    lines = ["not json", json.dumps({"format": "loopcoll.telemetry/1", "kind": "pair", "bytes": 5, "busy_s": 1.0})]
    for o in obs:
        for jitter in (0.99, 1.0, 1.01):  # the median is the middle sample
            lines.append(json.dumps({"format": "loopcoll.telemetry/1", "t_s": 1.0, "comm": "dp0", "seq": 1, "version": None,
                                     "kind": "coll", "src": 0, "dst": None, "bytes": o.nbytes,
                                     "busy_s": o.time_us * 1e-6 * jitter, "collective": "alltoall", "origin": "executor"}))
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "p.json"
    base = tmp_path / "base.json"
    from synth.simulation.costmodel import profile_to_dict

    base.write_text(json.dumps(profile_to_dict(CostProfile("b", {"nccl_p2p": ExecutorCost(0.0, 3.4, {})}))))
    assert main(["calibrate", "--telemetry", str(path), "--topology", "nvswitch:2", "--base", str(base), "-o", str(out)]) == 0
    assert "telemetry (3 samples)" in capsys.readouterr().out
    got = load_profile(str(out)).cost("nccl_p2p")
    assert got.launch_us == pytest.approx(40.0, rel=1e-3) and got.efficiency["nvlink"] == pytest.approx(0.8, rel=1e-3)
