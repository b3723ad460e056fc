"""loopcoll whatif: table, JSON, workload files, errors as one line (real subprocesses)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loopcoll", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def test_whatif_table_json_and_exported_workload(tmp_path: Path) -> None:
    wf = tmp_path / "w.json"
    out = _cli("whatif", "llama405b", "hpn:1x2x8", "--fail", "fail2", "--json", "--export-workload", str(wf))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["scenario"] == "fail2" and doc["speedup_vs_nccl"] > 1.5
    again = _cli("whatif", str(wf), "hpn:1x2x8", "--fail", "fail2", "--json")
    assert json.loads(again.stdout)["iteration"] == doc["iteration"]
    table = _cli("whatif", "deepseek671b", "hpn:1x2x8")
    assert table.returncode == 0 and "re-synthesized" in table.stdout and "1.00x" in table.stdout


def test_whatif_errors_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "loopcoll.workload/1"}')
    for args in (("nope.json", "hpn:1x2x8"), (str(bad), "hpn:1x2x8"), ("llama405b", "hpn:1x2x8", "--fail", "x"),
                 ("llama405b", "hpn:1x2x8", "--mfu", "2")):
        out = _cli("whatif", *args)
        assert out.returncode == 2 and out.stderr.startswith("loopcoll: error:") and "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
