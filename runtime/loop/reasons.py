"""Why the detector flagged a schedule, in words (the ``flag`` log record and a version's ``reason``).

Examples
--------
>>> _links(["a", "b"])
'a, b'
"""

from __future__ import annotations

from collections.abc import Sequence

from runtime.loop.detector import Verdict
from runtime.loop.estimator import LinkEstimate

__all__ = ["REASON_LINKS", "flag_reason"]

#: Links a flag reason names per list (bottleneck cut, degraded links); the rest are counted.
REASON_LINKS = 4


def _links(keys: Sequence[str]) -> str:
    more = f" and {len(keys) - REASON_LINKS} more" if len(keys) > REASON_LINKS else ""
    return ", ".join(keys[:REASON_LINKS]) + more


def flag_reason(verdict: Verdict, estimates: Sequence[LinkEstimate], *, snap: float = 0.02) -> str:
    """Why the detector flagged a schedule, in words that keep apart the *bottleneck-cut* links it
    checked (whose slack moved by more than γ) and the *degraded* links whose estimate fell (more than
    ``snap`` below nominal, lowest share first): a cut link is where the schedule feels a fault,
    not necessarily where it is.

    >>> from runtime.loop.detector import detect
    >>> from synth import CutLink
    >>> loads = {("gpu0", "tor0.0"): 2, ("gpu3", "tor0.1"): 2}
    >>> v = detect(loads, (CutLink("gpu3", "tor0.1", 0.0),), {("gpu0", "tor0.0"): 50.0, ("gpu3", "tor0.1"): 400.0},
    ...            gamma=0.1)
    >>> est = [LinkEstimate("gpu0", "tor0.0", 400.0, 50.0, 9, 50.0, 1.0)]
    >>> print(flag_reason(v, est))
    detector: bottleneck cut {gpu3->tor0.1} off its slack by more than gamma 0.1; degraded links: gpu0->tor0.0 (estimated 50 of 400 Gbit/s)
    """
    if not verdict.deviations and verdict.deciding:  # a link the schedule uses is down
        return "detector: link(s) in use down: " + _links([f"{a}->{b} (0 Gbit/s)" for a, b in verdict.deciding])
    cut = _links([f"{a}->{b}" for a, b in verdict.deciding])
    head = f"detector: bottleneck cut {{{cut}}} off its slack by more than gamma {verdict.gamma:.4g}" if cut \
        else f"detector: {verdict.message}"
    low = sorted((e for e in estimates if e.estimate_gbps < (1.0 - snap) * e.nominal_gbps),
                 key=lambda e: (e.estimate_gbps / e.nominal_gbps, e.src, e.dst))
    degraded = _links([f"{e.src}->{e.dst} (estimated {e.estimate_gbps:.4g} of {e.nominal_gbps:.4g} Gbit/s)"
                       for e in low]) or "none estimated below nominal"
    return f"{head}; degraded links: {degraded}"
