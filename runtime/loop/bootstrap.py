"""Version 1 that always starts: the first schedule of a (comm, collective) within a bootstrap budget.

:meth:`runtime.loop.manager.ScheduleManager.bootstrap` first runs a synthesis bounded by
``bootstrap_time_limit_s``. When that budget binds (no schedule, or a time-limited incumbent) the
version 1 it publishes is *provisional*: the time-capped incumbent with its honest status and gap, or,
when there is none, the NCCL-like baseline made here (:func:`fallback_schedule`). The next ``poll``
then synthesizes the optimum under ``time_limit_s`` and publishes it as version 2 when it beats
version 1 (docs/controller.md §6 and §8).

Examples
--------
>>> from synth import load_topology
>>> fallback_schedule("allgather", load_topology("hpn:1x2x4")).collective
'allgather'
>>> fallback_schedule("alltoall", load_topology("hpn:1x2x4")).collective
'alltoall'
"""

from __future__ import annotations

from synth import Schedule, SynthResult, Topology
from synth.baselines import nccl_direct_alltoall, nccl_ring
from synth.result import Status

__all__ = ["BUDGET_REASON", "FALLBACK_REASON", "budget_bound", "fallback_schedule"]

#: The reason of a version 1 that is the NCCL-like baseline (the bootstrap budget gave no schedule).
FALLBACK_REASON = "bootstrap: fallback (NCCL-like baseline; the optimum follows)"
#: The reason of a version 1 that is the synthesis's incumbent when the bootstrap budget ran out.
BUDGET_REASON = "bootstrap: within its budget (the optimum follows)"


def fallback_schedule(collective: str, topology: Topology) -> Schedule:
    """The NCCL-like baseline of ``collective`` on ``topology``: multi-ring for the tree collectives,
    direct (PXN) for AllToAll. Raises :class:`synth.ScheduleError` for a collective it has none for."""
    if collective == "alltoall":
        return nccl_direct_alltoall(topology)
    return nccl_ring(collective, topology)


def budget_bound(result: SynthResult | None, bootstrap_limit_s: float | None, limit_s: float | None) -> bool:
    """Whether the bootstrap budget cut ``result`` short of what ``limit_s`` may reach (so the optimum
    is worth a second synthesis): no result or schedule, or a time-limited one under a tighter budget.

    >>> budget_bound(None, 1.0, 30.0)
    True
    >>> r = SynthResult(status=Status.TIME_LIMIT, message="", schedule=None, algbw_GBps=0.0,
    ...                 optimal_algbw_GBps=1.0, gap_pct=100.0, solve_time_s=1.0)
    >>> budget_bound(r, 30.0, 30.0)
    True
    """
    if result is None or result.schedule is None:
        return True
    if result.status is not Status.TIME_LIMIT or bootstrap_limit_s is None:
        return False
    return limit_s is None or bootstrap_limit_s < limit_s
