"""``examples/executor_training.py``: its option errors end at once, in one line (issue 28)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from runtime import Controller, ControllerConfig, profile_from_dict, serve
from runtime.executor.launch import free_port
from synth import load_topology

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "executor_training.py"


def _example(*argv: str, timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "LOOPCOLL_TOKEN"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, str(EXAMPLE), *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout_s)


def _one_error(out: subprocess.CompletedProcess[str], *words: str) -> None:
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    (line,) = [x for x in out.stderr.splitlines() if "error:" in x]
    assert line.startswith("executor_training.py: error: ") and all(w in line for w in words), line


@pytest.fixture(scope="module")
def daemon():
    profile = profile_from_dict({"format": "loopcoll.profile/1", "topology": "ring:2", "communicators": [
        {"name": "world", "ranks": [0, 1], "collectives": [{"collective": "allreduce", "sizes": [1 << 16]}]}]})
    ctl = Controller(load_topology("ring:2"), profile, tempfile.mkdtemp(), config=ControllerConfig(export_xml=False))
    with serve(ctl, token="right", log=lambda rec: None) as handle:
        yield handle


def test_daemon_without_a_token_says_how_to_give_one(tmp_path: Path) -> None:
    _one_error(_example("--daemon", "127.0.0.1:1", "--telemetry", str(tmp_path / "t")), "--token-file", "LOOPCOLL_TOKEN")
    assert not (tmp_path / "t").exists()  # nothing is created before the options are known good


def test_missing_token_file_is_named(tmp_path: Path) -> None:
    _one_error(_example("--daemon", "127.0.0.1:1", "--token-file", str(tmp_path / "nope")), "--token-file",
               str(tmp_path / "nope"), "cannot read")


def test_unreachable_daemon_fails_at_once(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("right\n")
    port = free_port()  # nothing listens there
    out = _example("--daemon", f"127.0.0.1:{port}", "--token-file", str(token), timeout_s=20)
    _one_error(out, f"127.0.0.1:{port}", "cannot connect")


def test_wrong_token_is_refused_by_the_daemon(tmp_path: Path, daemon) -> None:
    token = tmp_path / "token"
    token.write_text("wrong\n")
    _one_error(_example("--daemon", daemon.address, "--token-file", str(token)), daemon.address)


def test_token_file_is_read_and_checked_against_the_daemon(tmp_path: Path, daemon) -> None:
    import importlib.util

    token = tmp_path / "token"
    token.write_text("right\n")
    spec = importlib.util.spec_from_file_location("executor_training", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.check_daemon(daemon.address, str(token)) == "right"


def test_one_process_is_refused(tmp_path: Path) -> None:
    _one_error(_example("--nprocs", "1"), "--nprocs", "at least 2")


def test_telemetry_path_that_cannot_be_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    _one_error(_example("--telemetry", str(tmp_path / "file" / "t")), "--telemetry", "cannot create")

