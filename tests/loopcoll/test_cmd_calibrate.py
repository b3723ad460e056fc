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
    # the fitted profile measured msccl only: the NCCL ring baseline runs on the base profile's costs, and says so
    rc = main(["simulate", "allgather", "nvswitch:4", "--schedules", "nccl", "--sizes", "4M", "--profile", str(out)])
    assert rc == 0 and "profile 'mine': nccl_ring costs from base profile 'h200' (not calibrated here)" in capsys.readouterr().out
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


# Real 2xH200 NV18 NCCL 2.28.9 AllGather algbw (GB/s) at 1, 8, 64, 256, 1024 MB (benchmarks/data/h200x2_nccl.json).
H200X2_AG = [14, 131, 361, 451, 518]


def _measured_table(tmp_path):
    path = tmp_path / "h200x2_ag.txt"
    rows = [(mb * MB, mb * MB / 1e9 / gbps * 1e6) for mb, gbps in zip([1, 8, 64, 256, 1024], H200X2_AG)]
    path.write_text(format_nccl_tests("allgather", 2, rows))
    return path


def test_profile_calibrated_without_base_simulates_every_executor(tmp_path, capsys):
    """NCCL ring measurements only, no --base: a synthesized (msccl) schedule still simulates, and says whose costs."""
    out = tmp_path / "mine.json"
    assert main(["calibrate", str(_measured_table(tmp_path)), "--topology", "nvswitch:2", "--name", "mine", "-o", str(out),
                 "--quiet"]) == 0
    capsys.readouterr()
    assert main(["simulate", "allgather", "nvswitch:2", "--schedules", "loopcoll,nccl", "--sizes", "64M", "--profile",
                 str(out)]) == 0
    text = capsys.readouterr().out
    assert "profile 'mine': msccl costs from base profile 'h200' (not calibrated here)" in text
    assert main(["simulate", "allgather", "nvswitch:2", "--schedules", "loopcoll,nccl", "--sizes", "64M", "--profile",
                 str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["profile_from_base"] == {"msccl": "h200"}  # nccl_ring was calibrated: not listed
    ring = {r["schedule"]: r for r in doc["results"]}["nccl"]
    assert ring["executor"] == "nccl_ring" and ring["algbw_GBps"] == pytest.approx(361, rel=0.1)  # measured 361 GB/s
    assert main(["synth", "allgather", "nvswitch:2", "--sizes", "1M,64M", "--profile", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["profile_from_base"] == {"msccl": "h200"}
    assert main(["demo", "--topology", "hpn:1x2x2", "--profile", str(out), "--size", "16M", "--out-dir",
                 str(tmp_path / "demo"), "--quiet"]) == 0
    assert "profile 'mine': msccl, nccl_p2p costs from base profile 'h200'" in capsys.readouterr().out


def test_implausible_fit_is_refused_unless_forced(tmp_path, capsys):
    """2xH200 NVLink measurements against one 400 Gbit/s NIC per host: no efficiency <= 4 explains 518 GB/s."""
    table, out = _measured_table(tmp_path), tmp_path / "bad.json"
    assert main(["calibrate", str(table), "--topology", "hpn:1x2x1", "-o", str(out), "--no-loo"]) == 2
    cap = capsys.readouterr()
    assert "fit quality: 5 row(s) used" in cap.out and "nccl_ring.efficiency.net" in cap.out
    assert "<- at upper bound [0.02, 4]" in cap.out
    (line,) = cap.err.strip().splitlines()
    assert line.startswith("loopcoll: error: implausible fit, nothing written: nccl_ring.efficiency.net sits at its "
                           "upper bound 4 = 400% of capacity")
    assert "topology may not match the measurements" in line and "--force" in line
    assert not out.exists()
    assert main(["calibrate", str(table), "--topology", "hpn:1x2x1", "-o", str(out), "--no-loo", "--force"]) == 0
    assert "loopcoll: warning: implausible fit kept (--force)" in capsys.readouterr().err
    quality = json.loads(out.read_text())["fit"]["quality"]
    assert quality["forced"] and quality["rows"] == 5 and "upper bound" in quality["implausible"][0]


def test_plausible_fit_is_accepted_and_error_limits_are_options(tmp_path, capsys):
    table, out = _measured_table(tmp_path), tmp_path / "ok.json"
    assert main(["calibrate", str(table), "--topology", "nvswitch:2", "-o", str(out), "--no-loo", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "fit quality: 5 row(s) used; median |error|" in text and "<- at" not in text and out.exists()
    q = json.loads(out.read_text())["fit"]["quality"]
    assert q["implausible"] == [] and 0 < q["median_abs_error"] < 0.15 and q["worst_abs_error"] < 0.5
    # the same fit against a tighter limit than its own worst error is refused
    limit = q["worst_abs_error"] / 2
    assert main(["calibrate", str(table), "--topology", "nvswitch:2", "--no-loo", "--quiet",
                 "--max-worst-error", str(limit)]) == 2
    assert f"exceeds {100 * limit:g}%" in capsys.readouterr().err


def test_table_without_header_names_the_collective_flag(tmp_path, capsys):
    path = tmp_path / "table.txt"
    path.write_text("\n".join(line for line in _measured_table(tmp_path).read_text().splitlines()
                              if "Collective test" not in line))
    assert main(["calibrate", str(path), "--topology", "nvswitch:2"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: no nccl-tests header naming the collective" in err
    assert "pass --collective allgather|alltoall|allreduce|reducescatter" in err
    assert main(["calibrate", str(path), "--topology", "nvswitch:2", "--collective", "allgather", "--no-loo",
                 "--quiet"]) == 0


def test_calibrate_json_keeps_stdout_clean_and_quiet_keeps_stderr_empty(tmp_path, capsys):
    assert main(["calibrate", str(_measured_table(tmp_path)), "--topology", "nvswitch:2", "--json", "--quiet"]) == 0
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    assert doc["format"] == "loopcoll.calibration/1" and doc["base"] == "h200" and cap.err == ""
    assert doc["inherited"] == {k: "h200" for k in ("msccl", "nccl_p2p", "nccl_tree", "torch_p2p")}
