"""Validation of :class:`runtime.loop.controller.ControllerConfig`: one clear error naming the knob.

>>> from runtime.loop.controller import ControllerConfig
>>> check_config(ControllerConfig(min_capped_share=2.0))
Traceback (most recent call last):
...
runtime.errors.ProfileError: controller config: min_capped_share must be in [0, 1], got 2.0
"""

from __future__ import annotations

import math
from typing import Any

from runtime.contention.gate import GateConfig
from runtime.errors import ProfileError

__all__ = ["check_config"]


def check_config(cfg: Any) -> None:
    """Raise :class:`~runtime.errors.ProfileError` naming the first knob of ``cfg`` (a ``ControllerConfig``,
    not imported here: the controller imports this module) out of its range."""
    def bad(name: str, rule: str) -> ProfileError:
        return ProfileError(f"controller config: {name} must be {rule}, got {getattr(cfg, name)!r}")

    if not 0 < cfg.alpha <= 1:
        raise bad("alpha", "in (0, 1]")
    if cfg.tau_s is not None and not (math.isfinite(cfg.tau_s) and cfg.tau_s > 0):
        raise bad("tau_s", "a number > 0 or None")
    for name in ("gamma", "cooldown_s", "min_gain", "slow_tolerance", "pace_tolerance", "snap"):
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise bad(name, "a finite number >= 0")
    for name in ("time_limit_s", "bootstrap_time_limit_s", "reaction_time_limit_s"):
        v = getattr(cfg, name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0):
            raise bad(name, "a number > 0 or None")
    if not 0 <= cfg.hysteresis <= 1:
        raise bad("hysteresis", "in [0, 1]")
    if isinstance(cfg.min_capped_share, bool) or not isinstance(cfg.min_capped_share, (int, float)) or \
            not 0 <= cfg.min_capped_share <= 1:
        raise bad("min_capped_share", "in [0, 1]")
    if cfg.contention_gate is not None:
        GateConfig.from_dict(cfg.contention_gate)  # raises ProfileError naming the bad key or value
