"""Contention: the sequential gate the manager may consult (``gate``), and REACT's congestion detection
(``react``), safe pattern transforms (``transforms``) and configuration choice (``configchoice``), which serve
the benchmarks, tests and callers of ``Controller.deploy`` (the loop itself does not use them).

This package re-exports the gate's public names (``runtime.contention`` was the gate's module). It may import
:mod:`runtime.errors` only (plus ``synth``): the loop imports it, never the other way.

>>> from runtime.contention import GateConfig
>>> GateConfig().alpha
0.01
"""

from __future__ import annotations

from runtime.contention.gate import (
    ContentionGate,
    ContentionState,
    ContentionVerdict,
    Cusum,
    EwStats,
    GateConfig,
    Sprt,
    cusum_monte_carlo,
    sprt_monte_carlo,
    wald_expected_n,
)

__all__ = [
    "ContentionGate",
    "ContentionState",
    "ContentionVerdict",
    "Cusum",
    "EwStats",
    "GateConfig",
    "Sprt",
    "cusum_monte_carlo",
    "sprt_monte_carlo",
    "wald_expected_n",
]
