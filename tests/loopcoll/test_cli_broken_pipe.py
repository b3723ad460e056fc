"""A reader that closes stdout early (``loopcoll ... | head``) ends the command quietly (issue 28)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from loopcoll.cli import EXIT_BROKEN_PIPE
from runtime.observe import SyntheticSpec, write_logs

ROOT = Path(__file__).resolve().parents[2]


def _run_with_closed_stdout(argv: list[str]) -> tuple[int, str]:
    """Run ``python -m loopcoll argv`` with its stdout's read end closed before it writes a byte."""
    proc = subprocess.Popen([sys.executable, "-m", "loopcoll", *argv], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone: every write the command makes hits EPIPE
    try:
        err = proc.stderr.read()
        return proc.wait(timeout=60), err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("argv", [["bound", "allgather", "ring:4"], ["topo", "show", "ring:4", "--json"]])
def test_closed_pipe_ends_quietly(argv: list[str]) -> None:
    code, err = _run_with_closed_stdout(argv)
    assert err == "" and code == EXIT_BROKEN_PIPE, err


def test_inspect_json_into_a_closed_pipe(tmp_path: Path) -> None:
    write_logs(tmp_path, SyntheticSpec(nranks=2, ncolls=20))
    code, err = _run_with_closed_stdout(["inspect", str(tmp_path), "--json"])
    assert err == "" and code == EXIT_BROKEN_PIPE, err
