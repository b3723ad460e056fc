"""Lower a :class:`~synth.schedule.Schedule` to an MSCCL :class:`~msccl_xml.program.Program`.

Passes, in order: routes -> operations with a global order (:mod:`msccl_xml._lower_ops`),
operations -> channels and threadblocks, then dependencies and nops
(:mod:`msccl_xml._lower_assign`), and a final verification with :func:`msccl_xml.checker.check`
that raises if the result is not a valid program for the runtime.

Examples
--------
>>> from synth.schedule import Hop, Route, RouteKind, Schedule
>>> def hop(a, b):
...     return Hop(a, b, (f"gpu{a}", f"gpu{b}"))
>>> ring = Schedule("allgather", 3, 1, tuple(
...     Route(RouteKind.OUT_TREE, r, 1, (hop(r, (r + 1) % 3), hop((r + 1) % 3, (r + 2) % 3)))
...     for r in range(3)))
>>> p = lower(ring)
>>> p.coll, p.nchunksperloop, p.nchannels, [len(g.threadblocks) for g in p.gpus]
('allgather', 3, 1, [2, 2, 2])
"""

from __future__ import annotations

from synth.errors import RuntimeLimitError, XmlError, expect_type
from synth.schedule import Schedule

from ._lower_assign import assign_channels, build_threadblocks
from ._lower_ops import Ops, build_ops
from ._structure import rank_xml_nodes
from .checker import check
from .fitcheck import fit_pressure
from .limits import RuntimeLimits, band_attrs, runtime_limits
from .program import Gpu, Program, Protocol, Threadblock

__all__ = ["lower"]

_PROTOCOLS = {p.value: p for p in Protocol}


def lower(
    schedule: Schedule,
    *,
    protocol: str = "Simple",
    runtime: str = "msccl-executor-nccl",
    inplace: bool = False,
    max_channels: int | None = None,
    name: str | None = None,
    min_bytes: int = 0,
    max_bytes: int = 0,
    verify: bool = True,
) -> Program:
    """The MSCCL program that executes ``schedule``.

    Parameters
    ----------
    schedule
        A schedule; its routes are trusted to satisfy their shapes (``Schedule.validate``).
    protocol
        ``"Simple"``, ``"LL"`` or ``"LL128"``.
    runtime
        Runtime whose limits the program must meet (``"msccl-executor-nccl"``, ``"rccl"``,
        ``"msccl-legacy"``); ``reducescatter`` is spelled ``reduce_scatter`` for the legacy one.
    inplace
        Emit the in-place variant (``inplace="1" outofplace="0"``) instead of the out-of-place
        one. In-place alltoall is not supported.
    max_channels
        Most channels to use; default the runtime's limit. Channels are opened only as needed.
    name
        ``<algo name>``; default ``loopcoll_<coll>_<N>r_<nchunks>c``.
    min_bytes, max_bytes
        Selection range of the algorithm in bytes, both inclusive (``max_bytes=0``: unlimited);
        written as ``runtime`` reads it (:func:`msccl_xml.limits.band_attrs`).
    verify
        Run :func:`msccl_xml.checker.check` on the result (default). Callers that check the
        written XML themselves pass False to avoid checking twice.

    Returns
    -------
    Program
        ``nchunksperloop = nranks · nchunks``; chunk ``k`` of source (or block) ``r`` is chunk
        ``r·nchunks + k`` of the collective's buffer (module :mod:`msccl_xml._lower_ops`).

    Raises
    ------
    XmlError
        If an option is invalid or the result fails the checker.
    RuntimeLimitError
        (an :class:`XmlError`) If a runtime limit cannot be met; the message names the limit and
        what to change (more channels, fewer chunks).

    Notes
    -----
    A route with ``chunks = c`` becomes transfers of ``cnt <= 71`` chunks. Out-trees relay with
    ``rcs`` to one child and ``s`` to the others; in-trees fold children in with ``rrc`` into a
    scratch accumulator and forward with ``rrs``; alltoall paths relay with ``rcs`` through
    scratch. Runs in time linear in the number of steps times channels. The XML names peers only:
    each hop's physical path is dropped, and :func:`msccl_xml.algbw.program_algbw_GBps` assumes
    :func:`msccl_xml.algbw.switch_path` for it. :func:`msccl_xml.to_schedule.program_to_schedule`
    inverts the lowering.

    Examples
    --------
    >>> from synth.schedule import Hop, Route, RouteKind, Schedule
    >>> rs = Schedule("reducescatter", 2, 1, (
    ...     Route(RouteKind.IN_TREE, 0, 1, (Hop(1, 0, ("gpu1", "gpu0")),)),
    ...     Route(RouteKind.IN_TREE, 1, 1, (Hop(0, 1, ("gpu0", "gpu1")),))))
    >>> [st.type.value for g in lower(rs).gpus for tb in g.threadblocks for st in tb.steps]
    ['rrc', 's', 'rrc', 's']
    """
    expect_type(schedule, Schedule, "schedule", XmlError)
    limits = runtime_limits(runtime)
    max_channels, band = _check_options(schedule, limits, runtime, protocol, inplace, max_channels, min_bytes,
                                        max_bytes)
    ops = _build_ops(schedule, limits, runtime, inplace)
    tbs = _place(ops, schedule.nranks, limits, max_channels, runtime)
    program = _program(schedule, ops, tbs, protocol=protocol, runtime=runtime, inplace=inplace, name=name, band=band)
    if verify:
        _verify(program, runtime)
    return program


