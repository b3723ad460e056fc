"""CLI (issue 23): ``loopcoll synth ... --format mscclpp -o plan.json``; ``loopcoll check`` takes plans."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from loopcoll.cli import main
from mscclpp_plan import check, read

from ._plan_helpers import VECTORS


def test_synth_writes_a_checked_plan_and_check_reports_its_algbw(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ar.json"
    args = ["synth", "allreduce", "hpn:1x2x4", "--fail", "fail2", "--chunks", "2", "--format", "mscclpp",
            "-o", str(out), "--json"]  # fmt: skip
    assert main(args) == 0
    synth = json.loads(capsys.readouterr().out)
    plan = read(out)
    assert plan.collective == "allreduce" and plan.nranks == 8 and not plan.inplace and check(plan).valid
    assert main(["check", str(out), "--topology", "hpn:1x2x4", "--fail", "fail2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is True and report["format"] == "mscclpp"
    assert report["algbw_GBps"] == pytest.approx(synth["algbw_GBps"], rel=1e-12)
    # deterministic: the same command writes the same bytes
    again = tmp_path / "again.json"
    assert main([*args[:-3], "-o", str(again), "--inplace"]) == 0
    assert read(again).inplace is True
    assert main([*args[:-3], "-o", str(tmp_path / "third.json")]) == 0
    assert (tmp_path / "third.json").read_bytes() == out.read_bytes()


def test_synth_text_output_names_the_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ag.json"
    assert main(["synth", "allgather", "ring:4", "--chunks", "1", "--format", "mscclpp", "-o", str(out)]) == 0
    assert f"wrote MSCCL++ plan to {out}" in capsys.readouterr().out


def test_check_a_directory_of_plans_and_xml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("allreduce.json", "reduce_tbg.json"):
        shutil.copy(VECTORS / name, tmp_path / name)
    assert main(["check", str(tmp_path), "--json"]) == 1  # reduce_tbg.json races
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(Path(d["file"]).name, d["valid"]) for d in lines] == [("allreduce.json", True), ("reduce_tbg.json", False)]
    assert "race" in lines[1]["errors"][0]


def test_check_malformed_plan_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x", "collective": "allreduce", "protocol": "Simple"}')
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err == f"loopcoll: error: {bad}: inplace: missing\n"


def test_synth_refuses_a_protocol_the_plan_lowering_lacks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "x.json"
    assert main(["synth", "allgather", "ring:4", "--chunks", "1", "--format", "mscclpp", "--protocol", "LL",
                 "-o", str(out)]) == 2  # fmt: skip
    assert "protocol Simple only" in capsys.readouterr().err and not out.exists()
