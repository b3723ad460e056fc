"""`loopcoll synth`: JSON keys, warm start from a schedule file, XML export, errors."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from loopcoll._log import _AfterDelay
from loopcoll.cli import main
from msccl_xml import check, read
from synth import load_topology, optimal_bound, read_schedule

TREE_KEYS = {"collective", "topology", "nranks", "nchunks", "algbw_GBps", "optimal_algbw_GBps", "solve_time_s", "warm"}


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main(argv) == 0
    out = capsys.readouterr().out
    return json.loads(out)


@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "allreduce"])
def test_synth_tree_collectives_reach_the_bound(capsys: pytest.CaptureFixture[str], collective: str) -> None:
    doc = _json(capsys, ["synth", collective, "hpn:1x2x8", "--fail", "fail1", "--json"])
    assert TREE_KEYS <= set(doc)
    assert doc["collective"] == collective and doc["nranks"] == 16 and doc["warm"] is False
    bound = optimal_bound(collective, load_topology("hpn:1x2x8", ["fail1"])).algbw_GBps
    assert doc["optimal_algbw_GBps"] == pytest.approx(bound, rel=1e-12)
    assert doc["algbw_GBps"] == pytest.approx(bound, rel=1e-12)


def test_synth_alltoall_reports_lp_and_gap(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _json(capsys, ["synth", "alltoall", "hpn:1x2x8", "--fail", "fail2", "--chunks", "10", "--json"])
    assert TREE_KEYS | {"lp_algbw_GBps", "gap"} <= set(doc)
    assert doc["nchunks"] == 10
    assert doc["lp_algbw_GBps"] == pytest.approx(89.0625, rel=1e-6)
    assert 0 <= doc["gap"] <= 0.01
    assert doc["algbw_GBps"] == pytest.approx(doc["lp_algbw_GBps"] * (1 - doc["gap"]), rel=1e-9)


@pytest.mark.parametrize("collective", ["allgather", "alltoall"])
def test_warm_from_a_schedule_file_matches_cold(tmp_path: Path, capsys: pytest.CaptureFixture[str], collective: str) -> None:
    healthy = tmp_path / "healthy.json"
    _json(capsys, ["synth", collective, "hpn:1x2x8", "--schedule-out", str(healthy), "--json"])
    assert read_schedule(str(healthy)).collective == collective
    warm = _json(capsys, ["synth", collective, "hpn:1x2x8", "--fail", "fail2", "--warm-from", str(healthy), "--json"])
    cold = _json(capsys, ["synth", collective, "hpn:1x2x8", "--fail", "fail2", "--json"])
    assert warm["warm"] is True and cold["warm"] is False
    assert warm["optimal_algbw_GBps"] == pytest.approx(cold["optimal_algbw_GBps"], rel=1e-9)


def test_xml_output_checks_valid_with_the_same_algbw(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    xml = tmp_path / "ag.xml"
    doc = _json(capsys, ["synth", "allgather", "hpn:1x2x8", "--fail", "fail2", "--chunks", "4", "-o", str(xml), "--json"])
    assert doc["nchunks"] <= 4
    verdict = _json(capsys, ["check", str(xml), "--topology", "hpn:1x2x8", "--fail", "fail2", "--json"])
    assert verdict["valid"] is True
    assert verdict["algbw_GBps"] == pytest.approx(doc["algbw_GBps"], rel=1e-12)
    assert check(read(str(xml))).valid


def test_text_output_names_topology_and_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.json"
    assert main(["synth", "allgather", "ring:4", "--schedule-out", str(out), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "allgather on ring-4" in text and "(100.00%)" in text and str(out) in text


@pytest.mark.parametrize(
    "argv, culprit",
    [
        (["synth", "allgather", "ring:4", "--chunks", "0"], "--chunks must be >= 1, got 0"),
        (["synth", "allgather", "nope:4"], "unknown topology spec 'nope:4'"),
        (["synth", "alltoall", "hpn:1x2x8", "--max-steps", "1"], "max_steps"),
        (["synth", "allgather", "ring:4", "--warm-from", "/nonexistent/s.json"], "/nonexistent/s.json"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], culprit: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("loopcoll: error:") and culprit in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_warm_from_another_collective_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sched = tmp_path / "a2a.json"
    _json(capsys, ["synth", "alltoall", "hpn:1x2x8", "--chunks", "1", "--schedule-out", str(sched), "--json"])
    assert main(["synth", "allgather", "hpn:1x2x8", "--warm-from", str(sched)]) == 2
    assert "cannot warm-start 'allgather'" in capsys.readouterr().err


def test_progress_filter_drops_early_records_only() -> None:
    early = _AfterDelay(3600.0)
    now = _AfterDelay(0.0)
    info = logging.LogRecord("synth", logging.INFO, __file__, 1, "progress", None, None)
    warning = logging.LogRecord("synth", logging.WARNING, __file__, 1, "careful", None, None)
    assert not early.filter(info) and early.filter(warning) and now.filter(info)


def test_progress_goes_to_stderr_unless_quiet(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import loopcoll._log as cmd

    monkeypatch.setattr(cmd, "PROGRESS_AFTER_S", 0.0)  # report from the start, as a long run would
    assert main(["synth", "alltoall", "hpn:1x2x8"]) == 0
    err = capsys.readouterr().err
    assert "loopcoll: alltoall_cg: iteration" in err
    assert main(["synth", "alltoall", "hpn:1x2x8", "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_depth_bounded_synthesis_reports_progress(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    import loopcoll._log as cmd
    from synth import _deadline

    monkeypatch.setattr(cmd, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(_deadline, "PROGRESS_EVERY_S", 0.0)
    assert main(["synth", "allgather", "hpn:1x2x8", "--fail", "fail2", "--max-depth", "2"]) == 0
    assert "loopcoll: depth-2 tree LP: iteration 1, " in capsys.readouterr().err


def test_xml_output_caps_chunks_to_the_runtime_limits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The uncapped optimum on 128 GPUs + fail2 uses k = 293 chunks per source: 128 x 293 offsets
    # overflow the executor's int16; without --chunks the CLI re-synthesizes under the cap.
    xml = tmp_path / "ag.xml"
    doc = _json(capsys, ["synth", "allgather", "hpn:1x16x8", "--fail", "fail2", "-o", str(xml), "--json"])
    assert doc["xml_chunk_cap"] == 32768 // 128
    assert 1 <= doc["nchunks"] <= doc["xml_chunk_cap"]
    assert doc["algbw_GBps"] >= 0.999 * doc["optimal_algbw_GBps"]
    program = read(str(xml))
    assert check(program).valid and program.ngpus == 128


def test_explicit_chunks_beyond_the_runtime_limits_fail_cleanly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    xml = tmp_path / "ag.xml"
    argv = ["synth", "allgather", "hpn:1x16x8", "--fail", "fail2", "--chunks", "300", "-o", str(xml), "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("loopcoll: error:") and "int16" in err and "at most 256 chunks per source" in err
    assert err.count("\n") == 1 and not xml.exists()


def test_solver_and_max_steps_reach_alltoall_only(capsys: pytest.CaptureFixture[str]) -> None:
    # --solver and --max-steps are alltoall flags; the CLI passes them to alltoall only, so a tree
    # collective never meets synthesize()'s refusal of options that do not apply to it.
    highs = _json(capsys, ["synth", "alltoall", "nvswitch:4", "--json"])
    glop = _json(capsys, ["synth", "alltoall", "nvswitch:4", "--solver", "ortools", "--max-steps", "1", "--json"])
    assert glop["status"] == "optimal" and glop["lp_algbw_GBps"] == pytest.approx(highs["lp_algbw_GBps"], rel=1e-9)
    assert _json(capsys, ["synth", "allreduce", "nvswitch:4", "--json"])["status"] == "optimal"
