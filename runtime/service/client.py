"""The daemon's Python client, used by executors (push samples, receive schedule versions) and tools.

A :class:`Client` connects, sends ``hello`` with the shared token and waits for the daemon's answer (a wrong
token raises :class:`~runtime.errors.WireError` with reason ``auth``). Then two threads run:

* a **reader** that receives pushed ``version`` messages (each manifest entry read into a typed
  :class:`~runtime.formats.store.VersionEntry`; one that does not read, or does not match its message, is
  refused with an error log line naming it; kept per (comm, collective), newest wins, and handed to the
  :meth:`Client.on_version` callbacks) and the replies to :meth:`get`, :meth:`status` and :meth:`push_samples`;
* a **sender** that drains a bounded queue of samples (:meth:`send_samples` never blocks: past
  ``max_queued_samples`` the newest samples are dropped and counted in :attr:`Client.dropped_samples`) into
  ``samples`` messages of at most ``batch_samples`` samples.

Reconnect policy: an ``executor`` client (``reconnect=True`` by default for that role) that loses its
connection retries with exponential back-off (0.1 s doubling up to 5 s, forever, until :meth:`close`); while
disconnected its samples wait in the bounded queue, requests raise ``WireError`` (reason ``closed``), and after
the new ``hello`` the daemon pushes the latest versions again. A refused token stops the retries. A ``tool``
client does not reconnect. The first connection is never retried: it raises ``WireError`` (reason
``connect``) at once.

Examples
--------
>>> parse_address("127.0.0.1:7000"), parse_address("[::1]:7000")
(('127.0.0.1', 7000), ('::1', 7000))
"""

from __future__ import annotations

import base64
import binascii
import itertools
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from runtime.errors import StoreError, WireError
from runtime.formats.identity import supersedes
from runtime.formats.store import VersionEntry
from runtime.formats.aggregate import AggRecord
from runtime.formats.telemetry import Sample
from runtime.service._client_link import PING, open_link, pushed_entry, sample_doc, sample_lines
from runtime.service.wire import DAEMON_TO_CLIENT, MAX_MESSAGE_BYTES, ROLES, LineFramer, check_token, decode, encode

__all__ = ["Client", "parse_address", "read_token"]

log = logging.getLogger(__name__)

