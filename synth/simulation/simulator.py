"""Flow-level simulation of a schedule: pipelined slices, store-and-forward at GPUs, max-min links.

Model
-----
* **Data units.** With ``S`` the algbw numerator (``nbytes``) a chunk is ``S / (N · nchunks)``
  bytes (the :mod:`synth.schedule` convention) and is cut into ``slices_per_chunk`` equal slices.
  Every (route, hop) is a *hop-flow*: a FIFO of the route's ``chunks × slices_per_chunk`` slices,
  sent one after another in order.
* **Dependencies (store-and-forward at GPUs).** Out-tree hop ``u→v`` may send a slice once ``u``
  holds it (the root holds all its data at t = 0); in-tree hop ``u→parent`` once ``u`` has that
  slice from every child in the tree (it then holds the partial sum; leaves start at once); path
  hop ``k+1`` after hop ``k`` delivered the slice. AllReduce: the in-trees into root ``r`` cover
  r's chunks in route order, the out-trees from ``r`` likewise; an out-tree slice leaves ``r``
  once ``r`` has finished reducing the matching in-tree slice. Reduction and copies cost no time.
* **Switches cut through.** A hop's transfer occupies every link of its physical path at once and
  its slice arrives ``sum(latency)`` after its last byte leaves the source: one transfer of ``B``
  bytes over one link of capacity ``C`` and latency ``L`` takes exactly ``L + B / C``. A
  hop-flow keeps sending while earlier slices are still in flight (latency does not throttle it).
* **Sharing.** All transfers on the wire share every link max-min fairly (progressive filling,
  :mod:`synth.simulation._maxmin`), where a hop-flow of a route carrying ``c`` chunks counts as
  ``c`` concurrent chunk transfers (weighted max-min: it gets ``c`` fair shares). Equal shares per
  route instead would make a 2-chunk tree finish twice as late as a 1-chunk tree on the same
  links and leave degraded multi-tree schedules 5–10 % below their bandwidth term; rates are recomputed whenever the set of active transfers
  changes and are constant in between, so the simulation is exact between events.
* **Events.** The loop advances to the earliest slice finish or arrival ``t1`` and processes
  everything due by the last finish or arrival within ``[t1, t1 + rtol · t1]`` as one batch (see
  :mod:`synth.simulation._engine`); ``rtol = 0`` is the exact mode.

Cost profiles
-------------
With a non-ideal ``profile`` (:mod:`synth.simulation.costmodel`) the run adds the executor's
fixed costs: every link's capacity is multiplied by the executor's efficiency for its link class,
every hop's latency grows by ``hop_us`` and the completion time by ``launch_us``. The default
profile ``ideal`` is the pure bandwidth model described here.

Approximations (ideal profile): no per-message or per-slice overheads, no protocol (LL/Simple) effects, no
congestion control dynamics (rates jump to the max-min point instantly), a link's latency applies
once per hop even when many slices queue, GPUs copy and reduce infinitely fast and send on all
their hops at once.

Time-window batching (``rtol``)
-------------------------------
Asymmetric schedules (degraded ForestColl trees) have distinct finish times everywhere: exact
simulation costs one event per slice transfer (3 M events, ~15 min, for a 256-GPU AllGather).
A batch keeps rates constant up to its end ``te``; inside it finish and arrival times are exact
for those rates and bytes are conserved (a hop-flow whose next slice was already available keeps
sending from its true finish time, also several slices per batch). **What is approximated:** a
start made possible by an arrival, a hop-flow falling idle (its share stays reserved, unused) and
the rate re-solve all take effect at ``te``, at most ``rtol · t`` after they are due. Rates are
always a feasible max-min allocation of the transfers counted on the wire, so the simulated algbw
never exceeds the bandwidth term, in any mode.

**Error bound.** Along a chain of ``C`` dependent slice transfers (``C`` = the deepest route's
hop levels + the most slices on one hop-flow bound its length) the delays add up to at most ``C · rtol · T``: if no rate depended
on them (dedicated links, a single transfer) the completion time ``T'`` would satisfy
``T ≤ T' ≤ T / (1 − C · rtol)``. Max-min sharing couples the flows, so a delay can also speed
another flow up: in general ``|T' / T − 1| ≤ C · rtol`` is the stated bound, checked against the
exact mode by the tests on asymmetric schedules, not a theorem. Measured at the default
``rtol = 3e-4``: ForestColl AllGather (max_chunks 10, 4 slices per chunk) on hpn:2x16x8 + fail2
(depth ≤ 51, C ≈ 75) is +0.70 % at 1 MB, +0.044 % at 128 MB and +0.030 % at 1 GB, in 11 k /
18 k / 19 k events instead of 0.5 M / 2.9 M / 3.0 M; on small degraded and random topologies
``|T' / T − 1|`` stayed below ``4 · rtol``.
Symmetric schedules are unaffected (their events are simultaneous, and a batch ends at its last
event, never later). A hop-flow whose slices are all at hand from the start (a single transfer)
stays exact at any ``rtol``.

References
----------
D. Bertsekas, R. Gallager, *Data Networks*, 2nd ed., §6.5.2 (max-min fairness); nccl-tests
``PERFORMANCE.md`` (algbw / busbw).

Examples
--------
>>> from synth.baselines import nccl_ring
>>> from synth.topologies import named_topology
>>> topo = named_topology("ring:4")
>>> res = simulate(nccl_ring("allgather", topo), topo, 1 << 30)
>>> res.bandwidth_term_algbw_GBps
133.33333333333334
>>> 0.99 < res.algbw_GBps / res.bandwidth_term_algbw_GBps <= 1.0
True
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from fractions import Fraction
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from synth.bounds import busbw_GBps
from synth.errors import ScheduleError
from synth.simulation._build import FlowModel, build_model
from synth.simulation._engine import run_engine
from synth.simulation.costmodel import CostProfile, ProfileError, executor_for, link_classes, load_profile

if TYPE_CHECKING:
    from synth._types import NodeId
    from synth.schedule import Schedule
    from synth.topologies.model import Topology

__all__ = ["MAX_SLICE_TRANSFERS", "SimResult", "SimStatus", "auto_slices", "simulate", "simulate_sweep",
           "slices_for_chunk"]


class SimStatus(Enum):
    """Closed set of simulation outcomes (a run that cannot complete raises instead)."""

    COMPLETED = "completed"  # every slice reached every GPU it was due at


@dataclass(frozen=True, slots=True)
class SimResult:
    """Outcome of one simulated collective.

    Attributes
    ----------
    status, message
        What happened (``success`` is derived from ``status``) and one line summarising the run.
    time_s
        Completion time: the last slice arrives at its last GPU.
    algbw_GBps, busbw_GBps
        ``nbytes / time_s`` in 10^9 byte/s, and the nccl-tests bus bandwidth from it.
    bandwidth_term_algbw_GBps
        The schedule's bandwidth-term estimate :meth:`synth.schedule.Schedule.algbw_GBps`; the
        simulated algbw never exceeds it and approaches it for large messages.
    link_utilization
        Per live link ``(src, dst)``: bytes carried / (capacity · ``time_s``), in [0, 1].
    nbytes, slices_per_chunk
        The inputs: algbw numerator in bytes, slices each chunk was cut into.
    events
        Event times the loop processed (batches of slice finishes and arrivals).
    steps
        Slice transfers simulated (hop-flows × slices).
    rate_solves
        Max-min rate computations.
    profile, executor
        The cost profile's name (``ideal``: pure bandwidth model) and the executor kind whose
        costs applied (``""`` under ``ideal``).
    """

    status: SimStatus
    message: str
    time_s: float
    algbw_GBps: float
    busbw_GBps: float
    bandwidth_term_algbw_GBps: float
    link_utilization: Mapping[tuple[NodeId, NodeId], float]
    nbytes: float
    slices_per_chunk: int
    events: int
    steps: int
    rate_solves: int
    profile: str = "ideal"
    executor: str = ""

    @property
    def success(self) -> bool:
        """True when the simulation completed."""
        return self.status is SimStatus.COMPLETED


def check_inputs(nbytes: float, slices_per_chunk: int, rtol: float) -> None:
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float)) or not math.isfinite(nbytes) or nbytes <= 0:
        raise ScheduleError(f"`nbytes` must be a finite number > 0, got {nbytes!r}")
    if isinstance(slices_per_chunk, bool) or not isinstance(slices_per_chunk, int) or slices_per_chunk < 1:
        raise ScheduleError(f"`slices_per_chunk` must be an integer >= 1, got {slices_per_chunk!r}")
    if isinstance(rtol, bool) or not isinstance(rtol, (int, float)) or not 0 <= rtol <= 0.1:
        raise ScheduleError(f"`rtol` must be a number in [0, 0.1], got {rtol!r}")


#: Most slice transfers (Σ over routes of chunks × hops × slices per chunk) one simulation runs:
#: the event loop is linear in them. A ForestColl schedule on measured capacities can have
#: trillions of chunks per source (docs/exactness.md); cap it with ``chunks=`` before simulating.
MAX_SLICE_TRANSFERS = 50_000_000


def _prepare(schedule: Schedule, topology: Topology, slices_per_chunk: int, check: bool) -> tuple[FlowModel, float]:
    model = checked_model(schedule, topology, slices_per_chunk, check)
    return model, _bandwidth_term_GBps(schedule, topology, model, slices_per_chunk)


def checked_model(schedule: Schedule, topology: Topology, slices_per_chunk: int, check: bool) -> FlowModel:
    """The flow model of ``schedule`` after the simulator's input checks (size cap, validation or rank count)."""
    transfers = slices_per_chunk * sum(r.chunks * len(r.hops) for r in schedule.routes)
    if transfers > MAX_SLICE_TRANSFERS:
        raise ScheduleError(
            f"schedule has {schedule.nchunks} chunks per source ({transfers:.3g} slice transfers), above the "
            f"simulator's {MAX_SLICE_TRANSFERS:.0e}: synthesize it with fewer chunks (--chunks C, chunks=C)"
        )
    if check:
        schedule.validate(topology)
    elif topology.nranks != schedule.nranks:
        raise ScheduleError(f"schedule is for {schedule.nranks} ranks but topology {topology.name!r} has {topology.nranks}")
    return build_model(schedule, topology, slices_per_chunk)


