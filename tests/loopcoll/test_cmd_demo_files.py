"""``loopcoll demo`` writes files only where ``--out-dir`` says (issue 28)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msccl_xml import check_file
from tests.loopcoll._run import run

FAST = ("--topology", "hpn:1x2x2", "--quiet")


def test_plain_demo_leaves_the_current_directory_untouched(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "demo", *FAST)
    assert code == 0, err
    assert list(tmp_path.iterdir()) == []
    assert "nothing written" in out and "--out-dir" in out
    code, out, _ = run(capsys, "demo", *FAST, "--json")
    assert code == 0 and list(tmp_path.iterdir()) == []
    assert [r["xml"] for r in json.loads(out)["rows"]] == [None, None]


def test_out_dir_keeps_the_checked_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "d"
    code, out, _ = run(capsys, "demo", *FAST, "--out-dir", str(out_dir), "--json")
    assert code == 0
    xmls = [Path(r["xml"]) for r in json.loads(out)["rows"]]
    assert sorted(p.name for p in out_dir.iterdir()) == sorted([*(p.name for p in xmls),
                                                                *(p.with_suffix(".json").name for p in xmls)])
    assert all(check_file(p).valid for p in xmls)