def _check_options(schedule: Schedule, limits: RuntimeLimits, runtime: str, protocol: str, inplace: bool,
                   max_channels: int | None, min_bytes: int, max_bytes: int) -> tuple[int, tuple[int, int]]:
    """Validate :func:`lower`'s options against ``limits``: (channels to use, the band's XML attributes)."""
    if protocol not in _PROTOCOLS:
        raise XmlError(f"unknown protocol {protocol!r}; expected one of {sorted(_PROTOCOLS)}")
    if max_channels is None:
        max_channels = limits.max_channels
    if not 1 <= max_channels <= limits.max_channels:
        raise XmlError(
            f"max_channels must be in 1..{limits.max_channels} for {runtime}, got {max_channels!r}"
        )
    if min_bytes < 0 or max_bytes < 0:
        raise XmlError(f"min_bytes and max_bytes must be >= 0, got {min_bytes!r}, {max_bytes!r}")
    band = band_attrs(limits, min_bytes, max_bytes)
    coll = schedule.collective
    if inplace and coll == "alltoall":
        raise XmlError("lowering: in-place alltoall is not supported; use inplace=False")
    if not schedule.routes:
        raise XmlError("lowering: the schedule has no routes")
    n, nchunks = schedule.nranks, schedule.nchunks
    fit = (limits.max_offset + 1) // n
    if nchunks > fit:
        raise RuntimeLimitError(
            f"lowering: {n} ranks x {nchunks} chunks = {n * nchunks} chunks per buffer, but {runtime} "
            f"stores chunk offsets as int16 (at most {limits.max_offset}); use at most {fit} chunks per source"
        )
    pressure = fit_pressure(schedule, runtime, max_channels=max_channels, pairs=False)
    if not pressure.fits:  # cheap, before placing every operation: no lowering can fit
        raise RuntimeLimitError(f"lowering: {pressure.message}; a schedule of this shape holds at most "
                                f"{pressure.chunk_cap(schedule.nchunks)} chunks per source")
    return max_channels, band


def _build_ops(schedule: Schedule, limits: RuntimeLimits, runtime: str, inplace: bool) -> Ops:
    """The schedule's operations in their global order, within the runtime's scratch offsets."""
    ops = build_ops(schedule, inplace=inplace, max_cnt=limits.max_cnt)
    scratch = max(ops.scratch.values(), default=0)
    if scratch > limits.max_offset + 1:
        raise RuntimeLimitError(
            f"lowering: a rank relays {scratch} scratch chunks, but {runtime} stores chunk offsets as int16 "
            f"(at most {limits.max_offset}); lower the schedule's nchunks"
        )
    return ops