def costed(
    model: FlowModel, topology: Topology, schedule: Schedule, profile: CostProfile | str | None, executor: str | None
) -> tuple[FlowModel, float, str, str]:
    """The model with the profile's efficiencies and hop costs applied, its launch cost (s), names."""
    prof = load_profile(profile)
    if prof.is_ideal:
        return model, 0.0, prof.name, ""
    kind = executor or executor_for(schedule)
    cost = prof.cost(kind)
    eff = np.ones(model.link_cap_Bps.size)
    for li, (link, cls) in enumerate(zip(topology.links, link_classes(topology))):
        if cls not in cost.efficiency:
            if model.link_slices[li] > 0:
                raise ProfileError(f"profile {prof.name!r}, executor {kind!r}: no efficiency for link class {cls!r} "
                                   f"(link {link.src}->{link.dst})")
            continue
        eff[li] = cost.efficiency[cls]
    costed = replace(model, link_cap_Bps=model.link_cap_Bps * eff, path_lat_s=model.path_lat_s + cost.hop_us * 1e-6)
    return costed, cost.launch_us * 1e-6, prof.name, kind


def _bandwidth_term_GBps(schedule: Schedule, topology: Topology, model: FlowModel, spc: int) -> float:
    """:meth:`Schedule.algbw_GBps`, same exact arithmetic, from the loads the lowering counted.

    (The schedule's own method walks every hop in Python again: seconds at 256 GPUs.)
    """
    worst = Fraction(0)
    for li in np.flatnonzero(model.link_slices).tolist():
        chunks = int(model.link_slices[li]) // spc
        worst = max(worst, Fraction(chunks) * 8 / topology.exact_capacity(*topology.links[li].key))
    return float(schedule.nranks * (Fraction(schedule.nchunks) / worst))


