"""The observability layer's error: a member of loopcoll's exception family.

>>> from synth import LoopcollError
>>> issubclass(ObserveError, LoopcollError)
True
"""

from __future__ import annotations

from synth import LoopcollError

__all__ = ["ObserveError"]


class ObserveError(LoopcollError):
    """Inspector/telemetry ingestion or analysis cannot proceed (DuckDB missing, unreadable input, bad query)."""
