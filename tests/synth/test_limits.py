"""Fail fast with one LoopcollError: huge or deep input, size caps, memory estimates, time limits,
progress lines, warm-start validation, atomic writes that keep modes and never lose output.

Runtime in CI: about 10 s.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

import synth._deadline as deadline_mod
from synth import load_topology, optimal_bound, read_schedule, synthesize, write_schedule
from synth.errors import LoopcollError, ScheduleError, SolverError, TopologyError
from synth.fileio import write_text_atomic
from synth.result import Status
from synth.schedule import Schedule
from synth.topologies import named_topology, topology_from_json
from synth.topologies.named import MAX_NAMED_GPUS
from tests.strategies import topology_doc

ROOT = Path(__file__).resolve().parents[2]


# -- huge or deep input ------------------------------------------------------------------------
def test_400_digit_capacity_is_one_topology_error_naming_the_link() -> None:
    doc = topology_doc()
    doc["links"][0]["gbps"] = 10**400
    with pytest.raises(TopologyError, match=r"link gpu0->sw0: gbps must be a finite number") as exc:
        topology_from_json(json.dumps(doc))
    assert len(str(exc.value)) < 300


@pytest.mark.parametrize("text", ["[" * 100_000, '{"a":' * 100_000])
def test_deeply_nested_json_is_one_error(text: str, tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="nested too deeply"):
        topology_from_json(text)
    p = tmp_path / "s.json"
    p.write_text(text)
    with pytest.raises(ScheduleError, match="nested too deeply"):
        read_schedule(str(p))


def test_5000_digit_json_integer_is_one_error() -> None:
    with pytest.raises(TopologyError, match="unreadable JSON"):
        topology_from_json('{"name": ' + "9" * 5000 + "}")


@pytest.mark.parametrize("spec", ["ring:100000000", f"ring:{MAX_NAMED_GPUS + 1}", "hpn:1000x1000x8", "ring:" + "9" * 5000])
def test_named_spec_size_is_capped_before_building(spec: str) -> None:
    start = time.perf_counter()
    with pytest.raises(TopologyError, match="named spec") as exc:
        load_topology(spec)
    assert time.perf_counter() - start < 5
    assert len(str(exc.value)) < 400


def test_failures_given_as_a_string_are_refused() -> None:
    with pytest.raises(TopologyError, match="failures must be a sequence"):
        load_topology("ring:4", failures="fail2")  # type: ignore[arg-type]


# -- memory estimates --------------------------------------------------------------------------
def test_alltoall_refuses_a_solve_estimated_beyond_the_memory_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPCOLL_MAX_MEMORY_GB", "0.05")
    topo = named_topology("ring:200")  # ~64 B x N^2 x diameter = 256 MB estimated
    with pytest.raises(SolverError, match=r"ring-200.*needs about .* GB.*LOOPCOLL_MAX_MEMORY_GB=0.05"):
        synthesize("alltoall", topo)
    with pytest.raises(SolverError, match="LOOPCOLL_MAX_MEMORY_GB"):
        optimal_bound("alltoall", topo)


def test_alltoall_ring_1000_is_refused_in_seconds_not_oom_killed() -> None:
    """The issue's repro, in a subprocess under a 4 GiB address-space limit."""
    code = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30)); "
            "import sys; from loopcoll.cli import main; sys.exit(main(['bound', 'alltoall', 'ring:1000']))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "loopcoll: error: AllToAll on 'ring-1000'" in proc.stderr


# -- time limits and progress -------------------------------------------------------------------
def test_tree_collective_honours_its_time_limit() -> None:
    topo = named_topology("ring:300")  # several seconds uncapped
    start = time.perf_counter()
    res = synthesize("allgather", topo, time_limit_s=0.2)
    assert time.perf_counter() - start < 5
    # Cold and stopped: the NCCL-like ring, valid, its gap against a proven upper bound (issue 31).
    assert res.status is Status.TIME_LIMIT and "time limit" in res.message and "NCCL-like ring" in res.message
    assert res.schedule is not None and res.schedule.meta["synthesizer"] == "nccl-ring"
    res.schedule.validate(topo)
    assert res.optimal_algbw_GBps >= optimal_bound("allgather", topo).algbw_GBps * (1 - 1e-12)
    assert res.gap_pct == pytest.approx(100 * (1 - res.algbw_GBps / res.optimal_algbw_GBps))


def test_tree_bound_at_its_time_limit_is_a_proven_upper_bound() -> None:
    topo = named_topology("ring:120")
    exact = optimal_bound("allgather", topo)
    stopped = optimal_bound("allgather", topo, time_limit_s=1e-6)
    assert exact.status is Status.OPTIMAL
    assert stopped.status is Status.TIME_LIMIT and stopped.rate_GBps >= exact.rate_GBps


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "5", True])
def test_bad_time_limits_are_solver_errors(bad: object) -> None:
    with pytest.raises(SolverError, match="time_limit_s"):
        synthesize("allgather", named_topology("ring:4"), time_limit_s=bad)  # type: ignore[arg-type]


