"""Atomic file writes: nothing is ever left half-written, lost or given the wrong mode.

* The data goes to a temporary file ``.NAME.PID.RANDOM.tmp`` beside the target, then is renamed
  over it: a reader sees the old file or the new one, never a mix.
* Mode: an existing target keeps its permission bits; a new file gets ``0o666 & ~umask`` (like
  ``open(..., "w")``), not the temporary file's private 0600.
* A symlink at the target is written *through*: the file it points to is replaced atomically
  and the link stays (replacing the link by a regular file would silently detach it).
* A temporary left by a killed writer of the same target (its PID no longer running) is removed
  on the next write. On an exception or Ctrl-C/SIGTERM the temporary is removed at once.

Examples
--------
>>> import os, pathlib, stat, tempfile
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> write_text_atomic(d / "x.txt", "hi"); (d / "x.txt").read_text()
'hi'
>>> os.chmod(d / "x.txt", 0o640); write_text_atomic(d / "x.txt", "again")
>>> oct(stat.S_IMODE(os.stat(d / "x.txt").st_mode))
'0o640'
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from synth.errors import LoopcollError

__all__ = ["write_bytes_atomic", "write_text_atomic"]


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see the module docstring)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def _remove_stale(directory: Path, name: str) -> None:
    """Remove ``.NAME.PID.*.tmp`` beside the target whose writer process is gone."""
    pattern = re.compile(re.escape(f".{name}.") + r"(\d+)\.[^.]+\.tmp\Z")
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        m = pattern.match(entry.name)
        if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
            try:
                os.unlink(entry.path)
            except OSError:
                pass


def _target(path: str | os.PathLike[str]) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise LoopcollError(f"output path must be a str or os.PathLike, got {type(path).__name__}")
    p = Path(path)
    if not str(path) or p.name in ("", ".", ".."):
        raise LoopcollError(f"output path {str(path)!r} does not name a file")
    # Write through a symlink (even a chain of them) to the file it names.
    return Path(os.path.realpath(p)) if p.is_symlink() else p


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Binary variant of :func:`write_text_atomic`."""
    p = _target(path)
    directory = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise LoopcollError(f"{p}: cannot write: is a directory")
    _remove_stale(directory, p.name)
    try:
        mode = os.stat(p).st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    except OSError as exc:
        raise LoopcollError(f"{p}: cannot write: {exc.strerror or exc}") from exc
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.{os.getpid()}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise LoopcollError(f"{p}: cannot write: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            os.fchmod(fh.fileno(), mode)
        os.replace(tmp, p)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise LoopcollError(f"{p}: cannot write: {exc.strerror or exc}") from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
