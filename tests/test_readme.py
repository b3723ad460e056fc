"""README.md stays a landing page that tells the truth: at most 200 lines, and every command it shows
runs as shown.

Each ```sh block runs as one bash script in a fresh temporary directory (with ``examples/`` linked in),
``loopcoll`` meaning ``python -m loopcoll`` of this checkout (``PYTHONPATH`` = the repository) and
``python`` this interpreter (small wrapper scripts first on ``PATH``); ``pip install … &&`` prefixes are dropped (the package is installed) and
the test command itself is skipped (it would recurse). Each ```python block runs as a script the same
way. Where a ```text block directly follows, every line of it must appear in a line of the output, with
figures of 3 or more decimals (timings) compared as "a number". ```text blocks that follow no
runnable block are not run: that is how README shows long-running commands.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
TEST_COMMAND = "pip install torch==2.13.0 && pip install -e '.[test]' && python -m pytest -q -n auto"
TIMEOUT_S = 120


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    line: int  # 1-based line of the opening fence
    expected: str | None  # the ```text block right after it, if any


def fenced_blocks(markdown: str) -> list[tuple[str, str, int]]:
    """``(lang, text, line)`` of every fenced block.

    >>> fenced_blocks("a\\n```sh\\nls\\n```\\n")
    [('sh', 'ls\\n', 2)]
    """
    out, lines, i = [], markdown.splitlines(keepends=True), 0
    while i < len(lines):
        m = re.match(r"```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, i = i, i + 1
        while i < len(lines) and not lines[i].startswith("```"):
            i += 1
        out.append((m.group(1), "".join(lines[start + 1 : i]), start + 1))
        i += 1
    return out


def runnable_blocks(markdown: str) -> list[Block]:
    """The sh and python blocks, each with the text block that follows it (nothing but blank lines between)."""
    blocks = fenced_blocks(markdown)
    lines = markdown.splitlines()
    out = []
    for k, (lang, text, line) in enumerate(blocks):
        if lang not in ("sh", "python"):
            continue
        expected = None
        if k + 1 < len(blocks) and blocks[k + 1][0] == "text":
            end = line + text.count("\n") + 1  # the closing fence's line
            if all(not s.strip() for s in lines[end : blocks[k + 1][2] - 1]):
                expected = blocks[k + 1][1]
        out.append(Block(lang, text, line, expected))
    return out


def script_of(block: Block) -> str | None:
    """The bash script for an sh block (None when nothing is left to run), else the Python source.

    >>> script_of(Block("sh", "pip install -e . && loopcoll demo\\n", 1, None)).splitlines()[-1]
    'loopcoll demo'
    >>> script_of(Block("sh", TEST_COMMAND + "\\n", 1, None)) is None
    True
    """
    if block.lang == "python":
        return block.text
    kept = []
    for raw in block.text.splitlines():
        if raw.strip() == TEST_COMMAND:
            continue
        parts = raw.split(" && ")
        while parts and parts[0].lstrip().startswith("pip install"):
            parts.pop(0)
        if parts:
            kept.append(" && ".join(parts))
    if not any(s.strip() for s in kept):
        return None
    prelude = [
        "set -euo pipefail",
        "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT",  # a failed line must not leave the daemon running
    ]
    return "\n".join(prelude + kept) + "\n"


_TIMING = re.compile(r"\d+\.\d{3,}")


def _normal(line: str) -> str:
    return _TIMING.sub("<n>", " ".join(line.split()))


def missing_lines(expected: str, output: str) -> list[str]:
    """Lines of ``expected`` found in no line of ``output`` (whitespace runs and 3+-decimal figures normalised;
    an output line may carry more after or before the shown text).

    >>> missing_lines("a  1.000 b\\nc\\nd 7", "x\\nwhere a 2.125 b\\nd 8\\n")
    ['c', 'd 7']
    """
    have = [_normal(s) for s in output.splitlines()]
    return [s for s in expected.splitlines() if s.strip() and not any(_normal(s) in h for h in have)]


def _run(block: Block, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    script = script_of(block)
    assert script is not None
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    # Executables, not shell functions: `loopcoll … &` then `kill %1` must reach the process itself.
    bin_dir = tmp_path / ".bin"
    bin_dir.mkdir()
    for name, args in (("loopcoll", '-m loopcoll "$@"'), ("python", '"$@"')):
        (bin_dir / name).write_text(f'#!/bin/sh\nexec "$LOOPCOLL_PY" {args}\n', encoding="utf-8")
        (bin_dir / name).chmod(0o755)
    pythonpath = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env = dict(os.environ, PYTHONPATH=pythonpath, LOOPCOLL_PY=sys.executable,
               PATH=os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]))
    if block.lang == "python":
        (tmp_path / "example.py").write_text(script, encoding="utf-8")
        cmd = [sys.executable, "example.py"]
    else:
        cmd = ["bash", "-c", script]
    # Its own session, so that whatever it starts (the daemon in the background) ends with it.
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"README.md:{block.line}: still running after {TIMEOUT_S} s\n{out}\n{err}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


BLOCKS = [b for b in runnable_blocks(README.read_text(encoding="utf-8")) if script_of(b) is not None]


def test_readme_is_a_landing_page() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200, "README.md is over 200 lines: move details to docs/ or benchmarks/README.md"
    assert TEST_COMMAND in [b[1].strip() for b in fenced_blocks(text) if b[0] == "sh"], "README must show CI's test command"
    first_screen = "\n".join(text.splitlines()[:40])
    assert "validated on GPUs" in first_screen, "the GPU validation status belongs in README's first screen"


def test_readme_has_runnable_examples() -> None:
    assert {b.lang for b in BLOCKS} == {"sh", "python"}
    assert len(BLOCKS) >= 4 and all(b.expected for b in BLOCKS)


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"line{b.line}")
def test_readme_block_runs_as_shown(block: Block, tmp_path: Path) -> None:
    res = _run(block, tmp_path)
    assert res.returncode == 0, f"README.md:{block.line}: exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    if block.expected:
        missing = missing_lines(block.expected, res.stdout)
        assert missing == [], f"README.md:{block.line}: output lacks {missing}\n{res.stdout}"
