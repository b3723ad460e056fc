"""Tests of the ``loopcoll check`` subcommand (loopcoll/_cmd_check.py)."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import pytest

from loopcoll import _cmd_check
from msccl_xml import lower, write
from synth.errors import LoopcollError, XmlError
from synth.topologies import load_topology

from tests.msccl_xml._msccl_helpers import VECTORS, ring_allgather, ring_schedule, vector_files


def _main(argv: list[str]) -> int:
    """What loopcoll.cli does: dispatch to args.func, LoopcollError -> exit 2."""
    parser = argparse.ArgumentParser(prog="loopcoll")
    _cmd_check.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except LoopcollError as exc:
        print(f"loopcoll: error: {exc}")
        return 2


def test_valid_file_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "ring.xml"
    f.write_text(write(ring_allgather()))
    assert _main(["check", str(f), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == {"valid": True, "collective": "allgather", "nranks": 4, "errors": []}


def test_invalid_file_exits_1_and_lists_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "bad.xml"
    f.write_text(write(replace(ring_allgather(), coll="custom")))
    assert _main(["check", str(f)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{f}: INVALID (custom, 4 ranks): 1 error(s)\n  algo: coll 'custom'")


def test_topology_adds_algbw(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topo = load_topology("ring:4")
    f = tmp_path / "ag.xml"
    sched = ring_schedule(topo, "allgather")
    f.write_text(write(lower(sched)))
    assert _main(["check", str(f), "--topology", "ring:4", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["algbw_GBps"] == pytest.approx(sched.algbw_GBps(topo))
    assert _main(["check", str(f), "--topology", "ring:4"]) == 0
    assert "algbw 66.67 GB/s" in capsys.readouterr().out


def test_topology_with_other_rank_count_makes_the_file_invalid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "ag.xml"
    f.write_text(write(ring_allgather()))
    assert _main(["check", str(f), "--topology", "ring:3", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["algbw_GBps"] is None
    assert doc["errors"] == ["topology: topology 'ring-3' has 3 ranks but the program has ngpus=4"] or \
        doc["errors"][0].startswith("topology: topology ")


def test_directory_checks_every_xml_sorted(capsys: pytest.CaptureFixture[str]) -> None:
    vector_files()
    assert _main(["check", str(VECTORS / "negative"), "--json"]) == 1
    docs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [Path(d["file"]).name for d in docs] == [
        "cfg_alltonext_backward_8_2.xml", "cfg_alltonext_forward_8_2.xml",
        "cfg_hierarchical_allreduce_8_2_2.xml"]
    assert not any(d["valid"] for d in docs)
    assert _main(["check", str(VECTORS / "negative"), "--runtime", "rccl"]) == 1
    assert _main(["check", str(VECTORS / "mscclang")]) == 0


def test_unreadable_input_is_an_xml_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "broken.xml"
    f.write_text("<algo")
    assert _main(["check", str(f)]) == 2
    assert capsys.readouterr().out.startswith(f"loopcoll: error: {f}:1:0: not well-formed XML")
    with pytest.raises(XmlError, match="no such file or directory"):
        _cmd_check.run(argparse.Namespace(path=str(tmp_path / "nope.xml"), topology=None,
                                          runtime="msccl-executor-nccl", json=False))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _main(["check", str(empty)]) == 2


def test_lead_cli_dispatches_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from loopcoll import cli

    f = tmp_path / "ring.xml"
    f.write_text(write(ring_allgather()))
    code = cli.main(["check", str(f), "--json"])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["valid"] is True
