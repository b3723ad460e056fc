"""Call the CLI in-process: ``run(capsys, *argv)`` -> (exit code, stdout, stderr)."""

from __future__ import annotations

import pytest

from loopcoll.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr); argparse's SystemExit is turned into its code."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err
