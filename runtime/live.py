"""Kept import path: ``runtime.live`` moved to :mod:`runtime.scenarios.live` (docs/live.md showed this import).

>>> from runtime.live import run_live
>>> run_live.__module__
'runtime.scenarios.live'
"""

from __future__ import annotations

from runtime.scenarios.live import (
    COLLECTIVES,
    LIVE_CONTROLLER,
    LiveConfig,
    LiveResult,
    format_timeline,
    main_fault,
    plot_live,
    run_live,
)

__all__ = ["COLLECTIVES", "LIVE_CONTROLLER", "LiveConfig", "LiveResult", "format_timeline", "main_fault", "plot_live",
           "run_live"]
