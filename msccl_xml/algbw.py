"""Bandwidth-term algbw of an MSCCL program on a topology (nccl-tests convention).

Every send-type step moves ``cnt`` chunks from its GPU to its threadblock's send peer. One chunk
is ``S / nchunksperloop`` bytes, where ``S`` is the algbw numerator of the collective (reference
§7.1 and ``docs/topology.md``): the AllGather output, the ReduceScatter input, the AllToAll
per-rank buffer, the AllReduce buffer; this is exactly the byte count the runtime divides into
``nchunksperloop`` chunks. A transfer follows its GPU pair's route, :func:`synth.routing.pair_route`
(the executor's routing: direct link, else host switch, else the network path; docs/topology.md).
With ``n_a`` chunks on link ``a`` of capacity ``c_a`` GB/s the bandwidth term is
``T = max_a n_a · S / (nchunksperloop · c_a)``, hence ``algbw = nchunksperloop / max_a(n_a/c_a)``.
For AllReduce the reduce phase (transfers of partial sums) runs before the copy phase (transfers
of full sums), so their two terms add up, as in :meth:`synth.schedule.Schedule.rate_GBps`. What a
transfer carries comes from a symbolic execution, so a reduction done by a plain receive into
scratch followed by a local ``re`` (msccl-tools' allpairs) is classed like one done by ``rrc``.

Examples
--------
>>> from msccl_xml.program import BufferKind, Gpu, Program, Protocol, Step, StepType, Threadblock
>>> from synth.topologies import load_topology
>>> o = BufferKind.OUTPUT
>>> def gpu(r):
...     return Gpu(r, 0, 2, 0, (Threadblock(0, 1 - r, 1 - r, 0, (
...         Step(0, StepType.SEND, o, r, o, r, 1), Step(1, StepType.RECV, o, 1 - r, o, 1 - r, 1))),))
>>> p = Program(name="ag", proto=Protocol.SIMPLE, nchannels=1, nchunksperloop=2, ngpus=2,
...             coll="allgather", inplace=1, outofplace=0, min_bytes=0, max_bytes=0,
...             gpus=(gpu(0), gpu(1)))
>>> program_algbw_GBps(p, load_topology("nvswitch:2"))
720.0
"""

from __future__ import annotations

from collections import defaultdict

from synth.errors import XmlError, expect_type
from synth.routing import pair_route
from synth.topologies import Topology

from ._layout import canonical_coll, layout_for
from ._matching import _endpoints, match_problems
from ._simulate import trace
from .program import Program

__all__ = ["program_algbw_GBps", "program_link_loads", "program_phase_loads", "switch_path"]


def switch_path(topology: Topology, src: str, dst: str) -> tuple[str, ...]:
    """The path a transfer ``src`` → ``dst`` takes: the pair's route (:func:`synth.routing.pair_route`).

    Raises
    ------
    XmlError
        If the pair has no route (no switch-only path over live links).

    Examples
    --------
    >>> from synth.topologies import load_topology
    >>> switch_path(load_topology("hpn:1x2x2"), "gpu0", "gpu2")
    ('gpu0', 'tor0.0', 'gpu2')
    """
    expect_type(topology, Topology, "topology", XmlError)
    expect_type(src, str, "src", XmlError)
    expect_type(dst, str, "dst", XmlError)
    path = pair_route(topology, src, dst) if src != dst else None
    if path is None:
        raise XmlError(
            f"topology {topology.name!r}: no path {src}->{dst} through switches only "
            "(the program sends between GPUs that are not switch-connected)"
        )
    return path


def program_phase_loads(program: Program, topology: Topology) -> dict[str, dict[tuple[str, str], int]]:
    """Link loads split into the ``"reduce"`` phase (partial sums) and the ``"copy"`` phase.

    For an allreduce that runs cleanly, each transferred chunk is classed by its symbolic value:
    a full sum of all ranks' contributions is a copy, anything else a partial sum. Otherwise a
    send is classed by the receive it pairs with (the k-th send on a connection pairs with the
    k-th receive): a reducing receive makes it a reduce; an unmatched send counts as
    a copy.
    """
    if topology.nranks != program.ngpus:
        raise XmlError(
            f"topology {topology.name!r} has {topology.nranks} ranks but the program has "
            f"ngpus={program.ngpus}"
        )
    per_pair = _chunks_by_value(program)
    if per_pair is None:
        per_pair = _chunks_by_step_type(program)
    out: dict[str, dict[tuple[str, str], int]] = {"reduce": defaultdict(int), "copy": defaultdict(int)}
    for (phase, a, b), chunks in sorted(per_pair.items()):
        path = switch_path(topology, topology.gpu_id(a), topology.gpu_id(b))
        for key2 in zip(path[:-1], path[1:]):
            out[phase][key2] += chunks
    return {phase: dict(sorted(loads.items())) for phase, loads in out.items()}


