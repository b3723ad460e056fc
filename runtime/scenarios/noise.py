"""Seeded timing noise for simulated telemetry: lognormal jitter plus rare heavy-tail outliers.

Real GPU timing of one transfer varies by several percent with heavy tails (issue 32). The model
multiplies each sample's ``busy_s`` independently by ``exp(σ·Z)`` (``Z`` standard normal: a
lognormal factor of median 1) and, with probability ``outlier_fraction``, by ``outlier_factor``
on top (a sample that took that many times longer: a preemption, a late launch). Bytes, ranks and
every other field are unchanged. The stream is reproducible from ``seed`` and the order of samples.

Examples
--------
>>> noise = TimingNoise(sigma=0.05, outlier_fraction=0.01, outlier_factor=3.0, seed=7)
>>> s = {"kind": "pair", "src": 0, "dst": 1, "bytes": 1000, "busy_s": 1e-3}
>>> a = noise.apply([s] * 4)
>>> [round(x["busy_s"] / 1e-3, 3) for x in a] == [round(x["busy_s"] / 1e-3, 3)
...     for x in TimingNoise(0.05, 0.01, 3.0, seed=7).apply([s] * 4)]   # same seed, same stream
True
>>> s["busy_s"], all(x["bytes"] == 1000 for x in a)   # inputs are not modified
(0.001, True)
>>> TimingNoise(0.0).apply([s])[0]["busy_s"]   # σ 0, no outliers: unchanged
0.001
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from runtime.errors import ProfileError

__all__ = ["TimingNoise"]


@dataclass(slots=True)
class TimingNoise:
    """Multiplicative noise on ``busy_s``: lognormal ``sigma`` (relative) and outliers ``fraction × factor``."""

    sigma: float
    outlier_fraction: float = 0.0
    outlier_factor: float = 3.0
    seed: int = 0
    _rng: np.random.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for name, lo, hi in (("sigma", 0.0, 1.0), ("outlier_fraction", 0.0, 1.0), ("outlier_factor", 1.0, math.inf)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (lo <= v <= hi):
                raise ProfileError(f"noise: `{name}` must be a number in [{lo:g}, {hi:g}], got {v!r}")
        self._rng = np.random.default_rng(self.seed)

    def factors(self, n: int) -> np.ndarray:
        """The next ``n`` multiplicative factors of the stream (all 1.0 for a noise-free model).

        >>> TimingNoise(0.1, seed=1).factors(3).round(3).tolist() == TimingNoise(0.1, seed=1).factors(3).round(3).tolist()
        True
        """
        f = np.exp(self.sigma * self._rng.standard_normal(n)) if self.sigma > 0 else np.ones(n)
        if self.outlier_fraction > 0:
            f = np.where(self._rng.random(n) < self.outlier_fraction, f * self.outlier_factor, f)
        return f

    def apply(self, samples: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Copies of ``samples`` with ``busy_s`` scaled by the next factors of the stream."""
        rows = [dict(s) for s in samples]
        for row, f in zip(rows, self.factors(len(rows))):
            row["busy_s"] = float(row["busy_s"]) * float(f)
        return rows
