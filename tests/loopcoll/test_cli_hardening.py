"""CLI hardening (issue 12): one clear line at limits, outputs never lost, SIGTERM cleans up,
``check DIR`` reports every file. Runtime in CI: about 10 s.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loopcoll.cli import MAX_ERROR_CHARS
from tests.loopcoll._run import run

ROOT = Path(__file__).resolve().parents[2]


def one_error(code: int, err: str, match: str) -> None:
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("loopcoll: error: "), err
    assert match in lines[0], lines[0]


def test_one_file_named_twice_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = str(tmp_path / "x")
    code, _, err = run(capsys, "synth", "allgather", "ring:4", "-o", out, "--schedule-out", out)
    one_error(code, err, "both name")
    assert not Path(out).exists()


@pytest.mark.parametrize("flag", ["-o", "--schedule-out"])
def test_an_empty_output_path_is_refused(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    code, _, err = run(capsys, "synth", "allgather", "ring:4", flag, "")
    one_error(code, err, "empty path")


def test_tree_collective_time_limit_falls_back_to_the_ring(capsys: pytest.CaptureFixture[str]) -> None:
    """Cold and stopped by its limit: the NCCL-like ring with its certified gap, not an error (issue 31)."""
    code, out, err = run(capsys, "synth", "allgather", "ring:300", "--time-limit", "0.2", "--quiet")
    assert code == 0 and err == ""
    assert "status: time_limit" in out and "NCCL-like ring" in out and "vs proven bound" in out


def test_bound_time_limit_prints_the_proven_upper_bound(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "bound", "allgather", "ring:200", "--time-limit", "0.000001", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["status"] == "time_limit" and doc["algbw_GBps"] > 0


def test_error_messages_are_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "bound", "allgather", "ring:" + "9" * 20000)
    one_error(code, err, "named spec")
    assert len(err) <= MAX_ERROR_CHARS + 60


def test_check_dir_reports_every_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, _ = run(capsys, "synth", "allgather", "ring:3", "-o", str(tmp_path / "b.xml"), "--quiet")
    assert code == 0
    (tmp_path / "a.xml").write_text("<algo")
    (tmp_path / "c.xml").write_bytes(b"\xff\xfe")
    code, out, err = run(capsys, "check", str(tmp_path), "--json")
    assert code == 1 and err == ""
    reports = [json.loads(line) for line in out.splitlines()]
    assert [Path(r["file"]).name for r in reports] == ["a.xml", "b.xml", "c.xml"]
    assert [r["valid"] for r in reports] == [False, True, False]
    assert reports[0]["errors"][0].startswith("unreadable: ") and "not UTF-8" in reports[2]["errors"][0]


def test_sigterm_is_handled_like_sigint(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopcoll", "synth", "allgather", "ring:400", "-o", str(tmp_path / "o.xml"), "--quiet"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    time.sleep(3.0)  # past imports, inside the solve
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert err.strip().splitlines() == ["loopcoll: terminated"]
    assert list(tmp_path.iterdir()) == []


def test_measured_capacity_exports_checked_xml(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The runtime's case: a measured degradation, exported with the chunks the runtime can hold."""
    out = tmp_path / "m.xml"
    code, _, err = run(capsys, "synth", "allgather", "hpn:1x2x8", "--fail", "scale:gpu0:tor0.0:0.3333333333333333",
                       "-o", str(out), "--json")
    assert code == 0, err
    code, text, _ = run(capsys, "check", str(out), "--topology", "hpn:1x2x8", "--fail",
                        "scale:gpu0:tor0.0:0.3333333333333333", "--json")
    assert code == 0 and json.loads(text)["valid"]
