"""Argument checks at the package's public boundary: wrong types raise :class:`PlanError` naming the argument."""

from __future__ import annotations

import os
from typing import Any

from .errors import PlanError

__all__ = ["need", "need_bool", "need_int", "need_path", "need_str"]


def need(value: Any, kind: type | tuple[type, ...], what: str) -> None:
    """Raise unless ``value`` is an instance of ``kind``.

    >>> need(1, str, "name")
    Traceback (most recent call last):
    ...
    mscclpp_plan.errors.PlanError: name must be a str, got int
    """
    if not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise PlanError(f"{what} must be a {names}, got {type(value).__name__}")


def need_str(value: Any, what: str) -> None:
    need(value, str, what)


def need_bool(value: Any, what: str) -> None:
    need(value, bool, what)


def need_int(value: Any, what: str, lo: int = 0, hi: int = 2**64 - 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlanError(f"{what} must be an int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise PlanError(f"{what} must be in [{lo}, {hi}], got {value}")


def need_path(value: Any, what: str) -> None:
    if not isinstance(value, (str, os.PathLike)) or (isinstance(value, str) and not value):
        raise PlanError(f"{what} must be a non-empty path, got {type(value).__name__}")
