"""``loopcoll inspect``: report, JSON, SQL, plots, windows and errors, through real processes and main()."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loopcoll.cli import main
from runtime.observe import SyntheticSpec, write_logs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    d = tmp_path_factory.mktemp("logs")
    truth = write_logs(d, SyntheticSpec(nranks=8, ncolls=200, stragglers=(5,), slow_periods=((30.0, 60.0, 0.5),),
                                        gzip_files=True, seed=9))
    return d, truth


def test_text_report_in_a_real_process(logs, tmp_path):
    d, truth = logs
    db = tmp_path / "o.duckdb"
    cmd = [sys.executable, "-m", "loopcoll", "inspect", str(d), "--db", str(db), "--plot", str(tmp_path / "png")]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "Slow periods" in text and "Suspected stragglers" in text and "Communication phases" in text
    assert "added 3200 collective" in text
    straggler_lines = text.split("Suspected stragglers")[1].split("Communication phases")[0]
    assert " 5 " in straggler_lines and "node000" in straggler_lines
    pngs = sorted(p.name for p in (tmp_path / "png").glob("*.png"))
    assert pngs == ["heatmap_0x5eed0c0ffee.png", "timeline_0x5eed0c0ffee.png"]
    assert all((tmp_path / "png" / p).read_bytes()[:4] == b"\x89PNG" for p in pngs)
    # Second run on the same database: nothing re-ingested, same findings.
    again = subprocess.run(cmd[:-2], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "0 file(s) read, 8 unchanged" in again.stdout


def test_json_report_and_window(logs, capsys):
    d, truth = logs
    assert main(["inspect", str(d), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == "loopcoll.inspect/1" and doc["window"]["records"] == 3200
    (p,) = doc["slow_periods"]
    assert abs(p["start_s"] - (truth.t0_s + 30.0)) < 2.0 and abs(p["end_s"] - (truth.t0_s + 60.0)) < 2.0
    assert [s["rank"] for s in doc["stragglers"] if s["flagged"]] == [5]
    assert main(["inspect", str(d), "--json", "--since", "+70", "--until", "+90"]) == 0
    doc2 = json.loads(capsys.readouterr().out)
    assert doc2["slow_periods"] == [] and 0 < doc2["window"]["records"] < 3200


def test_sql_queries(logs, capsys):
    d, _ = logs
    assert main(["inspect", str(d), "--sql", "SELECT rank, count(*) AS n FROM coll GROUP BY rank ORDER BY rank",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["columns"] == ["rank", "n"] and doc["rows"] == [[r, 400] for r in range(8)]
    assert main(["inspect", str(d), "--sql", "SELECT count(*) AS periods FROM slow_periods"]) == 0
    assert capsys.readouterr().out.split() == ["periods", "1"]


@pytest.mark.parametrize("argv,msg", [
    (["inspect"], "give input files"),
    (["inspect", "/nonexistent/x*.log"], "no such file"),
    (["inspect", "{d}", "--sql", "SELECT nope"], "query failed"),
    (["inspect", "{d}", "--since", "yesterday"], "bad time"),
])
def test_errors_are_one_line(logs, capsys, argv, msg):
    d, _ = logs
    assert main([a.format(d=d) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("loopcoll: error:") and msg in err and len(err.strip().splitlines()) == 1
