"""Lower an MSCCL program (or a loopcoll schedule, through :func:`msccl_xml.lower`) to an MSCCL++ plan.

One lowering of schedule semantics is reused: :func:`msccl_xml.lower` turns routes into
threadblocks of send/receive steps with a FIFO per (sender, receiver, channel); this module maps
each of those steps onto MSCCL++ operations (``docs/mscclpp.md`` has the table):

* every FIFO becomes one MSCCL++ connection (a channel on each side, paired by declaration
  order): a **memory channel** when both GPUs share a host, else a **port channel**;
* a message is written by the sender straight into a scratch slot of the receiver that belongs
  to that message alone (``put`` + ``signal`` over a memory channel, ``pws`` over a port
  channel); the receiver ``wait`` s, then consumes the slot: ``recv`` → ``copy``,
  ``recv-reduce-copy`` → ``re`` (reduce), ``recv-copy-send`` → ``copy`` and forward the slot,
  ``recv-reduce-send`` → ``re`` into the slot and forward it, and so on;
* before its first message on a FIFO the sender waits for one credit signal the receiver sends
  when its threadblock starts, so a launch never writes a slot the peer may still be reading
  from the previous launch;
* a cross-threadblock dependency (``depid``/``deps``) becomes a ``sem_release`` after the
  producer step and a ``sem_acquire`` before the consumer step, one counting semaphore per
  (producer, consumer) threadblock pair;
* ``nop`` (``__syncthreads``) separates ops that are not both control ops or that touch
  overlapping local data, as the MSCCL++ DSL does.

Examples
--------
>>> from msccl_xml import BufferKind, Gpu, Program, Protocol, Step, StepType, Threadblock
>>> o = BufferKind.OUTPUT
>>> def gpu(r):
...     return Gpu(r, 0, 2, 0, (Threadblock(0, 1 - r, 1 - r, 0, (
...         Step(0, StepType.SEND, o, r, o, r, 1), Step(1, StepType.RECV, o, 1 - r, o, 1 - r, 1))),))
>>> p = Program(name="ag", proto=Protocol.SIMPLE, nchannels=1, nchunksperloop=2, ngpus=2,
...             coll="allgather", inplace=1, outofplace=0, min_bytes=0, max_bytes=0,
...             gpus=(gpu(0), gpu(1)))
>>> plan = lower(p)
>>> [op.name for op in plan.gpus[0].threadblocks[0].ops]
['signal', 'wait', 'nop', 'put', 'nop', 'signal', 'wait', 'nop', 'copy']
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from msccl_xml import Program, StepType
from msccl_xml import lower as msccl_lower
from synth.collective import COLLECTIVES
from synth.schedule import Schedule
from synth.topologies import Topology

from ._args import need, need_bool, need_int
from .checker import check
from .errors import PlanError, PlanLimitError
from .limits import MAX_CHANNEL, MAX_DEVICE_SEMAPHORES, MAX_OPERATION, MSCCLPP_COMMIT
from .model import BufferRef, ChannelDecl, Op, Plan, PlanGpu, RemoteBuffer, TbChannels, TbRemoteRefs, Threadblock

__all__ = ["lower", "lower_schedule"]

_U64_MAX = 2**64 - 1
_LIM = f"of MSCCL++ (mscclpp@{MSCCLPP_COMMIT[:7]} execution_common.hpp)"
Fifo = tuple[int, int, int]  # (sender, receiver, MSCCL channel)


def lower_schedule(
    schedule: Schedule,
    topology: Topology | None = None,
    *,
    inplace: bool = False,
    name: str | None = None,
    min_message_size: int = 0,
    max_message_size: int = _U64_MAX,
    verify: bool = True,
) -> Plan:
    """The MSCCL++ plan that executes ``schedule``: :func:`msccl_xml.lower`, then :func:`lower`.

    ``topology`` decides the channel type of each GPU pair (memory channel within a host, port
    channel across hosts); without it every pair gets a memory channel (one host).

    Raises
    ------
    PlanError
        If the schedule cannot be lowered (:class:`PlanLimitError` names the MSCCL++ limit).
    """
    need(schedule, Schedule, "schedule")
    if topology is not None:
        need(topology, Topology, "topology")
        if topology.nranks != schedule.nranks:
            raise PlanError(f"topology {topology.name!r} has {topology.nranks} ranks, the schedule {schedule.nranks}")
    need_bool(inplace, "inplace")
    program = msccl_lower(schedule, inplace=inplace, verify=False)
    hosts = None
    if topology is not None:
        hosts = [topology.node(topology.gpu_id(r)).host for r in range(topology.nranks)]
    return lower(program, hosts=hosts, name=name, min_message_size=min_message_size,
                 max_message_size=max_message_size, verify=verify)


def lower(
    program: Program,
    *,
    hosts: Sequence[int | None] | None = None,
    name: str | None = None,
    min_message_size: int = 0,
    max_message_size: int = _U64_MAX,
    verify: bool = True,
) -> Plan:
    """The MSCCL++ plan that executes MSCCL ``program`` (see the module docstring).

    Parameters
    ----------
    program
        An MSCCL program that :func:`msccl_xml.check` finds valid; its in-place flag picks the
        plan's mode.
    hosts
        Host of each rank; pairs on one host talk over memory channels, others over port
        channels. ``None``: one host.
    name
        The plan's ``name`` (MSCCL++ keys its execution contexts by it); default
        ``loopcoll_<coll>_<N>r_<C>c``.
    min_message_size, max_message_size
        The plan's selection range in bytes.
    verify
        Check the result with :func:`mscclpp_plan.check` and raise if it is not valid.

    Raises
    ------
    PlanError
        If the program uses a step MSCCL++ has no counterpart for, or its sends and receives
        do not match.
    PlanLimitError
        If one step needs more than 64 operations or a threadblock more than 16 channels.
    """
    need(program, Program, "program")
    if name is not None:
        need(name, str, "name")
    need_int(min_message_size, "min_message_size")
    need_int(max_message_size, "max_message_size")
    need_bool(verify, "verify")
    if hosts is not None:
        need(hosts, (list, tuple), "hosts")
        for h in hosts:
            if h is not None:
                need_int(h, "hosts entry", lo=-(2**31))
    n, c = program.ngpus, program.nchunksperloop
    coll = program.coll.replace("_", "").lower()
    if coll not in COLLECTIVES:
        raise PlanError(f"program {program.name!r}: collective {program.coll!r} has no MSCCL++ lowering here")
    if c % n and coll in ("allgather", "reducescatter"):
        raise PlanError(f"program {program.name!r}: nchunksperloop {c} is not a multiple of {n} ranks")
    if hosts is not None and len(hosts) != n:
        raise PlanError(f"hosts has {len(hosts)} entries for {n} ranks")
    ic, oc = {"allgather": (c // n, c), "reducescatter": (c, c // n)}.get(coll, (c, c))
    inplace = program.inplace == 1
    sends, recvs = _fifos(program)
    slots = _slots(program, sends, recvs)
    ctype = {f: _channel_type(hosts, f[0], f[1]) for f in sends}
    gpus = []
    for g in program.gpus:
        gpus.append(_lower_gpu(program, g.id, g.s_chunks, ic, oc, sends, recvs, slots, ctype, coll, inplace))
    plan = Plan(
        name=name or f"loopcoll_{coll}_{n}r_{c}c",
        collective=coll,
        protocol="Simple",
        inplace=inplace,
        gpus=tuple(gpus),
        min_message_size=min_message_size,
        max_message_size=max_message_size,
    )
    if verify:
        verdict = check(plan)
        if not verdict.valid:
            raise PlanError(f"lowering {program.name!r} produced an invalid plan (a bug): {verdict.errors[0]}")
    return plan


def _channel_type(hosts: Sequence[int | None] | None, a: int, b: int) -> str:
    if hosts is None:
        return "memory"
    return "memory" if hosts[a] is not None and hosts[a] == hosts[b] else "port"


def _fifos(program: Program) -> tuple[dict[Fifo, list[tuple[int, int, int]]], dict[Fifo, list[tuple[int, int, int]]]]:
    """Per FIFO, the (tb, step, cnt) of its sends on the sender and of its receives on the receiver."""
    sends: dict[Fifo, list[tuple[int, int, int]]] = defaultdict(list)
    recvs: dict[Fifo, list[tuple[int, int, int]]] = defaultdict(list)
    for g in program.gpus:
        for tb in g.threadblocks:
            for k, st in enumerate(tb.steps):
                if st.type is StepType.RES_ADD:
                    raise PlanError(f"gpu {g.id} tb {tb.id} step {k}: step type 'ra' (legacy MSCCL) has no "
                                    "MSCCL++ lowering")
                if st.type.sends:
                    sends[(g.id, tb.send, tb.chan)].append((tb.id, k, st.cnt))
                if st.type.receives:
                    recvs[(tb.recv, g.id, tb.chan)].append((tb.id, k, st.cnt))
    for f in sorted(set(sends) | set(recvs)):
        a, b = sends.get(f, []), recvs.get(f, [])
        if len(a) != len(b) or any(x[2] != y[2] for x, y in zip(a, b)):
            raise PlanError(f"gpu {f[0]} -> gpu {f[1]} channel {f[2]}: {len(a)} sends do not match {len(b)} "
                            "receives (check the MSCCL program first)")
    return dict(sends), dict(recvs)


def _slots(program: Program, sends: dict[Fifo, list], recvs: dict[Fifo, list]) -> dict[tuple[int, int, int], int]:
    """Scratch slot (first chunk) of every receive, keyed (receiver, tb, step); slots follow the
    program's own scratch chunks and are never reused within a launch."""
    slots: dict[tuple[int, int, int], int] = {}
    for g in program.gpus:
        nxt = g.s_chunks
        for tb in g.threadblocks:
            for k, st in enumerate(tb.steps):
                if st.type.receives:
                    slots[(g.id, tb.id, k)] = nxt
                    nxt += st.cnt
    return slots


