"""``--quiet`` keeps stderr empty but for errors, wherever it exists (issue 28)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loopcoll._log import QUIET_LOGGERS
from tests.loopcoll._run import run

ROOT = Path(__file__).resolve().parents[2]

# In a process of its own: pytest's log capture would otherwise take the records that, in a real
# ``loopcoll`` process, reach Python's last-resort handler (which prints warnings to stderr).
_EMIT = """
import logging, sys
from loopcoll._log import configure_progress, reset_progress
configure_progress(sys.argv[1] == "quiet")
for name in sys.argv[2:]:
    logging.getLogger(name + ".some_module").warning("lowering: too many chunks")
reset_progress()
logging.getLogger("synth.after").warning("after reset")
"""


def _emit(mode: str) -> str:
    out = subprocess.run([sys.executable, "-c", _EMIT, mode, *QUIET_LOGGERS], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stderr


def test_quiet_keeps_library_warnings_off_stderr() -> None:
    assert _emit("quiet") == "after reset\n"  # reset_progress gives the loggers back as they were


def test_without_quiet_warnings_still_show() -> None:
    assert _emit("loud").splitlines() == ["loopcoll: warning: lowering: too many chunks"] * len(QUIET_LOGGERS) + [
        "after reset"]


@pytest.mark.parametrize("argv", [
    ["synth", "allgather", "ring:4", "-o", "{d}/x.xml", "--schedule-out", "{d}/s.json", "--quiet"],
    ["synth", "alltoall", "ring:4", "--quiet"],
    ["simulate", "allgather", "ring:4", "--quiet"],
])
def test_quiet_commands_write_nothing_to_stderr(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                argv: list[str]) -> None:
    code, out, err = run(capsys, *(a.format(d=tmp_path) for a in argv))
    assert code == 0 and out and err == ""


def test_alltoallv_quiet_and_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    demand = tmp_path / "d.json"
    demand.write_text(json.dumps([[0, 9, 1, 0], [2, 0, 0, 4], [0, 3, 0, 8], [5, 0, 6, 0]]))
    for flag in ("--quiet", "--json"):
        code, out, err = run(capsys, "synth", "alltoallv", "ring:4", "--demand", str(demand), flag)
        assert code == 0 and out and err == ""
