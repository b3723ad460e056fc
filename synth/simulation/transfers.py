"""Per-transfer timings of a simulated collective: what an executor's telemetry would measure.

:func:`simulate_transfers` runs the flow simulator (:func:`synth.simulation.simulate`'s model, ideal
costs) and reports, for every (route, hop) of the schedule, its bytes, when its first slice went on
the wire and when its last slice arrived. The runtime's closed-loop timeline turns these into
``pair`` and ``inject`` telemetry samples.

Examples
--------
>>> from synth.baselines import nccl_ring
>>> from synth.topologies import named_topology
>>> topo = named_topology("ring:4")
>>> tt = simulate_transfers(nccl_ring("allgather", topo, nchannels=1), topo, 4 << 20)
>>> len(tt.transfers) == sum(len(r.hops) for r in nccl_ring("allgather", topo, nchannels=1).routes)
True
>>> all(0.0 <= t.start_s < t.end_s <= tt.time_s for t in tt.transfers)
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from synth.simulation._engine import run_engine
from synth.simulation.simulator import check_inputs, checked_model, costed

if TYPE_CHECKING:
    from synth.schedule import Schedule
    from synth.simulation.costmodel import CostProfile
    from synth.topologies.model import Topology

__all__ = ["Transfer", "TransferTimes", "simulate_transfers"]


@dataclass(frozen=True, slots=True)
class Transfer:
    """One hop of one route: ``bytes`` moved from rank ``src`` to rank ``dst`` over ``path``."""

    route: int
    hop: int
    src: int
    dst: int
    path: tuple[str, ...]
    bytes: float
    start_s: float  # first slice put on the wire
    end_s: float  # last slice arrived


@dataclass(frozen=True, slots=True)
class TransferTimes:
    """Every transfer of one simulated collective and its completion time ``time_s``."""

    time_s: float
    nbytes: float
    transfers: tuple[Transfer, ...]


def simulate_transfers(
    schedule: Schedule,
    topology: Topology,
    nbytes: float,
    *,
    slices_per_chunk: int = 4,
    rtol: float = 3e-4,
    check: bool = True,
    profile: CostProfile | str | None = None,
    executor: str | None = None,
) -> TransferTimes:
    """Simulate ``schedule`` like :func:`synth.simulation.simulate` and keep per-transfer timings.

    ``profile`` / ``executor`` as for :func:`~synth.simulation.simulate` (default ``ideal``); under a
    cost profile every transfer starts after the executor's ``launch_us``.

    Raises :class:`~synth.errors.ScheduleError` on bad arguments or an invalid schedule, as
    :func:`~synth.simulation.simulate` does.
    """
    check_inputs(nbytes, slices_per_chunk, rtol)
    model = checked_model(schedule, topology, slices_per_chunk, check)
    model, launch_s, _, _ = costed(model, topology, schedule, profile, executor)
    slice_bytes = float(nbytes) / (schedule.nranks * schedule.nchunks * slices_per_chunk)
    run = run_engine(model, slice_bytes, rtol)
    assert run.flow_first_start_s is not None and run.flow_last_arrival_s is not None
    chunk_bytes = float(nbytes) / (schedule.nranks * schedule.nchunks)
    out = []
    f = 0
    for i, route in enumerate(schedule.routes):
        for j, hop in enumerate(route.hops):
            out.append(Transfer(i, j, hop.src, hop.dst, hop.path, route.chunks * chunk_bytes,
                                launch_s + float(run.flow_first_start_s[f]), launch_s + float(run.flow_last_arrival_s[f])))
            f += 1
    return TransferTimes(launch_s + run.time_s, float(nbytes), tuple(out))
