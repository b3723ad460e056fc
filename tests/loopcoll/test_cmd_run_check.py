"""``loopcoll run-check``: a schedule JSON on 2 real gloo processes; clean errors without torch or a file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loopcoll.cli import main
from synth import named_topology, synthesize, write_schedule

ROOT = Path(__file__).resolve().parents[2]


def test_run_check_schedule_json(tmp_path, capsys) -> None:
    pytest.importorskip("torch")
    path = tmp_path / "rs.json"
    write_schedule(synthesize("reducescatter", named_topology("ring:2")).schedule, str(path))
    assert main(["run-check", str(path), "--size", "4K", "--size", "1000", "--dtype", "int32",
                 "--iters", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["nprocs"] == 2 and [r["correct"] for r in doc["rows"]] == [True, True]
    assert all(r["algbw_GBps"] > 0 and r["native_algbw_GBps"] > 0 for r in doc["rows"])


def test_run_check_errors_are_one_line(tmp_path, capsys) -> None:
    code = ("import sys; sys.modules['torch'] = None; from loopcoll.cli import main; "
            f"sys.exit(main(['run-check', {str(tmp_path / 'x.xml')!r}]))")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 2 and "run-check needs torch" in p.stderr and "Traceback" not in p.stderr
    assert main(["run-check", str(tmp_path / "missing.xml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("loopcoll: error:") and "missing.xml" in err
