"""One :func:`~synth.alltoall_cg.synthesize_alltoall` call as asked, and its time limit.

The limit is checked between the phases that do not stop midway (the setup of the path pool, a
column-generation iteration, the rounding) and while the schedule is built (``_schedule.make_routes``).

>>> from synth.topologies import load_topology
>>> ask = make_ask(16, "highs", None, (10, 32, "nchunks"), 1.0, None)
>>> ask.deadline is None and ask.end is None
True
>>> check_end(load_topology("ring:4"), ask, "anywhere", None)  # no limit: never raises
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from synth.alltoall_cg._schedule import build_deadline, schedule_reserve_s
from synth.errors import TimeLimitError
from synth.topologies.model import Topology

__all__ = ["Ask", "check_end", "limit_error", "make_ask"]


@dataclass(frozen=True, slots=True)
class Ask:
    """What one :func:`synthesize_alltoall` call asks for, checked (``first``: chunks tried first)."""

    solver: str
    max_steps: int | None
    first: int
    cap_k: int
    cap_name: str
    rounding_budget_s: float
    start: float
    deadline: float | None  # of the column generation and the rounding: the limit less the schedule's reserve
    end: float | None  # the time limit itself; building the schedule may pass it by SCHEDULE_GRACE_S


def make_ask(n_gpus: int, solver: str, max_steps: int | None, chunking: tuple[int, int, str],
              rounding_budget_s: float, time_limit_s: float | None) -> Ask:
    """The checked call, timed from now: the column generation and the rounding end
    :func:`~synth.alltoall_cg._schedule.schedule_reserve_s` before the limit, to build the schedule."""
    start = time.perf_counter()
    end = None if time_limit_s is None else start + float(time_limit_s)
    deadline = None if end is None or time_limit_s is None else end - schedule_reserve_s(n_gpus, time_limit_s)
    return Ask(solver, max_steps, *chunking, rounding_budget_s, start, deadline, end)


def limit_error(topology: Topology, ask: Ask, where: str, bound_algbw: float | None,
                optimum: bool = False) -> TimeLimitError:
    """The :class:`TimeLimitError` of a limit (and its grace) reached ``where``, with the LP's bound if any.

    >>> from synth.topologies import load_topology
    >>> ask = make_ask(16, "highs", None, (10, 32, "nchunks"), 1.0, 3.0)
    >>> str(limit_error(load_topology("ring:4"), ask, "somewhere", 12.5)).split(" after ")[0]
    "alltoall on 'ring-4': time limit of 3 s (and its grace) reached somewhere"
    """
    bound = "" if bound_algbw is None else f"; LP {'optimum' if optimum else 'upper bound'} {bound_algbw:.6g} GB/s"
    return TimeLimitError(f"alltoall on {topology.name!r}: time limit of {(ask.end or 0) - ask.start:g} s (and its "
                          f"grace) reached {where} after {time.perf_counter() - ask.start:.1f} s{bound}",
                          upper_algbw_GBps=bound_algbw)


def check_end(topology: Topology, ask: Ask, where: str, bound_algbw: float | None, build_s: float = 0.0,
              optimum: bool = False) -> None:
    """Raise :func:`limit_error` at once when the limit (and its grace) has passed, or would pass before an
    estimated ``build_s`` of schedule building: the phases between the checks do not stop midway, so at 2048
    GPUs a 3 s limit otherwise ran 29 s before building failed."""
    stop = build_deadline(ask.end)
    now = time.perf_counter()
    if stop is None or now + build_s <= stop:
        return
    more = f" (and ~{build_s:.0f} s more to build the schedule)" if build_s and now <= stop else ""
    raise limit_error(topology, ask, where + more, bound_algbw, optimum)
