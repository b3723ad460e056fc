"""One daemon connection (an asyncio protocol on the daemon's loop) and the store-file resolver behind ``get``.

Private to :mod:`runtime.service.daemon`; ``docs/telemetry.md`` §4 documents the behaviour.

Examples
--------
>>> version_message({"comm": "dp0", "collective": "allgather", "version": 2})["type"]
'version'
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import os
import stat
import traceback
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from runtime.errors import WireError
from runtime.service._guard import AuthGuard
from runtime.service.wire import (
    CLIENT_TO_DAEMON,
    FILE_CHUNK_BYTES,
    MAX_MESSAGE_BYTES,
    PROTOCOL,
    LineFramer,
    decode,
    encode,
    request_id,
)

__all__ = ["Connection", "DaemonLimits", "DaemonState", "band_digests", "file_sha256", "open_store_file", "resolve_store_file", "version_message"]


class DaemonLimits(Protocol):
    """The daemon settings a connection enforces (:class:`runtime.service.daemon.DaemonConfig` has them)."""

    @property
    def max_clients(self) -> int: ...
    @property
    def max_unauthenticated(self) -> int: ...
    @property
    def hello_timeout_s(self) -> float: ...
    @property
    def idle_timeout_s(self) -> float | None: ...
    @property
    def client_write_limit_bytes(self) -> int: ...


class DaemonState(Protocol):
    """What a :class:`Connection` uses of the daemon's shared state (the daemon's ``_Daemon`` provides it).

    A protocol here rather than an import of the daemon: the daemon imports this module.
    """

    @property
    def ids(self) -> Iterator[int]: ...
    @property
    def token(self) -> bytes: ...
    @property
    def config(self) -> DaemonLimits: ...
    @property
    def store_dir(self) -> Path | None: ...
    @property
    def refuse_files(self) -> tuple[Path, ...]: ...
    @property
    def conns(self) -> dict[int, Connection]: ...
    @property
    def preauth(self) -> dict[int, Connection]: ...
    @property
    def auth_guard(self) -> AuthGuard: ...
    @property
    def paused(self) -> dict[int, Connection]: ...
    @property
    def counters(self) -> Counter[str]: ...
    @property
    def latest(self) -> dict[tuple[str, str], dict[str, Any]]: ...
    @property
    def digests(self) -> dict[str, str]: ...
    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def log(self, record: Mapping[str, Any]) -> None: ...
    def enqueue_samples(self, conn: Connection, msg: dict[str, Any], nbytes: int) -> None: ...
    def status_request(self, conn: Connection, msg: dict[str, Any]) -> None: ...


def resolve_store_file(root: Path, relative: str, *, refuse: Iterable[Path] = ()) -> Path:
    """The regular file ``relative`` names inside the store directory ``root``; refuses anything else.

    Refused: absolute paths, ``..`` or hidden (``.``-prefixed) components, a path whose symlinks lead out
    of the store, a non-file, and any file that may not be the store's own, judged by its inode rather than
    its path: a file with more than one name (a hard link: the store writes every file once, by rename, so
    its own have one), on another device than the store directory, or the inode of a file listed in
    ``refuse`` (the daemon's token file).

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp()); _ = (root / "m.json").write_text("{}")
    >>> resolve_store_file(root, "m.json").name
    'm.json'
    >>> resolve_store_file(root, "../etc/passwd")
    Traceback (most recent call last):
    ...
    runtime.errors.WireError: get: path '../etc/passwd' is not a file of the store
    """
    bad = WireError(f"get: path {relative[:200]!r} is not a file of the store", reason="path")
    parts = Path(relative).parts
    if not parts or Path(relative).is_absolute() or any(p in ("..", ".") or p.startswith(".") for p in parts):
        raise bad
    base = root.resolve()
    try:
        target = (base / relative).resolve(strict=True)
    except (OSError, RuntimeError):
        raise bad from None
    if target == base or base not in target.parents or not target.is_file():
        raise bad
    try:
        own = _own_file(target.stat(), base, refuse)
    except OSError:
        own = False
    if not own:
        raise bad
    return target


def open_store_file(root: Path, relative: str, *, refuse: Iterable[Path] = ()) -> tuple[BinaryIO, int]:
    """The open file :func:`resolve_store_file` accepts and its size; the opened file is checked again by its
    inode (``fstat``), so a name swapped for a link or a FIFO after the check is refused, not served.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp()); _ = (root / "m.json").write_text("{}")
    >>> fh, size = open_store_file(root, "m.json"); fh.read(), size
    (b'{}', 2)
    >>> fh.close(); os.link(root / "m.json", root / "twin.json")
    >>> open_store_file(root, "m.json")
    Traceback (most recent call last):
    ...
    runtime.errors.WireError: get: path 'm.json' is not a file of the store
    """
    target = resolve_store_file(root, relative, refuse=refuse)
    fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    fh = os.fdopen(fd, "rb")
    try:
        st = os.fstat(fd)
        if _own_file(st, root.resolve(), refuse):
            return fh, st.st_size
    except OSError:
        pass
    fh.close()
    raise WireError(f"get: path {relative[:200]!r} is not a file of the store", reason="path")


def _own_file(st: os.stat_result, root: Path, refuse: Iterable[Path]) -> bool:
    """Whether ``st`` is a regular file with one name, on ``root``'s device, and no file of ``refuse``."""
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_dev != root.stat().st_dev:
        return False
    for r in refuse:
        try:
            other = os.stat(r)
        except OSError:
            continue
        if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
            return False
    return True