def _run(
    schedule: Schedule,
    model: FlowModel,
    bw_term_GBps: float,
    nbytes: float,
    spc: int,
    rtol: float,
    costs: tuple[FlowModel, float, str, str] | None = None,
) -> SimResult:
    n = schedule.nranks
    slice_bytes = float(nbytes) / (n * schedule.nchunks * spc)
    sim_model, launch_s, profile_name, kind = costs if costs is not None else (model, 0.0, "ideal", "")
    run = run_engine(sim_model, slice_bytes, rtol)
    time_s = run.time_s + launch_s
    live = model.link_cap_Bps > 0
    util = np.zeros(model.link_cap_Bps.size)
    util[live] = model.link_slices[live] * slice_bytes / (model.link_cap_Bps[live] * time_s)
    utilization = {key: float(min(u, 1.0)) for key, u, ok in zip(model.link_keys, util.tolist(), live.tolist()) if ok}
    algbw = float(nbytes) / time_s / 1e9
    message = (
        f"{schedule.collective} of {float(nbytes):.6g} B on {n} ranks: {time_s * 1e6:.6g} us, "
        f"algbw {algbw:.6g} GB/s ({100.0 * algbw / bw_term_GBps:.4g}% of the bandwidth term), "
        f"{run.events} events, {run.steps} slice transfers"
        + (f", profile {profile_name} ({kind})" if kind else "")
    )
    return SimResult(
        status=SimStatus.COMPLETED,
        message=message,
        time_s=time_s,
        algbw_GBps=algbw,
        busbw_GBps=busbw_GBps(schedule.collective, algbw, n),
        bandwidth_term_algbw_GBps=bw_term_GBps,
        link_utilization=MappingProxyType(dict(sorted(utilization.items()))),
        nbytes=float(nbytes),
        slices_per_chunk=spc,
        events=run.events,
        steps=run.steps,
        rate_solves=run.rate_solves,
        profile=profile_name,
        executor=kind,
    )


