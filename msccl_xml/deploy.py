"""The deployable version: a schedule fitted to an export target, per size band, checked and digested.

:func:`deploy` synthesizes and fits; :func:`fit` fits a given result (or schedule); :func:`fit_bands`
assembles bands of different schedules. The fitting policy lives here, once:

* Render every band's program with the target (:meth:`~msccl_xml.targets.Target.render`, which
  checks it). When a program is over one of the target's limits
  (:class:`~synth.errors.RuntimeLimitError`) and a ``resynthesize`` callback is given (the chunk
  count was not fixed by the caller):
* AllToAll whose automatic chunk choice went above 10 per block is re-synthesized with 10;
* a tree collective is re-synthesized with at most ``min(k - 1, target.chunk_cap, bound)`` chunks
  per source (``k // 2`` for a target without a fixed cap), where ``bound`` is what the lower bounds
  of :mod:`msccl_xml.fitcheck` leave a schedule of the same shape (XML nodes per rank, steps per GPU
  pair); a re-synthesis those bounds still rule out goes straight to the next bound without being
  lowered, one that fails in lowering halves; down to 1 chunk. The version then carries the cap and
  a note saying why. With ``min_capped_share`` a re-synthesis far slower than the given schedule
  is refused instead (the caller keeps the given schedule without a program for the target).
* :func:`unbounded_chunk_cap` is the cap the size-aware choice (``--sizes``) uses up front.

Examples
--------
>>> from synth import load_topology, synthesize
>>> from msccl_xml.targets import target
>>> topo = load_topology("ring:4")
>>> v = fit(synthesize("allgather", topo), topo, target("msccl-executor-nccl"))
>>> v.target, len(v.bands), v.bands[0].program[:10], v.capped_chunks
('msccl-executor-nccl', 1, b'<algo name', None)
>>> v.digest == fit(synthesize("allgather", topo), topo, target("msccl-executor-nccl")).digest
True
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from synth import synthesize
from synth.errors import LoopcollError, RuntimeLimitError, ScheduleError
from synth.result import SynthResult
from synth.schedule import Schedule
from synth.simulation import simulator
from synth.topologies.model import Topology

from .fitcheck import Pressure, fit_pressure
from .targets import MscclTarget, SizeBand, Target, target as target_named

__all__ = ["FULL_RANGE", "DeployableVersion", "DeployedBand", "deploy", "fit", "fit_bands", "unbounded_chunk_cap"]

log = logging.getLogger("msccl_xml.deploy")

FULL_RANGE: tuple[SizeBand, ...] = ((0, None),)
"""One band of every size."""

Source = SynthResult | Schedule
Resynthesize = Callable[[int], SynthResult]
#: What a non-strict fit records in a band instead of raising.
_RECORDED = (LoopcollError, OSError, ValueError, RecursionError)
#: AllToAll's chunks per block before its automatic choice of K (docs/exactness.md).
ALLTOALL_FALLBACK_CHUNKS = 10


@dataclass(frozen=True, slots=True)
class DeployedBand:
    """One size band ``min_bytes <= S <= max_bytes`` (``None``: no upper end) of a version.

    ``program`` is the target's checked program text, or ``None`` with ``error`` saying what
    prevents it. ``shares`` is the index of an earlier band whose schedule (the same object) and
    program this band runs: rendered once, with that band's bounds, as the store has always
    written them. ``digest`` is the sha256 of ``program`` (of the schedule JSON when there is none).
    """

    min_bytes: int
    max_bytes: int | None
    schedule: Schedule
    program: bytes | None
    error: str | None
    digest: str
    shares: int | None = None


@dataclass(frozen=True, slots=True)
class DeployableVersion:
    """A fitted, checked, immutable version: per band its schedule and program, and the figures.

    The figures are those of the first band's :class:`~synth.result.SynthResult` (``result``);
    for a given schedule, its algbw on the topology, the optimum its meta records, status
    ``"given"`` and no gap. ``capped_chunks`` and ``note`` say when the policy re-synthesized with
    fewer chunks. :attr:`digest` is the version's identity.
    """

    collective: str
    topology: str
    target: str
    bands: tuple[DeployedBand, ...]
    algbw_GBps: float  # noqa: N815
    optimal_algbw_GBps: float  # noqa: N815
    status: str
    gap_pct: float | None
    result: SynthResult | None = None
    capped_chunks: int | None = None
    note: str | None = None

    @property
    def digest(self) -> str:
        """sha256 over every band's bounds and digest, in order."""
        h = hashlib.sha256()
        for b in self.bands:
            h.update(f"{b.min_bytes}:{'inf' if b.max_bytes is None else b.max_bytes}:{b.digest}\n".encode())
        return h.hexdigest()

    @property
    def schedule(self) -> Schedule:
        """The first band's schedule."""
        return self.bands[0].schedule


