"""Shared pytest configuration for the loopcoll test suite.

* Makes the repository root importable, so test modules can ``from tests.strategies import ...``
  whether pytest is started as ``pytest`` or ``python -m pytest``.
* Registers the hypothesis profile every property test runs under: no per-example deadline
  (solver start-up times vary by machine; no test asserts on time) and no database writes into
  the working tree. ``HYPOTHESIS_PROFILE=ci`` selects a derandomized profile for reproducible CI.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

settings.register_profile(
    "loopcoll",
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("ci", parent=settings.get_profile("loopcoll"), derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "loopcoll"))