def _place(ops: Ops, n: int, limits: RuntimeLimits, max_channels: int,
           runtime: str) -> dict[int, tuple[Threadblock, ...]]:
    """Channels and threadblocks within the runtime's step, peer and threadblock limits."""
    budget = limits.max_steps_per_tb
    for _ in range(8):  # nops are added after placement: shrink the budget until they fit
        lanes = assign_channels(ops.ops, ops.chains, max_channels=max_channels, max_steps=budget,
                                max_peers=limits.max_tbs_per_channel, halves=ops.halves)
        tbs = build_threadblocks(lanes, n, max_dep_tb=limits.max_dep_tb)
        longest = max((len(tb.steps) for g in tbs.values() for tb in g), default=0)
        if longest <= limits.max_steps_per_tb:
            break
        budget -= max(1, longest - limits.max_steps_per_tb)
        if budget < 1:
            break
    else:
        longest = limits.max_steps_per_tb + 1
    if longest > limits.max_steps_per_tb:
        raise RuntimeLimitError(
            f"lowering: a threadblock needs {longest} steps (nops included) but {runtime} allows "
            f"{limits.max_steps_per_tb}; lower the schedule's nchunks or allow more channels"
        )
    _check_rank_sizes(tbs, n, limits.max_tbs_per_gpu, limits.max_nodes, runtime)
    return tbs


def _program(schedule: Schedule, ops: Ops, tbs: dict[int, tuple[Threadblock, ...]], *, protocol: str,
             runtime: str, inplace: bool, name: str | None, band: tuple[int, int]) -> Program:
    """The program's GPUs (buffer sizes, threadblocks) and its ``<algo>`` attributes."""
    coll, n, nchunks = schedule.collective, schedule.nranks, schedule.nchunks
    min_bytes_attr, max_bytes_attr = band
    sizes = _buffer_sizes(coll, n, nchunks, inplace)
    gpus = tuple(
        Gpu(id=r, i_chunks=sizes[0], o_chunks=sizes[1], s_chunks=ops.scratch.get(r, 0),
            threadblocks=tbs[r])  # fmt: skip
        for r in range(n)
    )
    nchannels = 1 + max((tb.chan for g in gpus for tb in g.threadblocks), default=0)
    return Program(
        name=name if name is not None else f"loopcoll_{coll}_{n}r_{nchunks}c",
        proto=_PROTOCOLS[protocol],
        nchannels=nchannels,
        nchunksperloop=n * nchunks,
        ngpus=n,
        coll="reduce_scatter" if coll == "reducescatter" and runtime == "msccl-legacy" else coll,
        inplace=int(inplace),
        outofplace=int(not inplace),
        min_bytes=min_bytes_attr,
        max_bytes=max_bytes_attr,
        gpus=gpus,
    )


def _check_rank_sizes(tbs: dict[int, tuple[Threadblock, ...]], n: int, max_tbs: int, max_nodes: int,
                      runtime: str) -> None:
    for gpu in sorted(tbs):
        count = len(tbs[gpu])
        if count > max_tbs:
            raise RuntimeLimitError(
                f"lowering: gpu {gpu} needs {count} threadblocks, {runtime} allows {max_tbs}; "
                "lower the schedule's nchunks or max_channels"
            )
        nodes = rank_xml_nodes(n, tbs[gpu])
        if nodes > max_nodes:
            raise RuntimeLimitError(
                f"lowering: gpu {gpu} needs {nodes} XML nodes (threadblocks and steps), {runtime}'s reader "
                f"allows {max_nodes}; lower the schedule's nchunks"
            )


def _buffer_sizes(coll: str, n: int, nchunks: int, inplace: bool) -> tuple[int, int]:
    total = n * nchunks
    if coll == "allgather":
        return (0, total) if inplace else (nchunks, total)
    if coll == "reducescatter":
        return (total, 0) if inplace else (total, nchunks)
    if coll == "allreduce":
        return (total, 0) if inplace else (total, total)
    return (total, total)


def _verify(program: Program, runtime: str) -> None:
    result = check(program, runtime=runtime)
    if not result.valid:
        raise XmlError(
            "lowering produced an invalid program (a bug in loopcoll): " + "; ".join(result.errors[:5])
        )