class Connection(asyncio.Protocol):
    """One client connection (lives on the loop thread).

    Received messages queue in :attr:`backlog` (at most one socket read of them) and are handled one by one
    while reading is not paused, so a pause (a full request bound, ingest queue or write buffer) takes effect
    at the next message, not after the rest of a pipelined burst.
    """

    def __init__(self, daemon: DaemonState) -> None:
        self.d = daemon
        self.id = next(daemon.ids)
        self.framer = LineFramer(MAX_MESSAGE_BYTES)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.host = "?"
        self.authed = False
        self.role = "?"
        self.rank: int | None = None
        self.comms: frozenset[str] = frozenset()
        self.closed = False
        self.pauses: set[str] = set()  # why reading is paused: "ingest", "write", "requests"
        self.pending = 0
        self.backlog: deque[bytes] = deque()
        self.draining = False
        self.last_message_s = 0.0
        self.hello_timer: asyncio.TimerHandle | None = None
        self.idle_timer: asyncio.TimerHandle | None = None

    # --- asyncio callbacks ---------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.host = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        transport.set_write_buffer_limits(high=1 << 20)
        d = self.d
        if len(d.preauth) >= d.config.max_unauthenticated:
            # The pool of connections still to authenticate is full: the one waiting longest makes room, so
            # idle sockets cannot keep a real client (which sends hello at once) out.
            oldest = next(iter(d.preauth.values()))
            d.counters["evicted_unauthenticated"] += 1
            oldest.fail(f"too many unauthenticated connections (at most {d.config.max_unauthenticated})",
                        "preauth_full")
        d.conns[self.id] = self
        d.preauth[self.id] = self
        d.counters["connections"] += 1
        d.log({"event": "connect", "client": self.id, "peer": self.peer, "clients": len(d.conns)})
        self.hello_timer = d.loop.call_later(d.config.hello_timeout_s, self._hello_timeout)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.d.counters["bytes_in"] += len(data)
        try:
            self.backlog.extend(self.framer.feed(data))
        except WireError as exc:
            self.fail(str(exc), exc.reason)
            return
        self._drain()

    def connection_lost(self, exc: Exception | None) -> None:
        was_open = not self.closed
        self.closed = True
        self.backlog.clear()
        for timer in (self.hello_timer, self.idle_timer):
            if timer is not None:
                timer.cancel()
        if self.framer.pending:  # gone mid-message: the partial message is discarded
            self.d.counters["truncated"] += 1
            self.d.log({"event": "truncated", "client": self.id, "pending_bytes": self.framer.pending})
        self.d.preauth.pop(self.id, None)
        if self.d.conns.pop(self.id, None) is not None:
            self.d.paused.pop(self.id, None)
            self.d.log({"event": "disconnect", "client": self.id, "peer": self.peer, "role": self.role,
                        "rank": self.rank, "clients": len(self.d.conns),
                        **({"error": str(exc)[:200]} if exc is not None and was_open else {})})

    def pause_writing(self) -> None:
        self.pause("write")

    def resume_writing(self) -> None:
        self.resume("write")

    # --- helpers ---------------------------------------------------------------------------------------
    def pause(self, why: str) -> None:
        if not self.pauses and self.transport is not None and not self.closed:
            self.transport.pause_reading()
        self.pauses.add(why)

    def resume(self, why: str) -> None:
        if why not in self.pauses:
            return
        self.pauses.discard(why)
        if self.pauses or self.closed:
            return
        self._drain()  # messages already read come first
        if not self.pauses and not self.closed and self.transport is not None:
            self.transport.resume_reading()

    def _drain(self) -> None:
        """Handle queued messages until the queue is empty, the connection closes or reading is paused."""
        if self.draining:
            return
        self.draining = True
        try:
            while self.backlog and not self.pauses and not self.closed:
                self._handle_line(self.backlog.popleft())
        finally:
            self.draining = False

    def _handle_line(self, line: bytes) -> None:
        self.last_message_s = self.d.loop.time()
        try:
            self.handle(decode(line, CLIENT_TO_DAEMON), len(line))
        except WireError as exc:
            self.fail(str(exc), exc.reason, reply_id=request_id(line))
        except Exception as exc:  # a bug must cost this connection (with a reply), never the loop
            self.d.log({"event": "internal_error", "client": self.id, "error": repr(exc)[:300],
                        "trace": traceback.format_exc(limit=4)[-800:]})
            self.fail(f"internal error handling the message: {type(exc).__name__}", "internal",
                      reply_id=request_id(line))

    def send(self, message: Mapping[str, Any]) -> None:
        if self.closed or self.transport is None:
            return
        try:
            data = encode(message)
        except WireError as exc:
            data = encode({"type": "error", "message": str(exc), **({"id": message["id"]} if "id" in message
                                                                     else {})})
        if self.transport.get_write_buffer_size() + len(data) > self.d.config.client_write_limit_bytes:
            self.fail("client does not read its messages", "slow_consumer", notify=False)
            return
        self.transport.write(data)
        self.d.counters["messages_out"] += 1

    def fail(self, message: str, reason: str, *, notify: bool = True, quiet: bool = False,
             reply_id: Mapping[str, Any] | None = None) -> None:
        """Send an error (when ``notify``; with the refused request's ``reply_id``) and drop the connection;
        ``quiet`` leaves the ``drop`` log record out (a failure counted in an aggregate record instead)."""
        if self.closed:
            return
        self.d.counters[f"dropped_{reason}"] += 1
        if not quiet:
            self.d.log({"event": "drop", "client": self.id, "peer": self.peer, "reason": reason,
                        "message": message[:200]})
        if notify and self.transport is not None:
            try:
                self.transport.write(encode({"type": "error", "message": message, "fatal": True,
                                             **(reply_id or {})}))
            except WireError:
                pass
        self.closed = True
        self.backlog.clear()
        self.d.preauth.pop(self.id, None)
        if self.transport is not None:
            self.transport.close()

    def _hello_timeout(self) -> None:
        if not self.authed:
            self.fail(f"no hello within {self.d.config.hello_timeout_s} s", "hello_timeout")

    def _idle_check(self) -> None:
        """Drop an authenticated client that sent no message (a ``ping`` counts) for ``idle_timeout_s``; one
        the daemon is not reading from (paused, requests or messages waiting) is not idle."""
        timeout = self.d.config.idle_timeout_s
        if self.closed or timeout is None:
            return
        left = self.last_message_s + timeout - self.d.loop.time()
        if self.pauses or self.pending or self.backlog:
            left = timeout
        if left <= 0:
            self.fail(f"no message for {timeout} s (idle; a client sends ping to stay connected)", "idle_timeout")
            return
        self.idle_timer = self.d.loop.call_later(left, self._idle_check)

    # --- messages --------------------------------------------------------------------------------------
    def handle(self, msg: dict[str, Any], size_bytes: int) -> None:
        d = self.d
        kind = msg["type"]
        if kind == "ping" and self.authed:
            return  # a heartbeat: receiving it was the point (not counted, it says nothing)
        d.counters[f"messages_{kind}"] += 1
        if not self.authed:
            if kind != "hello":
                self.fail("the first message must be hello", "no_hello", reply_id=request_id_of(msg))
                return
            self.hello(msg)
            return
        if kind == "hello":
            self.fail("hello sent twice", "protocol", reply_id=request_id_of(msg))
        elif kind == "samples":
            d.enqueue_samples(self, msg, size_bytes)
        elif kind == "get":
            self.get(msg)
        elif kind == "status":
            d.status_request(self, msg)

    def hello(self, msg: dict[str, Any]) -> None:
        d = self.d
        reply_id = request_id_of(msg)
        wait_s = d.auth_guard.blocked_s(self.host)
        if wait_s > 0:  # over the budget of failed tokens: refused unread, counted in the window's record
            d.auth_guard.refused(self.host)
            d.counters["refused_auth_rate"] += 1
            self.fail(f"hello refused: too many failed authentications from {self.host}; retry in "
                      f"{wait_s:.1f} s", "auth_rate", quiet=True, reply_id=reply_id)
            return
        if not hmac.compare_digest(msg["token"].encode("utf-8"), d.token):
            d.counters["refused_token"] += 1
            first = d.auth_guard.failed(self.host)
            self.fail("hello refused: wrong token", "auth", quiet=not first, reply_id=reply_id)
            return
        if sum(1 for c in d.conns.values() if c.authed and not c.closed) >= d.config.max_clients:
            d.counters["refused_full"] += 1
            self.fail(f"too many clients (at most {d.config.max_clients})", "refused_full", reply_id=reply_id)
            return
        if self.hello_timer is not None:
            self.hello_timer.cancel()
        d.preauth.pop(self.id, None)
        self.authed = True
        self.role, self.rank, self.comms = msg["role"], msg["rank"], frozenset(msg["comms"])
        d.log({"event": "hello", "client": self.id, "peer": self.peer, "role": self.role, "rank": self.rank,
               "comms": sorted(self.comms)})
        self.send({"type": "hello", "protocol": PROTOCOL, "server": "loopcoll-daemon", "client": self.id,
                   "idle_timeout_s": d.config.idle_timeout_s, **reply_id})
        for (comm, _), entry in sorted(d.latest.items()):
            if comm in self.comms:
                self.send(version_message(entry))
                d.counters["versions_pushed"] += 1
        if d.config.idle_timeout_s is not None:
            self.idle_timer = d.loop.call_later(d.config.idle_timeout_s, self._idle_check)

    def get(self, msg: dict[str, Any]) -> None:
        d = self.d
        reply_id = request_id_of(msg)
        if d.store_dir is None:
            self.send({"type": "error", "message": "get: this daemon serves no store", **reply_id})
            return
        try:
            fh, size = open_store_file(d.store_dir, msg["path"], refuse=d.refuse_files)
            with fh:
                sha = d.digests.get(msg["path"]) if msg["offset"] == 0 else None
                if sha is not None and file_sha256(fh) != sha:
                    d.counters["get_refused"] += 1
                    d.log({"event": "get_refused", "client": self.id, "path": msg["path"][:200], "reason": "digest"})
                    self.send({"type": "error", "message": f"get: {msg['path'][:200]!r} does not match its "
                               "manifest sha256 (changed since it was published); not served", **reply_id})
                    return
                fh.seek(min(msg["offset"], size))
                chunk = fh.read(FILE_CHUNK_BYTES)
        except WireError as exc:
            d.counters["get_refused"] += 1
            d.log({"event": "get_refused", "client": self.id, "path": msg["path"][:200]})
            self.send({"type": "error", "message": str(exc), **reply_id})
            return
        except OSError as exc:
            self.send({"type": "error", "message": f"get: cannot read {msg['path']!r}: {exc.strerror}",
                       **reply_id})
            return
        eof = msg["offset"] + len(chunk) >= size
        self.send({"type": "file", "path": msg["path"], "offset": msg["offset"], "size": size, "eof": eof,
                   "data": base64.b64encode(chunk).decode("ascii"), **reply_id})


def file_sha256(fh: BinaryIO) -> str:
    """The sha256 hex of the whole open file ``fh`` (read from its start)."""
    fh.seek(0)
    h = hashlib.sha256()
    for block in iter(lambda: fh.read(1 << 20), b""):
        h.update(block)
    return h.hexdigest()


def band_digests(entry: Mapping[str, Any]) -> dict[str, str]:
    """``{store path: sha256}`` of a manifest entry's band files that carry a digest."""
    out: dict[str, str] = {}
    for b in entry.get("bands", ()):
        for key in ("schedule", "xml"):
            if b.get(key) and b.get(f"{key}_sha256"):
                out[str(b[key])] = str(b[f"{key}_sha256"])
    return out


def request_id_of(msg: Mapping[str, Any]) -> dict[str, Any]:
    """``{"id": ...}`` of a validated request, or ``{}``: what its reply carries."""
    return {"id": msg["id"]} if "id" in msg else {}


def version_message(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "version", "comm": entry["comm"], "collective": entry["collective"],
            "version": entry["version"], "manifest_entry": dict(entry)}
