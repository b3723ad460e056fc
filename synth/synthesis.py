"""One entry point that dispatches a collective to its synthesizer: the library's ``synthesize``.

Examples
--------
>>> from synth import load_topology, synthesize
>>> r = synthesize("allgather", load_topology("ring:4"))
>>> r.status.value, round(r.algbw_GBps, 3)
('optimal', 133.333)
"""

from __future__ import annotations

from collections.abc import Sequence

from synth._types import Collective, Rank
from synth.errors import SolverError
from synth.result import SynthResult
from synth.schedule import Schedule
from synth.topologies.communicator import communicator
from synth.topologies.model import Topology

__all__ = ["synthesize"]


def synthesize(
    collective: Collective,
    topo: Topology,
    *,
    chunks: int | None = None,
    warm_from: Schedule | SynthResult | None = None,
    max_steps: int | None = None,
    solver: str = "highs",
    time_limit_s: float | None = None,
    ranks: Sequence[Rank] | None = None,
    relay: bool = False,
) -> SynthResult:
    """Synthesize ``collective`` on ``topo`` with the matching synthesizer.

    ``chunks`` is ``max_chunks`` for the tree collectives and ``nchunks`` (default 10) for AllToAll.
    ``warm_from`` is a previous :class:`SynthResult` (its in-memory warm state lets AllToAll take
    the certified local repair) or a :class:`Schedule` (e.g. read back from a file).
    ``ranks`` runs the collective on a communicator of these global ranks of ``topo`` (same as
    passing ``topo.communicator(ranks, relay=relay)``): the schedule's ranks are ``0..k-1`` in the
    order given and its ``meta["global_ranks"]`` maps them back; the other GPUs forward data only
    with ``relay=True``. A warm start must come from the same communicator.

    >>> from synth import load_topology
    >>> r = synthesize("allgather", load_topology("ring:6"), ranks=[0, 1, 2])
    >>> r.schedule.nranks, r.schedule.meta["global_ranks"]
    (3, [0, 1, 2])
    """
    if chunks is not None and chunks < 1:
        raise SolverError(f"--chunks must be >= 1, got {chunks!r}")
    if ranks is not None:
        topo = communicator(topo, ranks, relay=relay)
    elif relay:
        raise SolverError("relay=True needs ranks (the communicator whose non-members relay)")
    if collective == "alltoall":
        from synth.alltoall_cg import synthesize_alltoall

        return synthesize_alltoall(
            topo,
            nchunks=10 if chunks is None else chunks,
            max_steps=max_steps,
            solver=solver,
            time_limit_s=time_limit_s,
            warm_start=warm_from,
        )
    from synth import forestcoll_warm

    fn = {
        "allgather": forestcoll_warm.synthesize_allgather,
        "reducescatter": forestcoll_warm.synthesize_reducescatter,
        "allreduce": forestcoll_warm.synthesize_allreduce,
    }.get(collective)
    if fn is None:
        raise SolverError(f"unknown collective {collective!r}")
    warm_schedule = warm_from.schedule if isinstance(warm_from, SynthResult) else warm_from
    return fn(topo, max_chunks=chunks, warm_start=warm_schedule)