_BACKOFF_START_S = 0.1
_BACKOFF_MAX_S = 5.0
_BATCH_TARGET_BYTES = 256 << 10
_WAKE: dict[str, Any] = {}


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``[V6]:PORT``) as ``(host, port)``; raises :class:`WireError` when malformed."""
    host, sep, port = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise WireError(f"address {address!r} is not HOST:PORT", reason="connect")
    return host, int(port)


def read_token(token: str | None = None, token_file: str | os.PathLike[str] | None = None) -> str:
    """The shared token: ``token``, else the file ``token_file``, else ``$LOOPCOLL_TOKEN``.

    A token file holds the token on its first line, exactly (surrounding spaces belong to it; the line break
    ending it does not; blank lines may follow), so a token written with its line break reads back the same.

    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "token"); _ = open(path, "w").write("  spaced token \\n")
    >>> read_token(token_file=path)
    '  spaced token '
    """
    if token:
        return token
    if token_file is not None:
        where = f"token file {os.fspath(token_file)!r}"
        try:
            with open(token_file, encoding="utf-8", newline="") as fh:
                text = fh.read(8192)
        except OSError as exc:
            raise WireError(f"{where}: cannot read: {exc.strerror}", reason="auth") from None
        except UnicodeDecodeError:
            raise WireError(f"{where}: not UTF-8 text", reason="auth") from None
        line, _, rest = text.partition("\n")
        line = line.removesuffix("\r")
        if not line.strip():
            raise WireError(f"{where} is empty", reason="auth")
        if rest.strip():
            raise WireError(f"{where}: holds more than one line (the token is the first line alone)", reason="auth")
        return check_token(line, where)
    env = os.environ.get("LOOPCOLL_TOKEN", "")
    if not env:
        raise WireError("no token: pass token=, a token file, or set LOOPCOLL_TOKEN", reason="auth")
    return check_token(env, "LOOPCOLL_TOKEN")


class _Slot:
    __slots__ = ("event", "reply")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reply: dict[str, Any] | None = None


class Client:
    """A connection to the loopcoll daemon (see the module docstring for threads and reconnects).

    Parameters
    ----------
    address : ``HOST:PORT`` of the daemon.
    token : the shared token; default ``$LOOPCOLL_TOKEN``.
    role : ``"executor"`` or ``"tool"``.
    rank : the executor's global rank (or ``None``).
    comms : communicators whose schedule versions the daemon pushes to this client.
    timeout_s : connect and request timeout.
    reconnect : retry a lost connection (default: ``True`` for executors).
    """

    def __init__(
        self,
        address: str = "127.0.0.1:7000",
        *,
        token: str | None = None,
        role: str = "tool",
        rank: int | None = None,
        comms: Sequence[str] = (),
        timeout_s: float = 10.0,
        reconnect: bool | None = None,
        max_queued_samples: int = 100_000,
        batch_samples: int = 2000,
    ) -> None:
        if role not in ROLES:
            raise WireError(f"role must be one of {', '.join(ROLES)}, got {role!r}", reason="protocol")
        self.host, self.port = parse_address(address)
        self.address = address
        self._token = read_token(token)
        self.role, self.rank, self.comms = role, rank, tuple(comms)
        self.timeout_s = timeout_s
        self.reconnect = role == "executor" if reconnect is None else reconnect
        self.batch_samples = max(1, batch_samples)
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=max(1, max_queued_samples))
        self._ids = itertools.count(1)
        self._pending: dict[int, _Slot] = {}
        self._plock = threading.Lock()
        self._wlock = threading.Lock()
        self._vlock = threading.Lock()
        self._versions: dict[tuple[str, str], VersionEntry] = {}
        self._callbacks: list[Callable[[VersionEntry], None]] = []
        self._closing = threading.Event()
        self._connected = threading.Event()
        self._sock: socket.socket | None = None
        self._framer = LineFramer(MAX_MESSAGE_BYTES)
        #: Samples dropped because the queue was full or the connection was lost (tool role).
        self.dropped_samples = 0
        #: Samples handed to the socket.
        self.sent_samples = 0
        #: Successful (re)connections; the last fatal error (e.g. a refused token on reconnect).
        self.connections = 0
        self.error: WireError | None = None
        #: Pushed versions refused because their manifest entry did not read (each also logged).
        self.refused_versions = 0
        self._inflight = 0
        self._flush = threading.Condition()
        self._ping_s: float | None = None  # a third of the daemon's idle timeout (from its hello reply)
        self._last_write_s = time.monotonic()
        self._connect()
        self._reader = threading.Thread(target=self._read_loop, name="loopcoll-client-reader", daemon=True)
        self._sender = threading.Thread(target=self._send_loop, name="loopcoll-client-sender", daemon=True)
        self._reader.start()
        self._sender.start()

    # --- connection ------------------------------------------------------------------------------------
    def _connect(self) -> None:
        hello = {"type": "hello", "token": self._token, "role": self.role, "rank": self.rank,
                 "comms": list(self.comms)}
        early: list[dict[str, Any]] = []  # versions pushed right after the hello reply
        link = open_link(self.host, self.port, hello, address=self.address, timeout_s=self.timeout_s,
                         on_push=early.append)
        self._ping_s = link.ping_s
        self._framer = link.framer
        self._sock = link.sock
        self.connections += 1
        self._connected.set()
        for msg in early:  # once connected: a callback may fetch the version's files at once
            self._dispatch(msg)

    def _lost(self, sock: socket.socket) -> None:
        self._connected.clear()
        try:
            sock.shutdown(socket.SHUT_RDWR)  # wakes a reader blocked in recv (close alone does not)
        except OSError:
            pass
        try:
            sock.close()
        except OSError:
            pass
        with self._plock:
            slots, self._pending = list(self._pending.values()), {}
        for slot in slots:
            slot.event.set()  # reply stays None: the request sees a closed connection

    def _read_loop(self) -> None:
        backoff = _BACKOFF_START_S
        while not self._closing.is_set():
            sock = self._sock
            if sock is None or not self._connected.is_set():
                if not self.reconnect:
                    return
                if self._closing.wait(backoff):
                    return
                try:
                    self._connect()
                    backoff = _BACKOFF_START_S
                except WireError as exc:
                    if exc.reason == "auth":
                        self.error = exc
                        return
                    backoff = min(2 * backoff, _BACKOFF_MAX_S)
                continue
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                self._lost(sock)
                continue
            try:
                for line in self._framer.feed(data):
                    self._dispatch(decode(line, DAEMON_TO_CLIENT))
            except WireError as exc:
                self.error = exc
                self._lost(sock)

    def _dispatch(self, msg: dict[str, Any]) -> None:
        kind = msg["type"]
        if kind == "version":
            entry = self._read_entry(msg)
            if entry is None:
                return
            key = (entry.comm, entry.collective)
            with self._vlock:
                old = self._versions.get(key)
                if old is not None and not supersedes(entry.version, entry.epoch, old.version, old.epoch):
                    return  # a lower or equal number of the held epoch (docs/executor.md, Guarantees)
                self._versions[key] = entry
                callbacks = list(self._callbacks)
            for cb in callbacks:
                try:
                    cb(entry)
                except Exception:  # a callback's bug must not kill the reader thread
                    pass
            return
        rid = msg.get("id")
        if rid is not None:
            with self._plock:
                slot = self._pending.pop(rid, None)
            if slot is not None:
                slot.reply = msg
                slot.event.set()
            return
        if kind == "error":
            self.error = WireError(f"daemon {self.address}: {msg['message']}", reason="remote")

    def _read_entry(self, msg: dict[str, Any]) -> VersionEntry | None:
        """The pushed manifest entry, typed; ``None`` (logged, counted) when it is malformed or is not the
        version its message names."""
        try:
            return pushed_entry(msg, self.address)
        except StoreError as exc:
            self.refused_versions += 1
            log.error("refused %s", exc)
            return None

    # --- sending ---------------------------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        sock = self._sock
        if sock is None or not self._connected.is_set():
            raise WireError(f"not connected to {self.address}", reason="closed")
        with self._wlock:
            try:
                sock.sendall(data)
                self._last_write_s = time.monotonic()
            except OSError as exc:
                self._lost(sock)
                raise WireError(f"connection to {self.address} lost: {exc.strerror or exc}", reason="closed") from None

    def _request(self, msg: dict[str, Any]) -> dict[str, Any]:
        return self._request_line(encode(msg), msg["type"])

    def _request_line(self, line: bytes, what: str) -> dict[str, Any]:
        """Send one encoded message with a fresh request id spliced in and wait for the reply carrying it."""
        if self._closing.is_set():
            raise WireError("client is closed", reason="closed")
        rid = next(self._ids)
        slot = _Slot()
        with self._plock:
            self._pending[rid] = slot
        try:
            self._write(b'{"id":%d,' % rid + line[1:])  # every message is a JSON object: "{..."
            if not slot.event.wait(self.timeout_s):
                raise WireError(f"daemon {self.address}: no reply to {what} within {self.timeout_s} s",
                                reason="timeout")
        finally:
            with self._plock:
                self._pending.pop(rid, None)
        reply = slot.reply
        if reply is None:
            raise WireError(f"connection to {self.address} lost during {what}", reason="closed")
        if reply["type"] == "error":
            raise WireError(f"daemon {self.address}: {reply['message']}", reason="remote")
        return reply

    def _send_loop(self) -> None:
        while True:
            try:
                first = self._queue.get(timeout=0.1)
            except queue.Empty:
                if self._closing.is_set():
                    return
                self._heartbeat()
                continue
            if first is _WAKE:
                if self._closing.is_set():
                    return
                continue
            batch = [first]
            size = 0
            while len(batch) < self.batch_samples and size < _BATCH_TARGET_BYTES:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _WAKE:
                    break
                batch.append(item)
                size += 200
            with self._flush:
                self._inflight = len(batch)
            sent = self._deliver(batch)
            with self._flush:
                self._inflight = 0
                self.sent_samples += sent
                self.dropped_samples += len(batch) - sent
                self._flush.notify_all()

    def _heartbeat(self) -> None:
        """Send a ``ping`` when nothing was written for a third of the daemon's idle timeout (sender thread)."""
        ping_s = self._ping_s
        if ping_s is None or not self._connected.is_set() or time.monotonic() - self._last_write_s < ping_s:
            return
        try:
            self._write(PING)
        except WireError:
            pass  # the reader notices the lost connection

    def _deliver(self, batch: list[dict[str, Any]]) -> int:
        parts = sample_lines(batch)
        sent = 0
        while True:
            try:
                while parts:
                    self._write(parts[0][0])
                    sent += parts.pop(0)[1]
                return sent
            except WireError:
                if not self.reconnect or self._closing.is_set():
                    return sent
                self._connected.wait(0.5)

    def send_samples(self, samples: Iterable[Sample | AggRecord | Mapping[str, Any]]) -> None:
        """Queue samples (:class:`~runtime.Sample` or dicts) for the sender thread; never blocks.

        Past ``max_queued_samples`` waiting, further samples are dropped and counted in :attr:`dropped_samples`.
        """
        for s in samples:
            doc = sample_doc(s)
            try:
                self._queue.put_nowait(doc)
            except queue.Full:
                with self._flush:
                    self.dropped_samples += 1

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every queued sample has been sent (or dropped); ``True`` when done in time."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        with self._flush:
            while self._queue.qsize() or self._inflight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._flush.wait(min(left, 0.05))
        return True

    def push_samples(self, samples: Iterable[Sample | AggRecord | Mapping[str, Any]], *,
                     batch_samples: int | None = None) -> dict[str, Any]:
        """Send samples synchronously, batch by batch, and return the daemon's totals
        ``{"accepted": n, "rejected": {reason: n}}`` (the controller's validation)."""
        docs = [sample_doc(s) for s in samples]
        step = batch_samples or self.batch_samples
        accepted = 0
        rejected: dict[str, int] = {}
        for i in range(0, len(docs), step):
            for line, _ in sample_lines(docs[i:i + step]):
                reply = self._request_line(line, "samples")
                accepted += reply["accepted"]
                for reason, n in reply["rejected"].items():
                    rejected[reason] = rejected.get(reason, 0) + n
        return {"accepted": accepted, "rejected": dict(sorted(rejected.items()))}

    # --- versions, files, status -----------------------------------------------------------------------
    def versions(self) -> list[VersionEntry]:
        """The manifest entries pushed so far, the latest per (comm, collective), sorted by that key."""
        with self._vlock:
            return [v for _, v in sorted(self._versions.items())]

    def on_version(self, callback: Callable[[VersionEntry], None]) -> None:
        """Call ``callback(entry)`` for every newer version pushed from now on (on the reader thread);
        it is first called at once, on this thread, with each version already known."""
        with self._vlock:
            self._callbacks.append(callback)
            known = [v for _, v in sorted(self._versions.items())]
        for entry in known:
            callback(entry)

    def wait_version(self, comm: str, collective: str, *, newer_than: int = -1,
                     timeout_s: float | None = None) -> VersionEntry | None:
        """Block until a version of (comm, collective) newer than ``newer_than`` is known; ``None`` on timeout."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while True:
            with self._vlock:
                entry = self._versions.get((comm, collective))
            if entry is not None and entry.version > newer_than:
                return entry
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.02)

    def get(self, path: str) -> bytes:
        """The bytes of store file ``path`` (relative to the store directory), fetched in chunks."""
        out = bytearray()
        while True:
            reply = self._request({"type": "get", "path": path, "offset": len(out)})
            try:
                out += base64.b64decode(reply["data"], validate=True)
            except (binascii.Error, ValueError):
                raise WireError(f"get {path!r}: the daemon sent bad base64", reason="protocol") from None
            if reply["eof"] or not reply["data"]:
                if len(out) != reply["size"]:
                    raise WireError(f"get {path!r}: got {len(out)} bytes of {reply['size']} (file changed?)",
                                    reason="protocol")
                return bytes(out)

    def status(self, *, prometheus: bool = False) -> dict[str, Any]:
        """The daemon's status: ``{"controller": {...}, "daemon": {...}}`` (plus ``"prometheus"`` text)."""
        reply = self._request({"type": "status", "prometheus": prometheus})
        return {k: v for k, v in reply.items() if k not in ("type", "id")}

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def close(self, *, flush_timeout_s: float = 1.0) -> None:
        """Send what is queued (up to ``flush_timeout_s``), then close the connection and stop the threads."""
        if self._closing.is_set():
            return
        if self._connected.is_set() and flush_timeout_s > 0:
            self.flush(flush_timeout_s)
        self._closing.set()
        try:
            self._queue.put_nowait(_WAKE)  # the sender stops at once instead of at its next poll
        except queue.Full:
            pass
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in (self._sender, self._reader):
            if t is not threading.current_thread():
                t.join(timeout=5)
        if sock is not None:
            sock.close()
        self._connected.clear()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