class _Emitter:
    """Appends ops, inserting ``nop`` where threads of the block must synchronise."""

    def __init__(self, canon: object) -> None:
        self.ops: list[Op] = []
        self.kind: str | None = None  # "control" or "data" of the ops since the last nop
        self.touched: list[tuple[str, int, int, bool]] = []
        self.canon = canon

    def emit(self, op: Op) -> None:
        kind = "control" if op.is_control else "data"
        acc = self._accesses(op)
        if self.kind is not None:
            need = kind != self.kind or (kind == "data" and self._conflict(acc))
            if need:
                self.ops.append(Op("nop"))
                self.touched = []
        self.kind = kind
        self.touched.extend(acc)
        self.ops.append(op)

    def _accesses(self, op: Op) -> list[tuple[str, int, int, bool]]:
        out = []
        for refs, write in ((op.src_buff, False), (op.dst_buff, True)):
            for b in refs:
                if b.type is not None:
                    space, lo = self.canon(b.type, b.index)  # type: ignore[operator]
                    out.append((space, lo, lo + b.size, write))
        return out

    def _conflict(self, acc: list[tuple[str, int, int, bool]]) -> bool:
        for s1, lo1, hi1, w1 in acc:
            for s2, lo2, hi2, w2 in self.touched:
                if s1 == s2 and lo1 < hi2 and lo2 < hi1 and (w1 or w2):
                    return True
        return False


