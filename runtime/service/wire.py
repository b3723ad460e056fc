"""The daemon's wire protocol: newline-delimited JSON messages, framing and per-type validation.

Every message is one JSON object ``{"type": ..., ...}`` on one line of at most :data:`MAX_MESSAGE_BYTES`
bytes (newline included). :class:`LineFramer` cuts a byte stream into lines and rejects an over-long line
as soon as its unterminated part passes the limit, so it never buffers more than the limit plus one
received chunk. :func:`decode` turns one line into a validated message dict, :func:`encode` a dict into
one line. ``docs/telemetry.md`` §4 documents every message.

Examples
--------
>>> framer = LineFramer()
>>> framer.feed(b'{"type": "status"}\\n{"type": "ge')
[b'{"type": "status"}']
>>> [decode(line, CLIENT_TO_DAEMON) for line in framer.feed(b't", "path": "manifest.json"}\\n')]
[{'type': 'get', 'path': 'manifest.json', 'offset': 0}]
>>> decode(b'{"type": "nope"}', CLIENT_TO_DAEMON)
Traceback (most recent call last):
...
runtime.errors.WireError: message type 'nope' is not one of get, hello, ping, samples, status
>>> encode({"type": "error", "message": "bad token"})
b'{"message":"bad token","type":"error"}\\n'
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from runtime.errors import WireError

__all__ = [
    "CLIENT_TO_DAEMON",
    "DAEMON_TO_CLIENT",
    "FILE_CHUNK_BYTES",
    "MAX_MESSAGE_BYTES",
    "PROTOCOL",
    "check_token",
    "request_id",
    "ROLES",
    "LineFramer",
    "decode",
    "encode",
    "json_safe",
]

#: Protocol version sent in the daemon's ``hello`` reply.
PROTOCOL = 1
#: The longest message, newline included (1 MiB, as for a telemetry JSONL line).
MAX_MESSAGE_BYTES = 1 << 20
#: Raw bytes per ``file`` reply: base64 makes 4/3 of it, far under the message limit.
FILE_CHUNK_BYTES = 512 << 10
ROLES = ("executor", "tool")
_MAX_TOKEN = 4096
_MAX_NAME = 256
_MAX_COMMS = 4096
_MAX_PATH = 4096
_MAX_ID = 128


class LineFramer:
    """Cuts a byte stream into newline-terminated lines of at most ``max_bytes`` (newline included).

    ``feed`` returns the complete lines (without the newline; blank lines skipped) and keeps the
    unterminated tail. A line longer than the limit raises :class:`WireError` (reason ``too_large``) as
    soon as that is known, so at most ``max_bytes`` plus one fed chunk are ever held.

    >>> f = LineFramer(max_bytes=8)
    >>> f.feed(b"abc\\n\\nde"), f.pending
    ([b'abc'], 2)
    >>> f.feed(b"fghijk")
    Traceback (most recent call last):
    ...
    runtime.errors.WireError: message longer than 8 bytes
    """

    __slots__ = ("_buf", "_scanned", "max_bytes")

    def __init__(self, max_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf known to hold no newline

    @property
    def pending(self) -> int:
        """Bytes held of the current unterminated line."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        lines: list[bytes] = []
        start = 0
        pos = self._scanned
        buf = self._buf
        while True:
            nl = buf.find(b"\n", pos)
            if nl < 0:
                break
            if nl + 1 - start > self.max_bytes:
                self._reset()
                raise WireError(f"message longer than {self.max_bytes} bytes", reason="too_large")
            line = bytes(buf[start:nl]).rstrip(b"\r")
            if line.strip():
                lines.append(line)
            start = pos = nl + 1
        del buf[:start]
        self._scanned = len(buf)
        if len(buf) >= self.max_bytes:  # no newline in time: the line cannot fit any more
            self._reset()
            raise WireError(f"message longer than {self.max_bytes} bytes", reason="too_large")
        return lines

    def _reset(self) -> None:
        self._buf = bytearray()
        self._scanned = 0


