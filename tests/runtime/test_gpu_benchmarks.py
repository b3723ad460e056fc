"""CPU dry runs of the ``benchmarks/gpu/`` scripts (gloo, 2 processes, tiny sizes), run through their ``main``.

The scripts are meant for NCCL on GPUs (issue #24); here each one runs end to end on gloo so that the
code paths the GPU runs take (launch, executor vs native, ceiling, swaps, telemetry with a contender
process, daemon + following executors) are exercised, and their JSON has the figures it promises.
Timing figures are not asserted. 43 s for the file on a shared 2-core VM at load average 12 (6-12 s per
script; process start-up and torch imports dominate).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from benchmarks.gpu import _common, _workers  # noqa: E402
from benchmarks.gpu import algbw, closed_loop, correctness, swap, telemetry  # noqa: E402
from runtime.executor import ExecutorError  # noqa: E402

COMMON = ["--backend", "gloo", "--nprocs", "2"]


def _doc(path: Path, name: str) -> dict:
    doc = json.loads((path / f"{name}.json").read_text())
    assert (path / f"{name}.md").read_text().startswith(f"# {name}")
    env = doc["environment"]
    assert env["backend"] == "gloo" and env["nprocs"] == 2 and env["torch"] == torch.__version__
    assert doc["command"].startswith(f"python benchmarks/gpu/{name}.py")
    return doc


def test_correctness_dry_run(tmp_path: Path) -> None:
    assert correctness.main([*COMMON, "--cases", "8", "--max-elems", "300", "--out-dir", str(tmp_path)]) == 0
    doc = _doc(tmp_path, "correctness")
    cases = doc["cases"]
    assert len(cases) == 8 and {c["collective"] for c in cases} == {"allgather", "reducescatter", "allreduce",
                                                                     "alltoall"}
    assert all(c["ok"] and c["program_ran"] for c in cases)
    summary = doc["sections"]["per collective and schedule (checks = cases x ranks)"]
    assert sum(r["checks"] for r in summary) == 16 and sum(r["failures"] for r in summary) == 0


def test_the_checker_catches_a_wrong_result() -> None:
    ref = torch.arange(64, dtype=torch.float32)
    ok, _ = _workers._close(torch, ref + 1e-7 * ref, ref, 2, exact=False)
    assert ok
    bad = ref.clone()
    bad[17] += 0.5
    assert _workers._close(torch, bad, ref, 2, exact=False) == (False, 0.5)
    assert not _workers._close(torch, ref.to(torch.int32) + (torch.arange(64) == 3), ref.to(torch.int32), 2,
                               exact=True)[0]


def test_algbw_dry_run(tmp_path: Path) -> None:
    argv = [*COMMON, "--sizes", "64K", "--collectives", "allgather", "allreduce", "--runs", "2",
            "--out-dir", str(tmp_path)]
    assert algbw.main(argv) == 0
    doc = _doc(tmp_path, "algbw")
    rows = next(iter(doc["sections"].values()))
    assert [r["collective"] for r in rows] == ["allgather", "allreduce"]
    assert all(r["correct"] and r["executor_GBps"] > 0 and r["native_GBps"] > 0 for r in rows)
    assert rows[0]["ceiling_GBps"] > 0 and "ceiling_GBps" not in rows[1]
    assert all(len(r["executor_runs_s"]) == 2 for r in doc["raw"])
    assert any("0.95x" in t for t in doc["targets"])


def test_swap_dry_run(tmp_path: Path) -> None:
    assert swap.main([*COMMON, "--size", "16K", "--swaps", "3", "--runs", "1", "--out-dir", str(tmp_path)]) == 0
    doc = _doc(tmp_path, "swap")
    rows = doc["sections"]["swap latency per rank (medians over swaps)"]
    assert [r["rank"] for r in rows] == [0, 1]
    for r in rows:
        assert r["swaps"] == r["switched"] == 3
        assert r["staging_ms"] > 0 and r["agreement_ms"] > 0 and r["first_delay_ms"] >= 0
        assert r["total_ms"] >= r["critical_ms"]


def test_telemetry_dry_run(tmp_path: Path) -> None:
    argv = [*COMMON, "--sizes", "64K", "--runs", "2", "--contend-bytes", "1M", "--out-dir", str(tmp_path)]
    assert telemetry.main(argv) == 0
    doc = _doc(tmp_path, "telemetry")
    rows = next(iter(doc["sections"].values()))
    assert sorted((r["phase"], r["rank"]) for r in rows) == [("contended", 0), ("contended", 1), ("healthy", 0),
                                                            ("healthy", 1)]
    for r in rows:  # 2 ranks: one round, each rank sends to its peer only, so every pair spans the call
        assert r["pairs"] == 1 and r["samples"] == 2
        assert r["reported_GBps"] > 0 and r["truth_GBps"] > 0 and r["raw_p2p_GBps"] > 0
    assert doc["contender"]["kind"] == "busy" and doc["contender"]["GBps"] > 0


def test_closed_loop_dry_run(tmp_path: Path) -> None:
    argv = [*COMMON, "--duration", "3", "--inject-at", "1", "--clear-at", "2", "--calib-calls", "10",
            "--out-dir", str(tmp_path)]
    assert closed_loop.main(argv) == 0
    doc = _doc(tmp_path, "closed_loop")
    a = doc["analysis"]
    assert a["initial_version"] == 1 and 1 in a["versions_seen"] and a["calls"] > 10
    assert a["t_inject"] is not None and a["t_clear"] is not None and a["t_clear"] > a["t_inject"]
    sent = sum(s["sent"] for s in doc["samples"])
    assert sent > 0 and a["daemon_samples_received"] == sent  # every executor sample reached the daemon
    assert doc["calibration"]["inject_GBps"] > 0
    assert any(x.get("event") == "publish" and x.get("version") == 1 for x in doc["daemon_log"])


def test_nccl_without_gpus_is_refused(tmp_path: Path) -> None:
    if _common.gpu_count() >= 2:
        pytest.skip("this machine has GPUs")
    with pytest.raises(ExecutorError, match="at least 2"):
        swap.main(["--backend", "nccl", "--out-dir", str(tmp_path)])
    with pytest.raises(ExecutorError, match="runs on --device"):
        swap.main(["--backend", "gloo", "--device", "cuda", "--out-dir", str(tmp_path)])


def test_closed_loop_analysis_figures() -> None:
    """Detection, reaction and the algbw phases from made-up call logs (the paths a GPU run takes)."""
    t0, size = 1000.0, 1 << 20

    def calls(switch_at: float) -> list:  # one call per 10 ms; 1 ms healthy, 2 ms contended on v1, 1.25 ms on v2
        out = []
        for k in range(1000):
            t = t0 + 0.01 * k
            version = 2 if t >= switch_at else 1
            slow = 3.0 <= t - t0 < 6.0
            dur = (2e-3 if version == 1 else 1.25e-3) if slow else 1e-3
            out.append((t, dur, version))
        return out

    res = [{"calls": calls(t0 + 3.2), "t_loop": t0, "t_inject": t0 + 3.0, "t_clear": t0 + 6.0},
           {"calls": calls(t0 + 3.25), "t_loop": t0, "t_inject": None, "t_clear": None}]
    log = [{"event": "flag", "t_s": t0 + 1.0},  # before the injection: a false flag
           {"event": "flag", "t_s": t0 + 3.05}, {"event": "synthesized", "t_s": t0 + 3.05, "synth_time_s": 0.02},
           {"event": "publish", "t_s": t0 + 3.07, "version": 2, "collective": "allgather"},
           {"event": "stopped", "t_s": t0 + 11, "counters": {"samples_received": 123}}]
    a = closed_loop.analyse(res, log, size)
    assert a["initial_version"] == 1 and a["versions_seen"] == [1, 2]
    assert a["detect_ms"] == pytest.approx(50.0) and a["detect_calls"] == 6
    assert a["false_flags_before_injection"] == 1 and a["flags"] == 2
    assert a["synth_ms"] == pytest.approx(20.0) and a["publish_ms"] == pytest.approx(70.0)
    assert a["reaction_ms"] == pytest.approx(250.0)  # the last rank's first call on version 2
    assert a["before_GBps"] == pytest.approx(size / 1e-3 / 1e9)
    assert a["stale_GBps"] == pytest.approx(size / 2e-3 / 1e9)
    assert a["adapted_GBps"] == pytest.approx(size / 1.25e-3 / 1e9)
    assert a["after_clear_GBps"] == pytest.approx(size / 1e-3 / 1e9)
    assert a["daemon_samples_received"] == 123
    none = closed_loop.analyse([{**res[0], "calls": calls(t0 + 99)}], log[:1], size)
    assert none["detect_ms"] is None and none["reaction_ms"] is None and none["adapted_GBps"] is None
