"""The runtime's errors: members of loopcoll's one exception family (:class:`synth.LoopcollError`).

Examples
--------
>>> from synth import LoopcollError
>>> issubclass(TelemetryError, LoopcollError)
True
>>> TelemetryError("sample 3: busy_s must be > 0, got 0", reason="nonpositive_busy").reason
'nonpositive_busy'
"""

from __future__ import annotations

from synth import LoopcollError

__all__ = ["ProfileError", "RuntimeStateError", "StoreError", "TelemetryError", "WireError"]


class TelemetryError(LoopcollError):
    """A telemetry sample is malformed or out of range; ``reason`` is a short code for counting."""

    def __init__(self, message: str, *, reason: str = "invalid") -> None:
        super().__init__(message)
        self.reason = reason


class ProfileError(LoopcollError):
    """A job profile (communicators, ranks, collectives, sizes) is malformed or does not fit the topology."""


class StoreError(LoopcollError):
    """The schedule-version store is unreadable, corrupt, or not writable."""


class RuntimeStateError(LoopcollError):
    """A runtime component was used in a state that does not allow the call (closed, not started, timed out)."""


class WireError(LoopcollError):
    """The daemon's wire protocol failed: a malformed or over-long message, a refused token, a lost or
    unreachable connection; ``reason`` is a short code (``too_large``, ``bad_json``, ``protocol``, ``auth``,
    ``connect``, ``closed``, ``timeout``, ``remote``, ``listen``)."""

    def __init__(self, message: str, *, reason: str = "protocol") -> None:
        super().__init__(message)
        self.reason = reason
