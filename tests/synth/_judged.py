"""The status rule of ``synth.result.judge``, checked on a result (shared by the synthesizer tests)."""

from __future__ import annotations

import math

from synth.result import OPTIMAL_RTOL, Status


def assert_judged(status: Status, algbw_GBps: float, optimum_GBps: float, gap_pct: float,  # noqa: N803
                  message: str = "") -> None:
    """``optimal`` iff the algbw reaches the optimum within :data:`OPTIMAL_RTOL` (then gap 0), else
    ``feasible`` with ``gap_pct = 100 · (1 − algbw / optimum) > 0`` (to 1e-7 percentage points: an
    independent LP bound may differ from the synthesizer's in its last digits)."""
    reached = algbw_GBps >= optimum_GBps * (1 - OPTIMAL_RTOL)
    if reached:
        assert status is Status.OPTIMAL and gap_pct == 0.0, (status, gap_pct, message)
    else:
        assert status is Status.FEASIBLE and gap_pct > 0.0, (status, gap_pct, message)
        assert math.isclose(gap_pct, 100.0 * (1.0 - algbw_GBps / optimum_GBps), rel_tol=1e-9,
                            abs_tol=100 * OPTIMAL_RTOL), (gap_pct, message)