def _chunks_by_value(program: Program) -> dict[tuple[str, int, int], int] | None:
    """Chunks per (phase, sender, receiver) of a cleanly running allreduce, else ``None``."""
    if canonical_coll(program.coll) != "allreduce":
        return None
    layout, problem = layout_for(program, program.inplace == 1)
    if problem or match_problems(program):
        return None
    transfers, errors = trace(program, layout)
    if errors:
        return None
    n = program.ngpus
    per_pair: dict[tuple[str, int, int], int] = defaultdict(int)
    for t in transfers:
        for value in t.values:
            full = bool(value) and value == tuple((q, value[0][1]) for q in range(n))  # type: ignore[index]
            per_pair[("copy" if full else "reduce", t.sender, t.receiver)] += 1
    return per_pair


def _chunks_by_step_type(program: Program) -> dict[tuple[str, int, int], int]:
    sends, _, _ = _endpoints(program)
    receive_reduces: dict[tuple[int, int, int], list[bool]] = defaultdict(list)
    for gpu in program.gpus:
        for tb in gpu.threadblocks:
            if tb.recv < 0:
                continue
            for step in tb.steps:
                if step.type.receives:
                    receive_reduces[(tb.recv, gpu.id, tb.chan)].append(step.type.reduces)
    per_pair: dict[tuple[str, int, int], int] = defaultdict(int)
    for key, endpoints in sends.items():
        a, b, _ = key
        kinds = receive_reduces.get(key, [])
        for k, (_, _, _, cnt) in enumerate(endpoints):
            phase = "reduce" if k < len(kinds) and kinds[k] else "copy"
            per_pair[(phase, a, b)] += cnt
    return per_pair


def program_link_loads(program: Program, topology: Topology) -> dict[tuple[str, str], int]:
    """Chunks each physical link carries in one run of ``program`` (unused links absent).

    Raises
    ------
    XmlError
        If the topology's rank count differs from ``ngpus`` or a transfer has no switch path.

    Examples
    --------
    >>> from synth.topologies import load_topology
    >>> from msccl_xml.program import Program, Protocol
    >>> program_link_loads(Program(name=None, proto=Protocol.LL, nchannels=1, nchunksperloop=1,
    ...     ngpus=2, coll="allreduce", inplace=1, outofplace=0, min_bytes=0, max_bytes=0,
    ...     gpus=()), load_topology("ring:2"))
    {}
    """
    expect_type(program, Program, "program", XmlError)
    expect_type(topology, Topology, "topology", XmlError)
    if topology.nranks != program.ngpus:
        raise XmlError(
            f"topology {topology.name!r} has {topology.nranks} ranks but the program has "
            f"ngpus={program.ngpus}"
        )
    merged: dict[tuple[str, str], int] = defaultdict(int)
    for phase in program_phase_loads(program, topology).values():
        for key, chunks in phase.items():
            merged[key] += chunks
    return dict(sorted(merged.items()))


def program_algbw_GBps(program: Program, topology: Topology) -> float:  # noqa: N802
    """Bandwidth-term algbw of ``program`` on ``topology`` in GB/s (10^9 byte/s).

    Returns
    -------
    float
        ``nchunksperloop / max_a(n_a / c_a)``; ``inf`` if the program sends nothing.

    Raises
    ------
    XmlError
        As :func:`program_link_loads`.

    Notes
    -----
    Latency and the per-step pipelining of the runtime are ignored: this is the throughput bound
    the schedule's link loads allow. One breadth-first search per communicating GPU pair.

    Examples
    --------
    >>> from synth.topologies import load_topology
    >>> from msccl_xml.program import Program, Protocol
    >>> program_algbw_GBps(Program(name=None, proto=Protocol.LL, nchannels=1, nchunksperloop=1,
    ...     ngpus=2, coll="allreduce", inplace=1, outofplace=0, min_bytes=0, max_bytes=0,
    ...     gpus=()), load_topology("ring:2"))
    inf
    """
    expect_type(program, Program, "program", XmlError)
    expect_type(topology, Topology, "topology", XmlError)
    phases = program_phase_loads(program, topology)
    if program.coll != "allreduce":
        merged: dict[tuple[str, str], int] = defaultdict(int)
        for loads in phases.values():
            for key, chunks in loads.items():
                merged[key] += chunks
        phases = {"all": dict(merged)}
    # AllReduce: the reduce phase, then the copy (broadcast) phase: their terms add up.
    worst = 0.0
    for loads in phases.values():
        worst += max((chunks * 8 / float(topology.exact_capacity(a, b)) for (a, b), chunks in loads.items()), default=0.0)
    return float("inf") if worst == 0 else program.nchunksperloop / worst
