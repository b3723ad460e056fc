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
