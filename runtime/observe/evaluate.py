"""Scoring detections against injected truth (tests and ``benchmarks/observe.py``).

A detected period matches an injected one when they overlap by at least half of the shorter of the two;
precision = matched detections / detections, recall = matched injections / injections (1.0 when empty).

>>> score_periods([(0.0, 10.0)], [(4.0, 20.0)])
(1.0, 1.0)
>>> score_periods([(0.0, 10.0)], [(8.0, 20.0)])
(0.0, 0.0)
>>> score_sets({1, 2}, {2, 3})
(0.5, 0.5)
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

__all__ = ["periods_match", "score_periods", "score_sets"]


def periods_match(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Overlap of ``a`` and ``b`` ≥ half the shorter one's length."""
    overlap = min(a[1], b[1]) - max(a[0], b[0])
    return overlap > 0 and overlap >= 0.5 * min(a[1] - a[0], b[1] - b[0])


def score_periods(detected: Sequence[tuple[float, float]], injected: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(precision, recall) of detected against injected periods."""
    tp_d = sum(1 for d in detected if any(periods_match(d, i) for i in injected))
    tp_i = sum(1 for i in injected if any(periods_match(d, i) for d in detected))
    return (tp_d / len(detected) if detected else 1.0, tp_i / len(injected) if injected else 1.0)


def score_sets(detected: Collection[int], injected: Collection[int]) -> tuple[float, float]:
    """(precision, recall) of a detected set against the injected set."""
    tp = len(set(detected) & set(injected))
    return (tp / len(detected) if detected else 1.0, tp / len(injected) if injected else 1.0)