def encode(message: Mapping[str, Any]) -> bytes:
    """One message as a compact JSON line (keys sorted); raises :class:`WireError` past the size limit."""
    try:
        text = json.dumps(message, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise WireError(f"message of type {message.get('type')!r} is not JSON: {exc}", reason="encode") from None
    data = text.encode("utf-8") + b"\n"
    if len(data) > MAX_MESSAGE_BYTES:
        raise WireError(f"message of type {message.get('type')!r} is {len(data)} bytes, over the "
                        f"{MAX_MESSAGE_BYTES}-byte limit", reason="too_large")
    return data


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float (inf, nan) replaced by ``None`` and tuples made lists (JSON has neither).

    >>> json_safe({"x_min_gbps": float("inf"), "links": ({"m": 1.5},)})
    {'x_min_gbps': None, 'links': [{'m': 1.5}]}
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def check_token(token: str, where: str) -> str:
    """``token`` when it can be a shared token: non-empty, one line, no NUL, valid UTF-8 text (no lone
    surrogate); else :class:`WireError` (reason ``auth``) naming ``where`` it came from. Spaces are kept.

    >>> check_token("  spaced  ", "LOOPCOLL_TOKEN")
    '  spaced  '
    >>> check_token("\\ud800", "hello")
    Traceback (most recent call last):
    ...
    runtime.errors.WireError: hello: the token must be valid UTF-8 text (it holds a lone surrogate)
    """
    if not token:
        raise WireError(f"{where}: the token must not be empty", reason="auth")
    if any(c in token for c in "\n\r\x00"):
        raise WireError(f"{where}: the token must be one line without NUL", reason="auth")
    if not _is_text(token):
        raise WireError(f"{where}: the token must be valid UTF-8 text (it holds a lone surrogate)", reason="auth")
    return token


def _is_text(value: str) -> bool:
    """Whether ``value`` encodes as UTF-8 (JSON's ``"\\ud800"`` escape decodes to a lone surrogate, which does not)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def request_id(line: bytes | str) -> dict[str, Any]:
    """``{"id": ...}`` of a message line whose id is valid, else ``{}``: lets a refusal of a message that failed
    validation still carry its id.

    >>> request_id(b'{"type": "nope", "id": 7}'), request_id(b"not json")
    ({'id': 7}, {})
    """
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError):
        return {}
    rid = msg.get("id") if isinstance(msg, dict) else None
    if isinstance(rid, bool) or not isinstance(rid, (int, str)) or (isinstance(rid, str) and
                                                                    (len(rid) > _MAX_ID or not _is_text(rid))):
        return {}
    return {"id": rid}


def _fail(message: str) -> WireError:
    return WireError(message[:300], reason="protocol")


def _opt_id(msg: dict[str, Any]) -> None:
    rid = msg.get("id")
    if rid is None:
        msg.pop("id", None)
        return
    if isinstance(rid, bool) or not isinstance(rid, (int, str)) or (isinstance(rid, str) and
                                                                    (len(rid) > _MAX_ID or not _is_text(rid))):
        raise _fail(f"{msg['type']}: id must be an integer or a string of at most {_MAX_ID} characters")


def _str(msg: dict[str, Any], key: str, limit: int, *, empty: bool = False) -> str:
    value = msg.get(key)
    if not isinstance(value, str) or (not value and not empty) or len(value) > limit:
        raise _fail(f"{msg['type']}: {key} must be a {'' if empty else 'non-empty '}string of at most "
                    f"{limit} characters")
    if not _is_text(value):
        raise _fail(f"{msg['type']}: {key} must be valid UTF-8 text (it holds a lone surrogate)")
    return value


def _int(msg: dict[str, Any], key: str, *, nullable: bool = False, default: int | None = None) -> None:
    if key not in msg and default is not None:
        msg[key] = default
    value = msg.get(key)
    if value is None and nullable:
        msg[key] = None
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 63:
        raise _fail(f"{msg['type']}: {key} must be an integer >= 0")


def _hello(msg: dict[str, Any]) -> None:
    _str(msg, "token", _MAX_TOKEN, empty=True)
    if msg.get("role", "tool") not in ROLES:
        raise _fail(f"hello: role must be one of {', '.join(ROLES)}")
    msg.setdefault("role", "tool")
    _int(msg, "rank", nullable=True)
    comms = msg.setdefault("comms", [])
    if (not isinstance(comms, list) or len(comms) > _MAX_COMMS
            or not all(isinstance(c, str) and 0 < len(c) <= _MAX_NAME and _is_text(c) for c in comms)):
        raise _fail(f"hello: comms must be a list of at most {_MAX_COMMS} communicator names")


def _samples(msg: dict[str, Any]) -> None:
    if not isinstance(msg.get("samples"), list):
        raise _fail("samples: samples must be a list of sample objects")
    # The samples themselves are validated one by one by the controller (bad ones are counted, not fatal).


def _get(msg: dict[str, Any]) -> None:
    path = _str(msg, "path", _MAX_PATH)
    if "\x00" in path:
        raise _fail("get: path must not contain NUL")
    _int(msg, "offset", default=0)


def _ping(msg: dict[str, Any]) -> None:
    """A heartbeat (no fields, no answer): keeps an otherwise silent client under the idle timeout."""


def _status_request(msg: dict[str, Any]) -> None:
    if not isinstance(msg.setdefault("prometheus", False), bool):
        raise _fail("status: prometheus must be a boolean")


def _hello_reply(msg: dict[str, Any]) -> None:
    _int(msg, "protocol")
    idle = msg.setdefault("idle_timeout_s", None)
    if idle is not None and (isinstance(idle, bool) or not isinstance(idle, (int, float)) or not idle > 0):
        raise _fail("hello: idle_timeout_s must be a number > 0 or null")


def _samples_reply(msg: dict[str, Any]) -> None:
    _int(msg, "accepted")
    if not isinstance(msg.get("rejected"), dict):
        raise _fail("samples: rejected must be an object of counts")


def _version(msg: dict[str, Any]) -> None:
    _str(msg, "comm", _MAX_NAME)
    _str(msg, "collective", _MAX_NAME)
    _int(msg, "version")
    if not isinstance(msg.get("manifest_entry"), dict):
        raise _fail("version: manifest_entry must be an object")


def _file(msg: dict[str, Any]) -> None:
    _str(msg, "path", _MAX_PATH)
    _int(msg, "offset")
    _int(msg, "size")
    _str(msg, "data", MAX_MESSAGE_BYTES, empty=True)
    if not isinstance(msg.get("eof"), bool):
        raise _fail("file: eof must be a boolean")


def _status_reply(msg: dict[str, Any]) -> None:
    if not isinstance(msg.get("controller"), dict) or not isinstance(msg.get("daemon"), dict):
        raise _fail("status: controller and daemon must be objects")


def _error(msg: dict[str, Any]) -> None:
    _str(msg, "message", 4096, empty=True)


_Check = Callable[[dict[str, Any]], None]
#: Message types a client sends, with their validators.
CLIENT_TO_DAEMON: Mapping[str, _Check] = {
    "get": _get, "hello": _hello, "ping": _ping, "samples": _samples, "status": _status_request,
}
#: Message types the daemon sends, with their validators.
DAEMON_TO_CLIENT: Mapping[str, _Check] = {
    "error": _error, "file": _file, "hello": _hello_reply, "samples": _samples_reply,
    "status": _status_reply, "version": _version,
}


def decode(line: bytes | str, direction: Mapping[str, _Check]) -> dict[str, Any]:
    """Parse and validate one message line; ``direction`` is :data:`CLIENT_TO_DAEMON` or :data:`DAEMON_TO_CLIENT`.

    Optional fields get their defaults filled in. Raises :class:`WireError` (reason ``too_large``,
    ``bad_json`` or ``protocol``) naming what is wrong.
    """
    if len(line) > MAX_MESSAGE_BYTES:
        raise WireError(f"message longer than {MAX_MESSAGE_BYTES} bytes", reason="too_large")
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise WireError(f"message is not JSON ({str(exc)[:80]})", reason="bad_json") from None
    if not isinstance(msg, dict):
        raise _fail(f"message must be a JSON object, got {type(msg).__name__}")
    kind = msg.get("type")
    check = direction.get(kind) if isinstance(kind, str) else None
    if check is None:
        raise _fail(f"message type {str(kind)[:40]!r} is not one of {', '.join(sorted(direction))}")
    check(msg)
    _opt_id(msg)
    return msg
