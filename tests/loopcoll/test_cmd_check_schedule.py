"""``check`` on a loopcoll schedule JSON and ``synth --warm-from`` on a file that is none (issue 28)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopcoll.cli import main
from synth import load_topology, read_schedule
from tests.loopcoll._run import run


@pytest.fixture()
def files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path]:
    sched, xml = tmp_path / "S.json", tmp_path / "ag.xml"
    assert main(["synth", "allgather", "ring:4", "--schedule-out", str(sched), "-o", str(xml), "--quiet"]) == 0
    capsys.readouterr()
    return sched, xml


def _one_error(code: int, err: str) -> str:
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("loopcoll: error: "), err
    return err


def test_schedule_without_topology_says_what_it_is(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    sched, _ = files
    err = _one_error(*run(capsys, "check", str(sched))[::2])
    assert "loopcoll schedule JSON" in err and "allgather, 4 ranks" in err and "--topology" in err
    assert "name: missing" not in err


def test_schedule_checked_on_its_topology(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    sched, _ = files
    code, out, _ = run(capsys, "check", str(sched), "--topology", "ring:4", "--json")
    doc = json.loads(out)
    want = read_schedule(str(sched)).algbw_GBps(load_topology("ring:4"))
    assert code == 0 and doc["valid"] and doc["collective"] == "allgather" and doc["algbw_GBps"] == want
    code, out, _ = run(capsys, "check", str(sched), "--topology", "ring:4")
    assert code == 0 and out == f"{sched}: valid (allgather, 4 ranks, algbw {want:.2f} GB/s)\n"


def test_schedule_on_a_fabric_where_it_breaks_is_invalid(files: tuple[Path, Path],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    sched, _ = files
    code, out, _ = run(capsys, "check", str(sched), "--topology", "ring:4", "--fail", "scale:gpu0:gpu1:0")
    assert code == 1 and "INVALID" in out and "gpu0->gpu1" in out and "down" in out


def test_alltoallv_schedule_reports_its_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    demand, sched = tmp_path / "d.json", tmp_path / "v.json"
    demand.write_text(json.dumps([[0, 10**6, 0, 5], [1, 0, 2, 0], [0, 0, 0, 7], [3, 0, 0, 0]]))
    assert main(["synth", "alltoallv", "ring:4", "--demand", str(demand), "--chunks", "1",
                 "--schedule-out", str(sched), "--quiet", "--json"]) == 0
    capsys.readouterr()
    code, out, _ = run(capsys, "check", str(sched), "--topology", "ring:4", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["valid"] and doc["collective"] == "alltoallv" and doc["completion_time_us"] > 0


def test_warm_from_an_xml_file_asks_for_a_schedule_json(files: tuple[Path, Path],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    _, xml = files
    err = _one_error(*run(capsys, "synth", "allgather", "ring:4", "--warm-from", str(xml))[::2])
    assert "--warm-from takes a schedule JSON written by" in err and "--schedule-out" in err and str(xml) in err
    assert "malformed JSON" not in err


def test_warm_from_a_schedule_still_works(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    sched, _ = files
    code, out, _ = run(capsys, "synth", "allgather", "ring:4", "--warm-from", str(sched), "--json")
    assert code == 0 and json.loads(out)["warm"] is True


def test_old_format_schedule_is_checked_and_warm_starts(files: tuple[Path, Path], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A ``loopcoll-schedule/1`` file (written before the compact form) is still a schedule to the CLI."""
    sched, _ = files
    old = tmp_path / "old.json"
    old.write_text(json.dumps(read_schedule(str(sched)).to_dict(legacy=True)), encoding="utf-8")
    code, out, _ = run(capsys, "check", str(old), "--topology", "ring:4", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["valid"] and doc["format"] == "loopcoll-schedule/1"
    assert doc["algbw_GBps"] == read_schedule(str(sched)).algbw_GBps(load_topology("ring:4"))
    damaged = json.loads(old.read_text(encoding="utf-8"))
    damaged["routes"][0]["hops"][0]["src"] = "x"
    old.write_text(json.dumps(damaged), encoding="utf-8")
    code, _, err = run(capsys, "synth", "allgather", "ring:4", "--warm-from", str(old), "--quiet")
    assert code == 2 and "routes[0].hops[0].src must be an integer" in err, err
