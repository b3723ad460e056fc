"""Argument checks shared by the AllToAll and AllToAllv column-generation entry points."""

from __future__ import annotations

import math

from synth.errors import SolverError
from synth.solvers import LP_SOLVERS
from synth.topologies.model import Topology


def check_cg_args(func: str, collective: str, topology: object, nchunks: object, max_steps: object,
                  solver: object, time_limit_s: object) -> None:
    """Raise :class:`~synth.errors.SolverError` naming the first bad argument of ``func``.

    >>> check_cg_args("f", "AllToAll", None, 1, None, "highs", None)
    Traceback (most recent call last):
    synth.errors.SolverError: f needs a Topology, got NoneType
    """
    if not isinstance(topology, Topology):
        raise SolverError(f"{func} needs a Topology, got {type(topology).__name__}")
    if topology.nranks < 2:
        raise SolverError(
            f"topology {topology.name!r} has {topology.nranks} GPU(s); {collective} needs at least 2")
    if isinstance(nchunks, bool) or not isinstance(nchunks, int) or nchunks < 1:
        raise SolverError(f"nchunks must be an integer >= 1, got {nchunks!r}")
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
        raise SolverError(f"max_steps must be None or an integer >= 1, got {max_steps!r}")
    if solver not in LP_SOLVERS:
        raise SolverError(f"unknown LP solver {solver!r}; allowed: {', '.join(LP_SOLVERS)}")
    if time_limit_s is not None and (isinstance(time_limit_s, bool) or not isinstance(time_limit_s, (int, float))
                                     or not math.isfinite(time_limit_s) or time_limit_s <= 0):
        raise SolverError(f"time_limit_s must be None or a finite number of seconds > 0, got {time_limit_s!r}")
