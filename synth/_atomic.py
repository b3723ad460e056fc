"""Atomic file writes: nothing is ever left half-written."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from synth.errors import LoopcollError

__all__ = ["write_bytes_atomic", "write_text_atomic"]


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it into place.

    >>> import tempfile, pathlib
    >>> d = tempfile.mkdtemp()
    >>> write_text_atomic(pathlib.Path(d) / "x.txt", "hi")
    >>> (pathlib.Path(d) / "x.txt").read_text()
    'hi'
    """
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Binary variant of :func:`write_text_atomic`."""
    p = Path(path)
    directory = p.parent if str(p.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise LoopcollError(f"{p}: cannot write: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, p)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise LoopcollError(f"{p}: cannot write: {exc.strerror or exc}") from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