def deploy(
    topology: Topology,
    collective: str,
    *,
    target: Target | str,
    bands: Sequence[SizeBand] | None = None,
    chunks: int | None = None,
    warm_from: Source | None = None,
    time_limit_s: float | None = None,
    routing: str = "auto",
    protocol: str = "Simple",
    solver: str = "highs",
    max_steps: int | None = None,
) -> DeployableVersion:
    """Synthesize ``collective`` on ``topology`` and fit it to ``target`` (one version, every band).

    Without ``chunks`` the policy may re-synthesize with fewer chunks (module docstring); with
    ``chunks`` the schedule is used as made, and a limit it misses is the error.

    Raises
    ------
    ScheduleError
        If the synthesis gives no schedule.
    XmlError, PlanError
        If a band's program cannot be made (:class:`~synth.errors.RuntimeLimitError` for a limit).

    >>> from synth import load_topology
    >>> v = deploy(load_topology("ring:4"), "allreduce", target="torch", bands=[(0, 4095), (4096, None)])
    >>> [(b.min_bytes, b.max_bytes, b.shares) for b in v.bands], v.status
    ([(0, 4095, None), (4096, None, 0)], 'optimal')
    """
    tgt = target_named(target) if isinstance(target, str) else target
    coll = cast(Any, collective)
    result: SynthResult = synthesize(coll, topology, chunks=chunks, warm_from=warm_from, max_steps=max_steps,
                                     solver=solver, time_limit_s=time_limit_s, routing=routing)
    _schedule_of(result, f"{collective} on {topology.name}")

    def again(cap: int) -> SynthResult:
        again_result: SynthResult = synthesize(coll, topology, chunks=cap, warm_from=warm_from, routing=routing)
        return again_result

    return fit(result, topology, tgt, bands=FULL_RANGE if bands is None else bands, protocol=protocol,
               resynthesize=None if chunks is not None else again)


def fit(
    source: Source,
    topology: Topology,
    target: Target,
    *,
    bands: Sequence[SizeBand] = FULL_RANGE,
    protocol: str = "Simple",
    resynthesize: Resynthesize | None = None,
    strict: bool = True,
    min_capped_share: float | None = None,
) -> DeployableVersion:
    """Fit one result (or schedule) to ``target`` in every band of ``bands`` (they share its program).

    ``resynthesize(cap)`` makes the schedule again with at most ``cap`` chunks (per block for
    AllToAll); ``None``: no re-synthesis. ``strict``: an error making a program raises; otherwise
    it is recorded in the bands (``program=None``, ``error``) and the schedule is still deployed.
    ``min_capped_share``: a re-synthesized tree schedule below this share of the given one's algbw
    is not taken (the limit is the error, naming both figures): a caller whose executor runs the
    uncapped schedule keeps it rather than deploy a far slower one (``None``: take any).

    Raises
    ------
    ScheduleError
        If ``source`` holds no schedule, or a re-synthesis gives none (``strict``).
    XmlError, PlanError
        If a program cannot be made (``strict``).
    """
    sched = _schedule_of(source, "the result to fit")
    per_band = [(lo, hi, source) for lo, hi in bands]
    try:
        return fit_bands(per_band, topology, target, protocol=protocol)
    except RuntimeLimitError as exc:
        if resynthesize is None and strict:
            raise
        if resynthesize is None:  # recorded as it is: rendering again would only meet the same limit
            return _unrendered(source, sched, bands, topology, target, exc)
        if resynthesize is not None:
            try:
                return _refit(sched, topology, target, bands, protocol, resynthesize, exc, min_capped_share)
            except _RECORDED as refit_exc:
                if strict:
                    raise
                return _unrendered(source, sched, bands, topology, target, refit_exc)
    except _RECORDED:
        if strict:
            raise
    return fit_bands(per_band, topology, target, protocol=protocol, strict=False)