def simulate(
    schedule: Schedule,
    topology: Topology,
    nbytes: float,
    *,
    slices_per_chunk: int = 4,
    rtol: float = 3e-4,
    check: bool = True,
    profile: CostProfile | str | None = None,
    executor: str | None = None,
) -> SimResult:
    """Simulate ``schedule`` on ``topology`` for an algbw numerator of ``nbytes`` bytes.

    Parameters
    ----------
    schedule, topology
        What runs where. The schedule is validated on the topology first unless ``check`` is
        false (for schedules already validated; hops on missing or down links still raise).
    nbytes
        ``S`` of the nccl-tests convention, in bytes: AllGather total output (N × per-rank
        input), AllToAll per-rank buffer, ReduceScatter per-rank input, AllReduce buffer.
    slices_per_chunk
        Pipelining depth: every chunk moves as this many independent slices.
    rtol
        Batching window: finishes and arrivals due within ``rtol × t1`` of the earliest pending
        one (at ``t1``) are processed together, starts and rate changes among them up to that much
        late. ``0`` is exact (one event per distinct event time); the completion time stays
        within ``C × rtol`` relative of it, ``C`` the longest chain of dependent slice transfers
        (module docstring, "Error bound"). At most 0.1.
    profile, executor
        Cost profile (a :class:`~synth.simulation.costmodel.CostProfile`, a shipped name such as
        ``"h200"``, or a ``loopcoll.calibration/1`` file); default ``ideal``, the pure bandwidth
        model. ``executor`` overrides the executor kind :func:`~synth.simulation.costmodel.executor_for`
        picks from the schedule.

    Returns
    -------
    SimResult

    Raises
    ------
    ScheduleError
        ``nbytes``, ``slices_per_chunk`` or ``rtol`` (``[0, 0.1]``) out of range; the schedule is invalid on
        the topology (``check``), or a hop crosses a missing or down link.

    See Also
    --------
    simulate_sweep : several sizes, one lowering.

    Notes
    -----
    Cost grows with the events, not the bytes: each event costs numpy work over the path classes
    and the slices it finishes or delivers, plus one max-min solve when the transfers on the wire
    changed; a larger ``rtol`` merges more of them. The model is in the module docstring.

    Examples
    --------
    >>> from synth.schedule import Hop, Route, RouteKind, Schedule
    >>> from synth.topologies import named_topology
    >>> topo = named_topology("ring:2")  # 400 Gbit/s = 50 GB/s, 0.5 us per link
    >>> hop = Hop(0, 1, ("gpu0", "gpu1"))
    >>> routes = (Route(RouteKind.PATH, 0, 1, (hop,), dest=1), Route(RouteKind.PATH, 1, 1, (Hop(1, 0, ("gpu1", "gpu0")),), dest=0))
    >>> res = simulate(Schedule("alltoall", 2, 1, routes), topo, 100_000)  # 50 kB per block
    >>> round(res.time_s * 1e6, 9)  # 0.5 us + 50 kB / 50 GB/s
    1.5
    """
    check_inputs(nbytes, slices_per_chunk, rtol)
    model, bw_term = _prepare(schedule, topology, slices_per_chunk, check)
    costs = costed(model, topology, schedule, profile, executor)
    return _run(schedule, model, bw_term, nbytes, slices_per_chunk, rtol, costs)


