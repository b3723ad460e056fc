"""Every subcommand module of the CLI is imported, loudly, and none needs torch to register."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from loopcoll import cli

ROOT = Path(__file__).resolve().parents[2]


def test_every_listed_subcommand_is_registered() -> None:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")  # noqa: SLF001
    assert len(sub.choices) == len(cli._COMMANDS)  # noqa: SLF001 - white-box: the module list


def test_a_missing_subcommand_module_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "_COMMANDS", (*cli._COMMANDS, "_cmd_does_not_exist"))  # noqa: SLF001
    with pytest.raises(ImportError, match=r"loopcoll\._cmd_does_not_exist cannot be imported"):
        cli.build_parser()


def test_cli_builds_and_runs_without_torch() -> None:
    # torch is optional: block it and build the full parser, then run a subcommand.
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from loopcoll.cli import build_parser, main\n"
        "build_parser()\n"
        "sys.exit(main(['bound', 'allgather', 'ring:4', '--json']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