def fit_bands(
    per_band: Sequence[tuple[int, int | None, Source]],
    topology: Topology,
    target: Target,
    *,
    protocol: str = "Simple",
    strict: bool = True,
    share: bool = True,
) -> DeployableVersion:
    """A version of the given bands ``(min_bytes, max_bytes, result or schedule)``, as they are.

    With ``share`` a band whose source is the object of an earlier band runs that band's program
    (:attr:`DeployedBand.shares`); otherwise every band is rendered with its own bounds. No
    re-synthesis; ``strict`` as for :func:`fit`.

    >>> from synth import load_topology, synthesize
    >>> from msccl_xml.targets import target
    >>> topo = load_topology("ring:4")
    >>> a, b = synthesize("allgather", topo), synthesize("allgather", topo, chunks=1)
    >>> v = fit_bands([(0, 1023, a), (1024, None, b)], topo, target("rccl"))
    >>> [band.schedule.nchunks for band in v.bands], v.bands[0].digest != v.bands[1].digest
    ([2, 1], True)
    """
    if not per_band:
        raise ScheduleError(f"nothing to deploy on {topology.name}: no bands")
    made: list[DeployedBand] = []
    seen: dict[int, int] = {}
    for i, (lo, hi, source) in enumerate(per_band):
        sched = _schedule_of(source, f"band {i}")
        first = seen.get(id(source)) if share else None
        if first is not None:
            prev = made[first]
            made.append(DeployedBand(int(lo), None if hi is None else int(hi), prev.schedule, prev.program,
                                     prev.error, prev.digest, first))
            continue
        seen[id(source)] = i
        program, error = _render(sched, topology, target, (int(lo), None if hi is None else int(hi)), protocol,
                                 strict)
        digest = hashlib.sha256(sched.to_json().encode("utf-8") if program is None else program).hexdigest()
        made.append(DeployedBand(int(lo), None if hi is None else int(hi), sched, program, error, digest))
    return _version(per_band[0][2], made, topology, target)