def test_long_solves_log_progress(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(deadline_mod, "PROGRESS_EVERY_S", 0.0)
    with caplog.at_level(logging.INFO, logger="synth.progress"):
        synthesize("allgather", named_topology("ring:8"))
    assert any("allgather on ring-8: still solving" in r.getMessage() for r in caplog.records)


# -- warm-start validation ------------------------------------------------------------------------
def _corrupt(sched: Schedule, change: str) -> dict[str, object]:
    doc = sched.to_dict(legacy=True)  # the old form: hops spelt out in the route
    route = doc["routes"][0]  # type: ignore[index]
    if change == "rank 99":
        route["hops"][0]["dst"] = 99
    elif change == "unknown node":
        route["hops"][0]["path"] = [route["hops"][0]["path"][0], "nowhere", route["hops"][0]["path"][-1]]
    else:
        route["chunks"] = 10**30
    return doc


@pytest.mark.parametrize("change", ["rank 99", "unknown node", "1e30 chunks"])
def test_corrupt_warm_start_schedules_are_refused(change: str, tmp_path: Path) -> None:
    topo = named_topology("hpn:1x2x4")
    good = synthesize("allgather", topo).schedule
    assert good is not None
    p = tmp_path / "w.json"
    p.write_text(json.dumps(_corrupt(good, change)))
    with pytest.raises(ScheduleError):
        synthesize("allgather", topo, warm_from=read_schedule(str(p)))


def test_warm_start_from_a_schedule_over_a_link_now_down_is_accepted() -> None:
    topo = named_topology("hpn:1x2x4")
    cold = synthesize("allgather", topo).schedule
    assert cold is not None
    down = topo.with_failure("scale:gpu0:tor0.0:0")
    res = synthesize("allgather", down, warm_from=cold)
    assert res.status is Status.OPTIMAL and res.schedule is not None
    res.schedule.validate(down)


# -- outputs -------------------------------------------------------------------------------------
def test_schedule_json_is_byte_deterministic(tmp_path: Path) -> None:
    topo = named_topology("hpn:1x2x4")
    for collective in ("allgather", "allreduce", "alltoall"):
        texts = []
        for i in range(2):
            sched = synthesize(collective, topo).schedule  # type: ignore[arg-type]
            assert sched is not None
            write_schedule(sched, str(tmp_path / f"{collective}{i}.json"))
            texts.append((tmp_path / f"{collective}{i}.json").read_bytes())
        assert texts[0] == texts[1]
        assert b"time_s" not in texts[0]


def test_new_files_respect_the_umask_and_existing_files_keep_their_mode(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        write_text_atomic(tmp_path / "new.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "new.txt").st_mode) == 0o640
    (tmp_path / "kept.txt").write_text("old")
    os.chmod(tmp_path / "kept.txt", 0o644)
    write_text_atomic(tmp_path / "kept.txt", "new")
    assert stat.S_IMODE(os.stat(tmp_path / "kept.txt").st_mode) == 0o644


def test_a_symlink_target_is_written_through(tmp_path: Path) -> None:
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    write_text_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_stale_temporaries_of_a_dead_writer_are_removed(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(proc.stdout)
    stale = tmp_path / f".out.xml.{dead}.abc123.tmp"
    stale.write_text("half")
    other = tmp_path / f".other.xml.{dead}.abc123.tmp"
    other.write_text("not ours")
    live = tmp_path / f".out.xml.{os.getppid()}.abc123.tmp"  # a running process: maybe still writing
    live.write_text("busy")
    write_text_atomic(tmp_path / "out.xml", "ok")
    assert not stale.exists() and other.exists() and live.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".out")) == [live.name]


@pytest.mark.parametrize("bad", ["", ".", str(Path("/"))])
def test_paths_naming_no_file_are_refused(bad: str) -> None:
    with pytest.raises(LoopcollError):
        write_text_atomic(bad, "x")


def test_tree_time_limit_keeps_a_still_valid_warm_start_with_a_certified_gap() -> None:
    cold = synthesize("allgather", named_topology("ring:60"))
    degraded = named_topology("ring:60").with_failure("scale:gpu0:gpu1:0.5")
    res = synthesize("allgather", degraded, warm_from=cold, time_limit_s=1e-6)
    assert res.status is Status.TIME_LIMIT and res.schedule is cold.schedule
    exact = optimal_bound("allgather", degraded)
    assert res.algbw_GBps == pytest.approx(cold.schedule.algbw_GBps(degraded))  # type: ignore[union-attr]
    assert res.optimal_algbw_GBps >= exact.algbw_GBps  # a proven upper bound
    assert res.gap_pct == pytest.approx(100 * (1 - res.algbw_GBps / res.optimal_algbw_GBps))


def test_simulating_a_schedule_of_trillions_of_chunks_is_refused_at_once() -> None:
    from synth.simulation import simulate

    topo = named_topology("hpn:1x2x8").with_failure("scale:gpu0:tor0.0:0.3333333333333333")
    res = synthesize("allgather", topo)
    assert res.schedule is not None and res.schedule.nchunks > 10**12
    with pytest.raises(ScheduleError, match="--chunks"):
        simulate(res.schedule, topo, 2**26)