def _lower_gpu(
    program: Program, r: int, s_chunks: int, ic: int, oc: int,
    sends: dict[Fifo, list[tuple[int, int, int]]], recvs: dict[Fifo, list[tuple[int, int, int]]],
    slots: dict[tuple[int, int, int], int], ctype: dict[Fifo, str], coll: str, inplace: bool,
) -> PlanGpu:  # fmt: skip
    gpu = program.gpu(r)
    mine = sorted(f for f in sends if r in (f[0], f[1]))
    flat: dict[str, list[int]] = {"memory": [], "port": []}
    chan_of: dict[Fifo, tuple[str, int]] = {}
    for f in mine:  # one connection per FIFO; both ends list them in the same (sorted) order
        t = ctype[f]
        chan_of[f] = (t, len(flat[t]))
        flat[t].append(f[1] if f[0] == r else f[0])
    rbuf_of: dict[int, int] = {}
    rbufs: list[RemoteBuffer] = []
    for f in mine:
        if f[0] == r and f[1] not in rbuf_of:
            rbuf_of[f[1]] = len(rbufs)
            rbufs.append(RemoteBuffer(rank=f[1], type="s", access_channel_types=(ctype[f],)))
    acquires, releases, nsems = _semaphores(program, r)
    # message k of FIFO f lands in the receiver's slot of its k-th receive
    send_slot: dict[tuple[int, int], int] = {}
    for f, lst in sends.items():
        if f[0] != r:
            continue
        for (tb_id, k, _), (rtb, rk, _) in zip(lst, recvs[f]):
            send_slot[(tb_id, k)] = slots[(f[1], rtb, rk)]
    recv_total = sum(st.cnt for tb in gpu.threadblocks for st in tb.steps if st.type.receives)

    def canon(btype: str, index: int) -> tuple[str, int]:
        if btype == "s":
            return "s", index
        if not inplace:
            return btype, index
        if coll == "allgather" and btype == "i":
            return "o", r * ic + index
        if coll == "reducescatter" and btype == "o":
            return "i", r * oc + index
        return "i", index

    pieces: list[tuple[int, list[list[Op]], tuple[TbChannels, ...], tuple[TbRemoteRefs, ...]]] = []
    for tb in gpu.threadblocks:
        send_f = (r, tb.send, tb.chan) if tb.send >= 0 else None
        recv_f = (tb.recv, r, tb.chan) if tb.recv >= 0 else None
        tb_chans: dict[str, list[int]] = {"memory": [], "port": []}
        local: dict[Fifo, tuple[str, int]] = {}
        for maybe in (send_f, recv_f):
            if maybe is not None and maybe in chan_of:
                t, g = chan_of[maybe]
                if g not in tb_chans[t]:
                    tb_chans[t].append(g)
                local[maybe] = (t, tb_chans[t].index(g))
        steps: list[list[Op]] = []  # the raw ops (no nops yet) of each MSCCL step
        if recv_f is not None and recv_f in local:  # credit: my slots are free for this launch
            t, lc = local[recv_f]
            steps.append([Op("signal", channel_ids=(lc,), channel_type=t)])
        credited = False
        for k, st in enumerate(tb.steps):
            ops: list[Op] = []
            steps.append(ops)
            if (tb.id, k) in acquires:
                ops.extend(_sem_ops("sem_acquire", acquires[(tb.id, k)]))
            t_ = st.type
            slot = slots.get((r, tb.id, k))
            if t_.receives:
                assert recv_f is not None and slot is not None
                t, lc = local[recv_f]
                ops.append(Op("wait", channel_ids=(lc,), channel_type=t))
            src = BufferRef(st.srcoff, st.cnt, type=st.srcbuf.value)
            dst = BufferRef(st.dstoff, st.cnt, type=st.dstbuf.value)
            sl = BufferRef(slot, st.cnt, type="s") if slot is not None else BufferRef(0, 0, type="s")
            # (local result op, its sources, its local destination, what is sent) per step type
            local_op: str | None
            srcs: tuple[BufferRef, ...]
            ldst: BufferRef | None
            out: BufferRef | None
            if t_ is StepType.SEND:
                local_op, srcs, ldst, out = None, (src,), None, src
            elif t_ is StepType.RECV:
                local_op, srcs, ldst, out = "copy", (sl,), dst, None
            elif t_ is StepType.RECV_COPY_SEND:
                local_op, srcs, ldst, out = "copy", (sl,), dst, sl
            elif t_ is StepType.RECV_REDUCE_COPY:
                local_op, srcs, ldst, out = "re", (src, sl), dst, None
            elif t_ is StepType.RECV_REDUCE_SEND:
                local_op, srcs, ldst, out = "re", (sl, src), sl, sl
            elif t_ is StepType.RECV_REDUCE_COPY_SEND:
                local_op, srcs, ldst, out = "re", (src, sl), dst, dst
            elif t_ is StepType.LOCAL_COPY:
                local_op, srcs, ldst, out = "copy", (src,), dst, None
            elif t_ is StepType.REDUCE:
                local_op, srcs, ldst, out = "re", (dst, src), dst, None
            else:  # nop: dependencies only
                local_op, srcs, ldst, out = None, (), None, None
            send: tuple[str, int] | None = None
            remote = None
            if out is not None:
                assert send_f is not None
                send = local[send_f]
                if not credited:
                    ops.append(Op("wait", channel_ids=(send[1],), channel_type=send[0]))
                    credited = True
                remote = BufferRef(send_slot[(tb.id, k)], st.cnt, buffer_id=0)
            reduce_op = "sum" if local_op == "re" else None
            if send is not None and send[0] == "memory" and local_op is not None:
                # fused: compute locally and write the peer's slot in one pass ("res")
                assert ldst is not None and remote is not None
                ops.append(Op("res", srcs, (ldst, remote), channel_type="memory", reduce_op="sum"))
                ops.append(Op("signal", channel_ids=(send[1],), channel_type="memory"))
            else:
                if local_op is not None:
                    assert ldst is not None
                    ops.append(Op(local_op, srcs, (ldst,), reduce_op=reduce_op))
                if send is not None:
                    assert out is not None and remote is not None
                    t, lc = send
                    if t == "memory":
                        ops.append(Op("put", (out,), (remote,), channel_ids=(lc,), channel_type=t))
                        ops.append(Op("signal", channel_ids=(lc,), channel_type=t))
                    else:
                        ops.append(Op("pwsf", (out,), (remote,), channel_ids=(lc,), channel_type=t))
            if (tb.id, k) in releases:
                ops.extend(_sem_ops("sem_release", releases[(tb.id, k)]))
        if max(len(v) for v in tb_chans.values()) > MAX_CHANNEL:
            raise PlanLimitError(f"gpu {r} tb {tb.id}: more than MAX_CHANNEL = {MAX_CHANNEL} channels {_LIM}")
        chans = tuple(TbChannels(t, tuple(ids)) for t, ids in tb_chans.items() if ids)
        refs: tuple[TbRemoteRefs, ...] = ()
        if send_f is not None and send_f in local:
            refs = (TbRemoteRefs(ctype[send_f], (rbuf_of[send_f[1]],)),)
        pieces.append((tb.id, steps, chans, refs))
    # A threadblock longer than MAX_OPERATION runs as a chain of threadblocks, each starting when
    # the previous one has finished (a semaphore per link of the chain).
    nsem = nsems
    first_ids: list[Threadblock] = []
    extra: list[Threadblock] = []
    for tb_id, steps, chans, refs in pieces:
        segments = _segments(steps, canon, f"gpu {r} tb {tb_id}")
        for j, seg in enumerate(segments):
            ops = list(seg)
            if j > 0:
                ops.insert(0, Op("sem_acquire", semaphore_ids=(nsem - 1,)))
            if j < len(segments) - 1:
                ops.append(Op("sem_release", semaphore_ids=(nsem,)))
                nsem += 1
            em = _Emitter(canon)
            for op in ops:
                em.emit(op)
            if len(em.ops) > MAX_OPERATION:
                raise PlanLimitError(f"gpu {r} tb {tb_id}: one step needs {len(em.ops)} operations, more than "
                                     f"MAX_OPERATION = {MAX_OPERATION} {_LIM}")
            new_id = tb_id if j == 0 else len(pieces) + len(extra)
            block = Threadblock(id=new_id, ops=tuple(em.ops), channels=chans, remote_buffer_refs=refs)
            (first_ids if j == 0 else extra).append(block)
    tbs = first_ids + extra
    nsems = nsem
    decls = tuple(ChannelDecl(t, tuple(peers)) for t, peers in flat.items() if peers)
    return PlanGpu(
        id=r,
        input_chunks=ic,
        output_chunks=oc,
        scratch_chunks=s_chunks + recv_total,
        threadblocks=tuple(tbs),
        channels=decls,
        remote_buffers=tuple(rbufs),
        semaphores=(0,) * nsems,
    )