def unbounded_chunk_cap(collective: str, nranks: int, sizes: Sequence[int],
                        target: Target | str = "msccl-executor-nccl") -> int:
    """Most chunks per source for the ``D = inf`` point of ``--sizes`` / ``--schedules pareto``: what
    ``target`` can address and the flow simulator takes at every representative size.

    ForestColl's uncapped optimum can need hundreds of chunks per source (293 on 128 or 256 GPUs
    after ``fail2``, far more on measured capacities); the choice simulates every point and exports
    one program per band, so the point is synthesized with at most this many (it is the exact
    optimum whenever that fits; otherwise ForestColl's best fixed-k schedule, whose gap is
    reported). A tree chunk crosses ``nranks - 1`` GPU hops (twice for AllReduce); slices per
    chunk as :func:`synth.simulation.auto_slices`.

    >>> unbounded_chunk_cap("allgather", 256, [256 << 20, 256 << 28])
    128
    >>> unbounded_chunk_cap("allreduce", 1024, [1 << 20])
    5
    """
    tgt = target_named(target) if isinstance(target, str) else target
    hops = (nranks - 1) * (2 if collective == "allreduce" else 1)

    most = simulator.MAX_SLICE_TRANSFERS  # read at call time (tests lower it)

    def transfers(k: int) -> int:
        return max(simulator.slices_for_chunk(s / (nranks * k)) for s in sizes) * k * nranks * hops

    fixed = tgt.chunk_cap(collective, nranks)
    cap = fixed if fixed is not None else max(1, most // max(1, nranks * hops))
    while cap > 1 and transfers(cap) > most:
        cap -= 1
    return max(cap, 1)


def _refit(sched: Schedule, topology: Topology, target: Target, bands: Sequence[SizeBand], protocol: str,
           resynthesize: Resynthesize, exc: RuntimeLimitError, min_share: float | None) -> DeployableVersion:
    """The policy after ``sched``'s program missed a limit (``exc``); raises when nothing fits."""
    collective, uncapped = sched.collective, sched.nchunks
    if collective == "alltoall":
        if uncapped <= ALLTOALL_FALLBACK_CHUNKS:
            raise exc
        k = ALLTOALL_FALLBACK_CHUNKS
        log.warning("%s; re-synthesizing with %d chunks per block", exc, k)
        capped = resynthesize(k)
        _schedule_of(capped, f"alltoall on {topology.name} with {k} chunks per block")
        version = fit(capped, topology, target, bands=bands, protocol=protocol)
        return _with_note(version, k, f"re-synthesized with {k} chunks per block: the chosen {uncapped} "
                                      f"exceed {target.name}'s limits")
    fixed = target.chunk_cap(collective, topology.nranks)
    if fixed is None:  # no fixed cap (MSCCL++: operations per threadblock): halve the chunks
        cap = max(1, uncapped // 2) if uncapped > 1 else 0
    else:
        cap = min(uncapped - 1, fixed, _pressure(sched, target).chunk_cap(uncapped))
    first: RuntimeLimitError = exc
    uncapped_GBps = sched.algbw_GBps(topology) if min_share is not None else 0.0  # only the share rule reads it
    while cap >= 1:
        log.warning("%s; re-synthesizing with at most %d chunks per source", first, cap)
        capped = resynthesize(cap)
        capped_sched = _schedule_of(capped, f"{collective} on {topology.name} with at most {cap} chunks per source")
        capped_GBps = capped_sched.algbw_GBps(topology) if min_share is not None else 0.0
        if min_share is not None and capped_GBps < min_share * uncapped_GBps:
            raise RuntimeLimitError(
                f"{first}; the schedule re-synthesized with at most {cap} chunks per source reaches "
                f"{capped_GBps:.4g} GB/s, under {min_share:.0%} of this schedule's {uncapped_GBps:.4g} GB/s: "
                f"{target.name} gets no program for it")
        pressure = _pressure(capped_sched, target)
        if not pressure.fits:  # over a limit for sure: no render, straight to what the bound leaves
            first = RuntimeLimitError(f"lowering: {pressure.message}")
            cap = min(cap - 1, pressure.chunk_cap(capped_sched.nchunks))
            continue
        try:
            version = fit(capped, topology, target, bands=bands, protocol=protocol)
        except RuntimeLimitError as again:
            first = again
            cap = min(cap, capped_sched.nchunks) // 2
            continue
        return _with_note(version, cap, f"re-synthesized with at most {cap} chunks per source: the uncapped "
                                        f"schedule's {uncapped} chunks exceed {target.name}'s limits")
    raise RuntimeLimitError(f"{first} (even with 1 chunk per source)")


def _pressure(sched: Schedule, target: Target) -> Pressure:
    """:func:`msccl_xml.fitcheck.fit_pressure` of ``sched`` on an MSCCL ``target`` (nothing checked on others)."""
    if not isinstance(target, MscclTarget):
        return Pressure(math.inf, "none", f"{target.name} is not checked")
    return fit_pressure(sched, target.runtime)


def _render(sched: Schedule, topology: Topology, target: Target, band: SizeBand, protocol: str,
            strict: bool) -> tuple[bytes | None, str | None]:
    """``(program, None)``, or ``(None, error)`` when not ``strict``."""
    try:
        return target.render(sched, topology, band, protocol), None
    except _RECORDED as exc:
        if strict:
            raise
        return None, str(exc) if isinstance(exc, LoopcollError) else f"{type(exc).__name__}: {str(exc)[:400]}"


def _version(source: Source, bands: Sequence[DeployedBand], topology: Topology, target: Target) -> DeployableVersion:
    """The version of ``bands`` with the figures of the first band's ``source``."""
    sched = bands[0].schedule
    if isinstance(source, SynthResult):
        return DeployableVersion(sched.collective, topology.name, target.name, tuple(bands), source.algbw_GBps,
                                 source.optimal_algbw_GBps, source.status.value, source.gap_pct, source)
    algbw = sched.algbw_GBps(topology)
    optimal = float(sched.meta.get("optimal_algbw_GBps", algbw))
    return DeployableVersion(sched.collective, topology.name, target.name, tuple(bands), algbw, optimal, "given",
                             None)


def _unrendered(source: Source, sched: Schedule, bands: Sequence[SizeBand], topology: Topology, target: Target,
                exc: BaseException) -> DeployableVersion:
    """``sched`` in every band without a program, ``exc`` as the bands' error (no second render)."""
    error = str(exc)[:2000] if isinstance(exc, LoopcollError) else f"{type(exc).__name__}: {str(exc)[:400]}"
    digest = hashlib.sha256(sched.to_json().encode("utf-8")).hexdigest()
    made = [DeployedBand(int(lo), None if hi is None else int(hi), sched, None, error, digest, None if i == 0 else 0)
            for i, (lo, hi) in enumerate(bands)]
    return _version(source, made, topology, target)


def _with_note(version: DeployableVersion, cap: int, note: str) -> DeployableVersion:
    return replace(version, capped_chunks=cap, note=note)


def _schedule_of(source: object, what: str) -> Schedule:
    """The schedule of a result (or the schedule itself); :class:`ScheduleError` when there is none."""
    if isinstance(source, Schedule):
        return source
    if isinstance(source, SynthResult):
        if source.schedule is None:
            raise ScheduleError(f"{what}: no schedule ({source.status.value}: {source.message})")
        return source.schedule
    raise ScheduleError(f"{what}: expected a SynthResult or a Schedule, got {type(source).__name__}")