def simulate_sweep(
    schedule: Schedule,
    topology: Topology,
    sizes_bytes: Sequence[float],
    *,
    slices_per_chunk: int = 4,
    rtol: float = 3e-4,
    check: bool = True,
    profile: CostProfile | str | None = None,
    executor: str | None = None,
) -> list[SimResult]:
    """:func:`simulate` at each size of ``sizes_bytes``, validating and lowering the schedule once.

    Examples
    --------
    >>> from synth.baselines import nccl_ring
    >>> from synth.topologies import named_topology
    >>> topo = named_topology("nvswitch:4")
    >>> [r.algbw_GBps < r.bandwidth_term_algbw_GBps for r in simulate_sweep(nccl_ring("allgather", topo), topo, [1e3, 1e9])]
    [True, True]
    """
    for nbytes in sizes_bytes:
        check_inputs(nbytes, slices_per_chunk, rtol)
    model, bw_term = _prepare(schedule, topology, slices_per_chunk, check)
    costs = costed(model, topology, schedule, profile, executor)
    return [_run(schedule, model, bw_term, nbytes, slices_per_chunk, rtol, costs) for nbytes in sizes_bytes]


def auto_slices(schedule: Schedule, nbytes: float, *, slice_bytes: float = 4 * 2**20, lo: int = 4, hi: int = 64) -> int:
    """Slices per chunk so that a slice is about ``slice_bytes`` (clamped to ``lo..hi``).

    Runtimes pipeline in small steps (MSCCL's Simple protocol moves a chunk in several slices);
    a fixed slice count would make one huge chunk store-and-forward as a whole.

    >>> from synth.baselines import nccl_ring
    >>> from synth.topologies import named_topology
    >>> sched = nccl_ring("allgather", named_topology("nvswitch:4"), nchannels=1)
    >>> auto_slices(sched, 4 * 128 * 2**20), auto_slices(sched, 2**20)
    (32, 4)
    """
    return slices_for_chunk(nbytes / (schedule.nranks * schedule.nchunks), slice_bytes=slice_bytes, lo=lo, hi=hi)


def slices_for_chunk(chunk_bytes: float, *, slice_bytes: float = 4 * 2**20, lo: int = 4, hi: int = 64) -> int:
    """:func:`auto_slices` for a chunk of ``chunk_bytes`` (before any schedule exists).

    >>> slices_for_chunk(2**20), slices_for_chunk(64 * 2**20), slices_for_chunk(2**40)
    (4, 16, 64)
    """
    return max(lo, min(hi, math.ceil(chunk_bytes / slice_bytes)))
