"""Atomic file writes: nothing is ever left half-written."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from synth.errors import LoopcollError

__all__ = ["write_text_atomic"]


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it into place.

    >>> import tempfile, pathlib
    >>> d = tempfile.mkdtemp()
    >>> write_text_atomic(pathlib.Path(d) / "x.txt", "hi")
    >>> (pathlib.Path(d) / "x.txt").read_text()
    'hi'
    """
    p = Path(path)
    directory = p.parent if str(p.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise LoopcollError(f"{p}: cannot write: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
