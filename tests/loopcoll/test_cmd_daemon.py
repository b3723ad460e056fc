"""``loopcoll daemon``: bad input is one ``loopcoll: error:`` line and exit 2 (the live daemon is tested as a real
process in ``tests/runtime/test_daemon_process.py``)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from loopcoll._cmd_daemon import render_status
from loopcoll.cli import main


def _profile(tmp_path: Path, ranks: list[int]) -> Path:
    p = tmp_path / "profile.json"
    p.write_text(json.dumps({"format": "loopcoll.profile/1", "topology": "hpn:1x2x4", "communicators": [
        {"name": "world", "ranks": ranks, "collectives": [{"collective": "allgather", "sizes": [1 << 20]}]}]}))
    return p


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("loopcoll: error:") and err.count("\n") == 1, err
    return err


def test_run_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPCOLL_TOKEN", "t")
    good = _profile(tmp_path, list(range(8)))
    store = str(tmp_path / "store")
    assert "missing.json" in _error(capsys, ["daemon", "run", "--profile", str(tmp_path / "missing.json"),
                                             "--store", store])
    (tmp_path / "bad").mkdir()
    assert "rank 8" in _error(capsys, ["daemon", "run", "--profile", str(_profile(tmp_path / "bad", [0, 8])),
                                       "--store", store])
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert "not writable" in _error(capsys, ["daemon", "run", "--profile", str(good), "--store", str(blocker / "s")])
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert "cannot listen" in _error(capsys, ["daemon", "run", "--profile", str(good), "--store", store,
                                                  "--port", str(port)])
    config = tmp_path / "config.json"
    config.write_text('{"gamma": 0.2, "gamma_typo": 1}')
    assert "gamma_typo" in _error(capsys, ["daemon", "run", "--profile", str(good), "--store", store,
                                           "--config", str(config)])
    config.write_text('{"alpha": 2.0}')
    assert "alpha" in _error(capsys, ["daemon", "run", "--profile", str(good), "--store", store,
                                      "--config", str(config)])
    monkeypatch.delenv("LOOPCOLL_TOKEN")
    assert "no token" in _error(capsys, ["daemon", "run", "--profile", str(good), "--store", store])


def test_tools_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPCOLL_TOKEN", "t")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        assert "cannot connect" in _error(capsys, ["daemon", "status", "--address", f"127.0.0.1:{port}"])
    assert "HOST:PORT" in _error(capsys, ["daemon", "status", "--address", "localhost"])
    assert "cannot read" in _error(capsys, ["daemon", "push", "--address", "127.0.0.1:1", "--token-file",
                                            str(tmp_path / "none"), str(tmp_path / "x.jsonl")])


def test_render_status_lists_versions_and_counters() -> None:
    text = render_status({"daemon": {"clients": 2, "uptime_s": 3.5, "counters": {"connections": 4}, "latest": []},
                          "controller": {"versions": [{"comm": "world", "collective": "allgather", "version": 2,
                                                       "reason": "drift"}]}})
    assert "world/allgather v2" in text and "reason drift" in text and "connections 4" in text
    verdict = {"comm": "world", "collective": "allgather", "version": 2, "flagged": True, "message": "max delta"}
    text = render_status({"controller": {"verdicts": [verdict] * 3 + [{**verdict, "flagged": False}]}})
    assert text.splitlines()[-2:] == ["  world/allgather v2 FLAGGED: max delta (x3)", "  world/allgather v2 ok: max delta"]
