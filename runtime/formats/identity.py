"""What identifies a stored version: the store's epoch, sha256 digests of its files, and the store lock.

* A store *epoch* is a random id drawn when a store (its manifest) is created; every entry carries it, so
  ``(epoch, version)`` names one publication even when a store loses its manifest and counts from 1 again.
* A band's digests are the sha256 hex of the bytes of its schedule JSON and its XML, as written; a
  version's digest is the sha256 over its bands' bounds and digests, the definition
  ``msccl_xml.deploy.DeployableVersion.digest`` uses (band digest: the XML's, else the schedule's).
* :class:`StoreLock` is an exclusive ``flock`` on ``.lock`` in the store directory: one daemon per store.

>>> import tempfile
>>> sha256_hex(b"abc")[:16]
'ba7816bf8f01cfea'
>>> version_digest([(0, None, sha256_hex(b"abc"))]) == version_digest([(0, None, sha256_hex(b"abc"))])
True
>>> d = tempfile.mkdtemp()
>>> with StoreLock(d):
...     StoreLock(d)
Traceback (most recent call last):
...
runtime.errors.StoreError: store ... is in use by another daemon (pid ...); stop it or use another --store
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import secrets
from collections.abc import Iterable
from pathlib import Path

from runtime.errors import StoreError

__all__ = ["MAX_VERSION", "StoreLock", "check_digest", "new_epoch", "sha256_hex", "supersedes", "version_digest"]

#: Version numbers are 1 ..= MAX_VERSION (a larger one in a manifest is refused as corrupt).
MAX_VERSION = 1_000_000_000
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_EPOCH = re.compile(r"^[0-9a-f]{16,64}$")


def new_epoch() -> str:
    """A fresh random store epoch (16 hex digits)."""
    return secrets.token_hex(8)


def sha256_hex(data: bytes) -> str:
    """The sha256 hex digest of ``data``."""
    return hashlib.sha256(data).hexdigest()


def version_digest(bands: Iterable[tuple[int, int | None, str]]) -> str:
    """sha256 over ``min:max:digest`` lines of the bands, in order (``inf`` for no upper end)."""
    h = hashlib.sha256()
    for lo, hi, digest in bands:
        h.update(f"{lo}:{'inf' if hi is None else hi}:{digest}\n".encode())
    return h.hexdigest()


def supersedes(new_version: int, new_epoch: str, old_version: int | None, old_epoch: str | None) -> bool:
    """Whether version ``new_version`` of store epoch ``new_epoch`` replaces the held one (None: none held).

    A higher number of the same epoch does; so does any version of another epoch (a store that lost its
    manifest numbers from 1 again under a new epoch: the newest pushed wins).

    >>> supersedes(1, "e2", 2, "e1"), supersedes(2, "e1", 2, "e1"), supersedes(3, "e1", 2, "e1")
    (True, False, True)
    """
    return old_version is None or new_epoch != old_epoch or new_version > old_version


def check_digest(value: object, where: str) -> str | None:
    """``value`` as a digest (None stays None); :class:`StoreError` naming ``where`` otherwise."""
    if value is None:
        return None
    if not isinstance(value, str) or not _HEX64.fullmatch(value):
        raise StoreError(f"{where}: must be a sha256 hex digest, got {str(value)[:80]!r}")
    return value


def check_epoch(value: object, where: str) -> str:
    """``value`` as a store epoch (hex); :class:`StoreError` naming ``where`` otherwise."""
    if not isinstance(value, str) or not _EPOCH.fullmatch(value):
        raise StoreError(f"{where}: must be a hex store epoch, got {str(value)[:80]!r}")
    return value


class StoreLock:
    """An exclusive lock on a store directory, held until :meth:`release` (or the process ends).

    The lock file ``.lock`` holds the holder's pid, so the refusal can name it.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.path = Path(directory) / ".lock"
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StoreError(f"store {str(directory)!r}: cannot open {self.path.name}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise StoreError(f"store {str(directory)!r} is in use by another daemon (pid {holder}); "
                             "stop it or use another --store") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        """Give the lock up (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> StoreLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
