"""The client's side of one daemon connection: the ``hello`` handshake, keep-alive and the messages it sends.

Private to :mod:`runtime.service.client` (its :class:`~runtime.service.client.Client` owns the threads, the
queue and the reconnect policy; ``docs/telemetry.md`` §4 documents the behaviour). Here: :func:`open_link`
connects and authenticates, :func:`sample_lines` cuts sample batches into messages that fit the size limit,
:func:`pushed_entry` reads a pushed ``version`` message's manifest entry.

Examples
--------
>>> [n for _line, n in sample_lines([{"kind": "pair"}] * 3)]
[3]
>>> PING
b'{"type":"ping"}\\n'
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from runtime.errors import StoreError, WireError
from runtime.formats.store import VersionEntry
from runtime.formats.aggregate import AggRecord
from runtime.formats.columnar import AggBatch
from runtime.formats.telemetry import Sample
from runtime.service.wire import DAEMON_TO_CLIENT, MAX_MESSAGE_BYTES, LineFramer, decode, encode

__all__ = ["PING", "Link", "open_link", "pushed_entry", "sample_doc", "sample_lines"]

_ID_ROOM = 32  # bytes a request id adds to a message
#: The keep-alive message, sent when nothing else was written for a third of the daemon's idle timeout.
PING = encode({"type": "ping"})


@dataclass(frozen=True)
class Link:
    """An authenticated connection: its socket, its framer (holding any bytes read past the hello reply) and
    the keep-alive interval, a third of the daemon's idle timeout (``None``: the daemon has none)."""

    sock: socket.socket
    framer: LineFramer
    ping_s: float | None


def open_link(host: str, port: int, hello: Mapping[str, Any], *, address: str, timeout_s: float,
              on_push: Callable[[dict[str, Any]], None]) -> Link:
    """Connect to the daemon at ``(host, port)`` (``address`` in messages), send ``hello`` and wait for its
    reply; messages pushed right after the reply go to ``on_push``. Raises :class:`WireError` (reason
    ``connect``, ``closed``, ``timeout``, ``auth``, ``remote`` or ``protocol``) with the socket closed."""
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as exc:
        raise WireError(f"cannot connect to {address}: {exc.strerror or exc}", reason="connect") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    framer = LineFramer(MAX_MESSAGE_BYTES)
    try:
        sock.sendall(encode(hello))
        reply = None
        while reply is None:
            data = sock.recv(65536)
            if not data:
                raise WireError(f"daemon {address} closed the connection during hello", reason="closed")
            for line in framer.feed(data):
                msg = decode(line, DAEMON_TO_CLIENT)
                if reply is None:
                    reply = msg
                else:
                    on_push(msg)  # versions pushed right after the hello reply
        if reply["type"] == "error":
            reason = "auth" if "token" in reply["message"] else "remote"
            raise WireError(f"daemon {address}: {reply['message']}", reason=reason)
        if reply["type"] != "hello":
            raise WireError(f"daemon {address}: expected hello, got {reply['type']}", reason="protocol")
        idle_s = reply["idle_timeout_s"]
        ping_s = None if idle_s is None else idle_s / 3
    except socket.timeout:
        sock.close()
        raise WireError(f"daemon {address}: no hello reply within {timeout_s} s", reason="timeout") from None
    except OSError as exc:
        sock.close()
        raise WireError(f"daemon {address}: {exc.strerror or exc}", reason="closed") from None
    except WireError:
        sock.close()
        raise
    # From here reads block (close() wakes them with a shutdown) and a send may stall at most timeout_s
    # under the daemon's back-pressure before the connection counts as lost: one socket timeout would
    # apply to both directions, so the send limit is the kernel's SO_SNDTIMEO.
    sock.settimeout(None)
    secs = max(timeout_s, 0.001)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                    struct.pack("ll", int(secs), int((secs - int(secs)) * 1e6)))
    return Link(sock, framer, ping_s)


def pushed_entry(msg: Mapping[str, Any], address: str) -> VersionEntry:
    """The manifest entry of a pushed ``version`` message from ``address``, typed; raises :class:`StoreError`
    naming the version when it is malformed or is not the version its message names."""
    what = f"pushed version {msg['version']} of {msg['comm']}/{msg['collective']} from {address}"
    entry = VersionEntry.from_dict(msg["manifest_entry"], where=what)
    named = (msg["comm"], msg["collective"], msg["version"])
    if (entry.comm, entry.collective, entry.version) != named:
        raise StoreError(f"{what}: its entry is version {entry.version} of {entry.comm}/{entry.collective}")
    return entry


def sample_lines(batch: list[dict[str, Any]]) -> list[tuple[bytes, int]]:
    """``samples`` messages for ``batch`` (with room for a request id) and their sample counts; a batch over
    the size limit is halved until its parts fit, and a sample that cannot be sent alone is left out."""
    try:
        line = encode({"type": "samples", "samples": batch})
        if len(line) + _ID_ROOM <= MAX_MESSAGE_BYTES:
            return [(line, len(batch))]
    except WireError:
        pass
    if len(batch) <= 1:
        return []
    mid = len(batch) // 2
    return sample_lines(batch[:mid]) + sample_lines(batch[mid:])


def sample_doc(sample: Sample | AggRecord | AggBatch | Mapping[str, Any]) -> dict[str, Any]:
    """A sample as its wire document (a :class:`~runtime.formats.telemetry.Sample` or a mapping already)."""
    return sample.to_dict() if isinstance(sample, (Sample, AggRecord, AggBatch)) else dict(sample)