def _sem_ops(name: str, ids: list[int]) -> list[Op]:
    """One op per MAX_DEVICE_SEMAPHORES ids (the executor's limit per operation)."""
    step = MAX_DEVICE_SEMAPHORES
    return [Op(name, semaphore_ids=tuple(ids[k:k + step])) for k in range(0, len(ids), step)]


def _segments(steps: list[list[Op]], canon: object, where: str) -> list[list[Op]]:
    """Pack consecutive steps into runs that fit MAX_OPERATION with their nops and chain ops."""
    budget = MAX_OPERATION - 4  # sem_acquire + nop at the start, nop + sem_release at the end
    segments: list[list[Op]] = [[]]
    for ops in steps:
        trial = _Emitter(canon)
        for op in segments[-1] + ops:
            trial.emit(op)
        if len(trial.ops) > budget and segments[-1]:
            segments.append([])
        segments[-1].extend(ops)
    del where
    return segments


def _semaphores(
    program: Program, r: int
) -> tuple[dict[tuple[int, int], list[int]], dict[tuple[int, int], list[int]], int]:
    """Acquires before (tb, step) and releases after (tb, step), and the semaphore count.

    A dependency already implied by others (transitively, within the GPU) is dropped. The rest
    of consumer ``B``'s dependencies on producer ``A`` are kept as a running maximum over ``B``'s
    steps: each time it grows to step ``i`` of ``A``, ``A`` releases after ``i`` and ``B``
    acquires once, so releases and acquires pair up in order on one counting semaphore.
    """
    gpu = program.gpu(r)
    known = _known_done(program, r)
    acquires: dict[tuple[int, int], list[int]] = defaultdict(list)
    releases: dict[tuple[int, int], list[int]] = defaultdict(list)
    sem_of: dict[tuple[int, int], int] = {}
    for tb in gpu.threadblocks:
        for k, st in enumerate(tb.steps):
            if st.depid < 0 or st.depid == tb.id:
                continue
            a, i = st.depid, st.deps
            before = known.get((tb.id, k - 1), {})
            if before.get(a, -1) >= i:
                continue  # implied: something this block already waited for came after A's step i
            sem = sem_of.setdefault((a, tb.id), len(sem_of))
            acquires[(tb.id, k)].append(sem)
            releases[(a, i)].append(sem)
    return dict(acquires), dict(releases), len(sem_of)


def _known_done(program: Program, r: int) -> dict[tuple[int, int], dict[int, int]]:
    """For each (tb, step): the last step of every other block of the GPU that is sure to have
    finished once the step's dependency is met (its own earlier dependencies, transitively)."""
    gpu = program.gpu(r)
    known: dict[tuple[int, int], dict[int, int]] = {}
    changed = True
    while changed:  # dependencies form a DAG: a few passes reach the fixpoint
        changed = False
        for tb in gpu.threadblocks:
            acc: dict[int, int] = {}
            for k, st in enumerate(tb.steps):
                if st.depid >= 0 and st.depid != tb.id:
                    a, i = st.depid, st.deps
                    for b, j in {**known.get((a, i), {}), a: i}.items():
                        if b != tb.id and acc.get(b, -1) < j:
                            acc[b] = j
                if known.get((tb.id, k)) != acc:
                    known[(tb.id, k)] = dict(acc)
                    changed = True
    return known
