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
import hmac
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from runtime.errors import WireError
from runtime.service.wire import (
    CLIENT_TO_DAEMON,
    FILE_CHUNK_BYTES,
    MAX_MESSAGE_BYTES,
    PROTOCOL,
    LineFramer,
    decode,
    encode,
)

__all__ = ["Connection", "DaemonLimits", "DaemonState", "resolve_store_file", "version_message"]


class DaemonLimits(Protocol):
    """The daemon settings a connection enforces (:class:`runtime.service.daemon.DaemonConfig` has them)."""

    @property
    def max_clients(self) -> int: ...
    @property
    def hello_timeout_s(self) -> float: ...
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
    def paused(self) -> dict[int, Connection]: ...
    @property
    def counters(self) -> Counter[str]: ...
    @property
    def latest(self) -> dict[tuple[str, str], dict[str, Any]]: ...
    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def log(self, record: Mapping[str, Any]) -> None: ...
    def enqueue_samples(self, conn: Connection, msg: dict[str, Any], nbytes: int) -> None: ...
    def status_request(self, conn: Connection, msg: dict[str, Any]) -> None: ...


def resolve_store_file(root: Path, relative: str, *, refuse: Iterable[Path] = ()) -> Path:
    """The regular file ``relative`` names inside the store directory ``root``; refuses anything else.

    Refused: absolute paths, ``..`` or hidden (``.``-prefixed) components, a path whose symlinks lead out
    of the store, a file listed in ``refuse`` (the daemon's token file), a non-file.

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
    for r in refuse:
        try:
            if target == Path(r).resolve():
                raise bad
        except OSError:
            continue
    return target


class Connection(asyncio.Protocol):
    """One client connection (lives on the loop thread)."""

    def __init__(self, daemon: DaemonState) -> None:
        self.d = daemon
        self.id = next(daemon.ids)
        self.framer = LineFramer(MAX_MESSAGE_BYTES)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.authed = False
        self.role = "?"
        self.rank: int | None = None
        self.comms: frozenset[str] = frozenset()
        self.closed = False
        self.pauses: set[str] = set()  # why reading is paused: "ingest", "write", "requests"
        self.pending = 0
        self.hello_timer: asyncio.TimerHandle | None = None

    # --- asyncio callbacks ---------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        transport.set_write_buffer_limits(high=1 << 20)
        d = self.d
        if len(d.conns) >= d.config.max_clients:
            d.counters["refused_full"] += 1
            self.fail(f"too many clients (at most {d.config.max_clients})", "refused_full")
            return
        d.conns[self.id] = self
        d.counters["connections"] += 1
        d.log({"event": "connect", "client": self.id, "peer": self.peer, "clients": len(d.conns)})
        self.hello_timer = d.loop.call_later(d.config.hello_timeout_s, self._hello_timeout)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.d.counters["bytes_in"] += len(data)
        try:
            lines = self.framer.feed(data)
        except WireError as exc:
            self.fail(str(exc), exc.reason)
            return
        for line in lines:
            if self.closed:
                return
            try:
                self.handle(decode(line, CLIENT_TO_DAEMON), len(line))
            except WireError as exc:
                self.fail(str(exc), exc.reason)
                return

    def connection_lost(self, exc: Exception | None) -> None:
        was_open = not self.closed
        self.closed = True
        if self.hello_timer is not None:
            self.hello_timer.cancel()
        if self.framer.pending:  # gone mid-message: the partial message is discarded
            self.d.counters["truncated"] += 1
            self.d.log({"event": "truncated", "client": self.id, "pending_bytes": self.framer.pending})
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
        if not self.pauses and self.transport is not None and not self.closed:
            self.transport.resume_reading()

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

    def fail(self, message: str, reason: str, *, notify: bool = True) -> None:
        """Send an error (when ``notify``) and drop the connection."""
        if self.closed:
            return
        self.d.counters[f"dropped_{reason}"] += 1
        self.d.log({"event": "drop", "client": self.id, "peer": self.peer, "reason": reason,
                    "message": message[:200]})
        if notify and self.transport is not None:
            try:
                self.transport.write(encode({"type": "error", "message": message, "fatal": True}))
            except WireError:
                pass
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _hello_timeout(self) -> None:
        if not self.authed:
            self.fail(f"no hello within {self.d.config.hello_timeout_s} s", "hello_timeout")

    # --- messages --------------------------------------------------------------------------------------
    def handle(self, msg: dict[str, Any], size_bytes: int) -> None:
        d = self.d
        kind = msg["type"]
        d.counters[f"messages_{kind}"] += 1
        if not self.authed:
            if kind != "hello":
                self.fail("the first message must be hello", "no_hello")
                return
            self.hello(msg)
            return
        if kind == "hello":
            self.fail("hello sent twice", "protocol")
        elif kind == "samples":
            d.enqueue_samples(self, msg, size_bytes)
        elif kind == "get":
            self.get(msg)
        elif kind == "status":
            d.status_request(self, msg)

    def hello(self, msg: dict[str, Any]) -> None:
        d = self.d
        if not hmac.compare_digest(msg["token"].encode("utf-8"), d.token):
            d.counters["refused_token"] += 1
            self.fail("hello refused: wrong token", "auth")
            return
        if self.hello_timer is not None:
            self.hello_timer.cancel()
        self.authed = True
        self.role, self.rank, self.comms = msg["role"], msg["rank"], frozenset(msg["comms"])
        d.log({"event": "hello", "client": self.id, "peer": self.peer, "role": self.role, "rank": self.rank,
               "comms": sorted(self.comms)})
        self.send({"type": "hello", "protocol": PROTOCOL, "server": "loopcoll-daemon", "client": self.id,
                   **({"id": msg["id"]} if "id" in msg else {})})
        for (comm, _), entry in sorted(d.latest.items()):
            if comm in self.comms:
                self.send(version_message(entry))
                d.counters["versions_pushed"] += 1

    def get(self, msg: dict[str, Any]) -> None:
        d = self.d
        reply_id = {"id": msg["id"]} if "id" in msg else {}
        if d.store_dir is None:
            self.send({"type": "error", "message": "get: this daemon serves no store", **reply_id})
            return
        try:
            path = resolve_store_file(d.store_dir, msg["path"], refuse=d.refuse_files)
            with open(path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
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


def version_message(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "version", "comm": entry["comm"], "collective": entry["collective"],
            "version": entry["version"], "manifest_entry": dict(entry)}
