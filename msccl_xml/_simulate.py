"""Symbolic execution of an MSCCL program: progress, data races and chunk contents.

Model:

* every threadblock runs its steps in order; a step with ``depid=d, deps=k`` waits until tb ``d``
  of the same GPU has published a flag ``>= k`` (flags are written only by ``hasdep=1`` steps);
* a receive waits for its matching send on the (sender, receiver, channel) FIFO; sends are
  buffered (never wait for the receiver) unless ``fifo_depth`` bounds the number of messages in
  flight per connection;
* threadblocks that can no longer progress when nothing else can are deadlocked;
* happens-before is tracked with vector clocks (program order, dependency flags, send->recv); two
  accesses to one chunk of a GPU by different threadblocks, at least one a write, that are not
  ordered are a data race, since the hardware runs threadblocks concurrently. Without races the
  final memory does not depend on the interleaving, so one simulated order decides the
  postcondition;
* vector clocks take (threadblocks)^2 entries: above ``FULL_CLOCK_ENTRIES`` (a 256-GPU AllToAll
  has ~10^5 threadblocks) each threadblock keeps entries for its own GPU's threadblocks only and
  messages carry no clock, so only orderings within a GPU (program order and dependency flags)
  count. That relation is a subset of happens-before: a program it finds race-free is race-free,
  but a race it reports may be ordered through other GPUs, and the message says so.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._layout import Layout, Slot, Value, combine, describe_mismatch
from ._simfast import FastMemory
from .program import BufferKind, Gpu, Program, Step, StepType, Threadblock

__all__ = ["Transfer", "simulate", "trace"]

Access = tuple[int, int, str]  # (tb index, step ordinal 1.., place)


@dataclass(frozen=True, slots=True)
class Transfer:
    """One matched send/receive: ``cnt`` chunks from ``sender`` to ``receiver`` on ``chan``.

    ``values`` holds the symbolic value of each chunk sent (``None``: uninitialised).
    """

    sender: int
    receiver: int
    chan: int
    values: tuple[Value, ...]


@dataclass(slots=True)
class _Msg:
    values: Any  # list[Value] (full run) or the int64 value ids of the vectorised run
    clock: np.ndarray
    place: str
    via: list[tuple[str, ...]]


@dataclass(slots=True)
class _State:
    layout: Layout | None
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    mem: dict[tuple[int, Slot], Value] = field(default_factory=dict)
    writer: dict[tuple[int, Slot], tuple[str, ...]] = field(default_factory=dict)
    out_via: list[tuple[str, ...]] = field(default_factory=list)
    last_write: dict[tuple[int, Slot], Access] = field(default_factory=dict)
    reads: dict[tuple[int, Slot], list[Access]] = field(default_factory=dict)
    races: int = 0
    uninit: int = 0
    lost: int = 0
    unread: dict[tuple[int, Slot], str] = field(default_factory=dict)
    transfers: list[Transfer] = field(default_factory=list)
    local_clocks: bool = False  # clocks cover the own GPU's threadblocks only (module docstring)
    provenance: bool = True  # track the places each chunk went through (postcondition messages only)


_NO_CLOCK = np.zeros(0, dtype=np.uint8)  # what a message carries with local clocks
_MAX_RACES = 10
_MAX_STUCK = 8
_TRAIL = 40
# Steps whose only effect is the local store: a scratch chunk they write must be read later.
FULL_CLOCK_ENTRIES = 1 << 28  # vector-clock entries (1 byte each for executor programs) before local clocks

_STORE_ONLY = frozenset({StepType.RECV, StepType.RECV_REDUCE_COPY, StepType.LOCAL_COPY, StepType.REDUCE})


def simulate(
    program: Program, layout: Layout | None, *, fifo_depth: int | None = None
) -> tuple[list[str], list[str]]:
    """Run ``program`` symbolically; return (errors, warnings).

    Errors: deadlocks, races, out-of-bounds or uninitialised reads, overwrites of unread data,
    postcondition failures. Warnings: scratch chunks stored by a receive, copy or reduction that
    nothing reads (wasted transfers).

    ``layout`` gives buffer sizes, aliasing, initial contents and the postcondition; ``None``
    checks progress only.

    The first run (with a layout) keeps chunk memory in numpy arrays and checks whole step ranges
    at once (:class:`msccl_xml._simfast.FastMemory`); it makes every check but writes no message.
    Only when it finds an error or a warning does the full per-chunk run follow, which names them
    (with the places each chunk went through), so verdicts and messages are the full run's.
    """
    if layout is not None:
        st = _run(program, layout, fifo_depth, fast=True)
        if not st.errors:
            return [], []
    st = _run(program, layout, fifo_depth, provenance=True)
    return st.errors, st.warnings


def trace(program: Program, layout: Layout) -> tuple[list[Transfer], list[str]]:
    """Run ``program`` symbolically; return its transfers in execution order, and the errors.

    Every transfer happens after the ones its data depends on (the order is causal), so a chunk's
    hops appear parents first. The transfers are complete only when there are no errors.
    """
    st = _run(program, layout, None, provenance=False)
    if st.errors:
        st = _run(program, layout, None, provenance=True)
    return st.transfers, st.errors


def _run(program: Program, layout: Layout | None, fifo_depth: int | None, *, provenance: bool = False,
         fast: bool = False) -> _State:
    """The symbolic execution; ``fast`` (needs a layout): :class:`FastMemory`, one error if it flags."""
    tbs = [(gpu, tb) for gpu in program.gpus for tb in gpu.threadblocks]
    index = {(gpu.id, tb.id): u for u, (gpu, tb) in enumerate(tbs)}
    s_chunks = {gpu.id: gpu.s_chunks for gpu in program.gpus}
    n = len(tbs)
    # Vector clocks: one entry per threadblock, counting its steps. They take n^2 entries (plus a
    # copy per message in flight and per published flag), so use the narrowest type that holds
    # every step count: 1 byte for executor programs (at most 64 steps per threadblock).
    longest = max((len(tb.steps) for _, tb in tbs), default=0)
    ctype = next(t for t in (np.uint8, np.uint16, np.int64) if longest <= np.iinfo(t).max)
    local = n * n > FULL_CLOCK_ENTRIES
    # clock position of each threadblock: global id, or its index among its GPU's threadblocks
    pos = [tb_i for gpu in program.gpus for tb_i in range(len(gpu.threadblocks))] if local else list(range(n))
    # A last entry at the type's maximum: the vectorised run indexes it for "no access" (position -1).
    clocks = [np.zeros((len(tbs[u][0].threadblocks) if local else n) + 1, dtype=ctype) for u in range(n)]
    for c in clocks:
        c[-1] = np.iinfo(ctype).max
    pcs = [0] * n
    flag = [-1] * n
    flag_log: list[list[tuple[int, np.ndarray]]] = [[] for _ in range(n)]
    flag_steps: list[list[int]] = [[] for _ in range(n)]  # the published flags of flag_log, for bisect
    queues: dict[tuple[int, int, int], deque[_Msg]] = {}
    waiters: dict[object, set[int]] = {}
    st = _State(layout, local_clocks=local, provenance=provenance)
    reduces = any(step.type.reduces for _, tb in tbs for step in tb.steps)
    fm = FastMemory(layout, s_chunks, reduces=reduces) if fast and layout is not None else None
    if layout is not None and fm is None:
        for gpu in program.gpus:
            for slot, value in layout.initial(gpu.id).items():
                st.mem[(gpu.id, slot)] = value

    ready = deque(range(n))
    queued = set(ready)

    def wake(key: object) -> None:
        woken = waiters.pop(key, None)
        if not woken:
            return
        for w in sorted(woken):
            if w not in queued:
                queued.add(w)
                ready.append(w)

    plans = [_plan(gpu, tb, index) for gpu, tb in tbs]
    while ready:
        u = ready.popleft()
        queued.discard(u)
        gpu, tb = tbs[u]
        rank, u_pos, plan = gpu.id, pos[u], plans[u]
        in_key = (tb.recv, rank, tb.chan)
        out_key = (rank, tb.send, tb.chan)
        wait_in, wait_out = ("msg", in_key), ("msg", out_key)
        clock, scratch, sends_to = clocks[u], s_chunks[rank], tb.send >= 0
        while pcs[u] < len(plan):
            step, dep, receives, sends, publishes = plan[pcs[u]]
            if dep is not None and flag[dep] < step.deps:
                waiters.setdefault(("flag", dep), set()).add(u)
                break
            if receives and not queues.get(in_key):
                waiters.setdefault(wait_in, set()).add(u)
                break
            if fifo_depth is not None and sends and sends_to and len(queues.get(out_key, ())) >= fifo_depth:
                waiters.setdefault(("space", out_key), set()).add(u)
                break
            if dep is not None:
                log = flag_log[dep]
                j = bisect.bisect_left(flag_steps[dep], step.deps)
                np.maximum(clock, log[j][1], out=clock)
            msg = None
            if receives:
                msg = queues[in_key].popleft()
                if not local:
                    np.maximum(clock, msg.clock, out=clock)
                if fm is None:
                    sent = tuple((msg.values + [None] * step.cnt)[: step.cnt])
                    st.transfers.append(Transfer(tb.recv, rank, tb.chan, sent))
                if fifo_depth is not None:
                    wake(("space", in_key))
            out: Any
            ordinal = pcs[u] + 1
            # The step's own position holds its ordinal while it runs: its own accesses are ordered.
            clock[u_pos] = ordinal
            if fm is not None:
                place = ""
                out = fm.execute(rank, scratch, u_pos, ordinal, clock, step,
                                 None if msg is None else msg.values)
            else:
                place = f"gpu {rank} tb {tb.id} step {step.s}"
                out = _execute(st, rank, scratch, u_pos, ordinal, clock, step, msg, place)
            pcs[u] = ordinal
            if out is not None and sends_to:
                msg_out = _Msg(out, _NO_CLOCK if local else clock.copy(), place, st.out_via)
                queues.setdefault(out_key, deque()).append(msg_out)
                wake(wait_out)
            if publishes and step.s > flag[u]:
                flag[u] = step.s
                flag_log[u].append((step.s, clock.copy()))
                flag_steps[u].append(step.s)
                wake(("flag", u))
    stuck = [u for u in range(n) if pcs[u] < len(tbs[u][1].steps)]
    if fm is not None:
        if not stuck:
            fm.finish(s_chunks)
        if stuck or fm.flagged:
            st.errors.append("the vectorised run found a problem (the full run names it)")
    elif stuck:
        st.errors.extend(_deadlock_messages(tbs, pcs, stuck, index))
    else:
        for (rank, (buf, idx)), place in list(st.unread.items())[:_MAX_RACES]:
            st.warnings.append(f"{place}: writes gpu {rank} {buf}[{idx}], which nothing reads")
        if layout is not None and layout.collective is not None:
            st.errors.extend(_postcondition(program, st, layout))
    return st


def _plan(
    gpu: Gpu, tb: Threadblock, index: dict[tuple[int, int], int]
) -> list[tuple[Step, int | None, bool, bool, bool]]:
    """Per step of ``tb``: (step, the threadblock index it waits on, receives from ``tb.recv``,
    sends, publishes a flag), computed once rather than per scheduling attempt."""
    out = []
    for step in tb.steps:
        # deps < 0 with a depid is a structural error, reported already; it waits on nothing.
        dep = index.get((gpu.id, step.depid)) if step.depid >= 0 and step.deps >= 0 else None
        t = step.type
        out.append((step, dep, t.receives and tb.recv >= 0, t.sends, step.hasdep == 1 and t is not StepType.NOP))
    return out


def _deadlock_messages(
    tbs: list[tuple[Gpu, Threadblock]],
    pcs: list[int],
    stuck: list[int],
    index: dict[tuple[int, int], int],
) -> list[str]:
    messages = []
    for u in stuck[:_MAX_STUCK]:
        gpu, tb = tbs[u]
        step = tb.steps[pcs[u]]
        place = f"gpu {gpu.id} tb {tb.id} step {step.s}"
        dep = index.get((gpu.id, step.depid)) if step.depid >= 0 else None
        if dep is not None and pcs[dep] <= step.deps:
            reason = f"waits for gpu {gpu.id} tb {step.depid} step {step.deps}, which never completes"
        elif dep is not None:
            reason = f"waits for a flag from gpu {gpu.id} tb {step.depid} that is never published"
        elif step.type.receives:
            reason = f"recv from gpu {tb.recv} on channel {tb.chan} waits for a send that never comes"
        else:
            reason = f"send to gpu {tb.send} on channel {tb.chan} blocks: its FIFO is full"
        messages.append(f"{place}: deadlock: {reason}")
    if len(stuck) > _MAX_STUCK:
        messages.append(f"deadlock: {len(stuck) - _MAX_STUCK} more threadblocks are stuck")
    return messages


def _execute(
    st: _State,
    rank: int,
    s_chunks: int,
    u: int,
    ordinal: int,
    clock: np.ndarray,
    step: Step,
    msg: _Msg | None,
    place: str,
) -> list[Value] | None:
    """Apply ``step`` to memory; return the values it sends, if any."""
    t = step.type
    if t is StepType.NOP:
        return None
    acc = (u, ordinal, place)
    cnt = step.cnt
    received: list[Value] = [] if msg is None else (msg.values + [None] * cnt)[:cnt]
    src: list[Value] = []
    if t.reads_src:
        src = _read(st, rank, s_chunks, acc, clock, step.srcbuf, step.srcoff, cnt)
    if st.provenance:
        st.out_via = _via(st, rank, step, msg, place)
    if t in (StepType.REDUCE, StepType.RES_ADD):
        old = _read(st, rank, s_chunks, acc, clock, step.dstbuf, step.dstoff, cnt)
        _write(st, rank, s_chunks, acc, clock, step, [combine(a, b) for a, b in zip(old, src)])
        return None
    if t is StepType.SEND:
        return src
    if t is StepType.LOCAL_COPY:
        _write(st, rank, s_chunks, acc, clock, step, src)
        return None
    value = [combine(a, b) for a, b in zip(received, src)] if t.reduces else received
    if t.writes_dst:
        _write(st, rank, s_chunks, acc, clock, step, value)
    return value if t.sends else None


def _via(st: _State, rank: int, step: Step, msg: _Msg | None, place: str) -> list[tuple[str, ...]]:
    """The places each chunk ``step`` stores or sends went through (read before its writes)."""
    t, cnt = step.type, step.cnt
    via: list[tuple[str, ...]] = [(place,)] * cnt
    if msg is not None:
        via = [_trail(v + (place,)) for v in (msg.via + via)[:cnt]]
    if t.reads_src:
        local = [_writer(st, rank, step.srcbuf, step.srcoff + k) for k in range(cnt)]
        if t in (StepType.REDUCE, StepType.RES_ADD):
            local = [_writer(st, rank, step.dstbuf, step.dstoff + k) + w for k, w in enumerate(local)]
        if msg is None:
            via = [_trail(w + (place,)) for w in local]
        elif t.reduces:
            via = [_trail(v[:-1] + w + (place,)) for v, w in zip(via, local)]
    return via


def _in_bounds(
    st: _State, rank: int, s_chunks: int, buf: BufferKind, off: int, cnt: int, what: str, place: str
) -> bool:
    layout = st.layout
    assert layout is not None
    size = layout.size(s_chunks, buf)
    if off < 0 or off + cnt > size:
        name = {BufferKind.INPUT: "input", BufferKind.OUTPUT: "output", BufferKind.SCRATCH: "scratch"}
        mode = "in place" if layout.inplace else "out of place"
        coll = layout.collective or "declared sizes"
        st.errors.append(
            f"{place}: {what} {buf.value}[{off}..{off + cnt}) outside the {name[buf]} buffer "
            f"of {size} chunks ({coll}, {mode})"
        )
        return False
    return True


def _writer(st: _State, rank: int, buf: BufferKind, index: int) -> tuple[str, ...]:
    if st.layout is None:
        return ()
    return st.writer.get((rank, st.layout.slot(rank, buf, index)), ())


def _trail(places: tuple[str, ...]) -> tuple[str, ...]:
    """The last few distinct places data went through (for error messages)."""
    return tuple(dict.fromkeys(places))[-_TRAIL:]


def _read(
    st: _State, rank: int, s_chunks: int, acc: Access, clock: np.ndarray,
    buf: BufferKind, off: int, cnt: int,
) -> list[Value]:
    layout = st.layout
    if layout is None:
        return [None] * cnt
    if not _in_bounds(st, rank, s_chunks, buf, off, cnt, "reads", acc[2]):
        return [None] * cnt
    name, shift = layout.base(rank, buf)
    mem, last_write, reads, unread = st.mem, st.last_write, st.reads, st.unread
    postcondition = layout.collective is not None
    ordered: Access | None = None  # the last write found ordered before ``acc`` (same clock: still is)
    values = []
    for k in range(off, off + cnt):
        key = (rank, (name, k + shift))
        last = last_write.get(key)
        if last is not None and last is not ordered:
            if last[0] == acc[0] or clock[last[0]] >= last[1]:
                ordered = last
            else:
                _race_check(st, key, last, acc, clock, "write/read")
        readers = reads.get(key)
        if readers is None:
            reads[key] = [acc]
        else:
            readers.append(acc)
        unread.pop(key, None)
        value = mem.get(key)
        if value is None and postcondition and key not in mem:
            st.uninit += 1
            if st.uninit <= _MAX_RACES:
                st.errors.append(f"{acc[2]}: reads {buf.value}[{k}], which holds no data yet")
        values.append(value)
    return values


def _write(
    st: _State, rank: int, s_chunks: int, acc: Access, clock: np.ndarray, step: Step,
    values: list[Value],
) -> None:
    layout = st.layout
    if layout is None:
        return
    buf, off, cnt = step.dstbuf, step.dstoff, step.cnt
    if not _in_bounds(st, rank, s_chunks, buf, off, cnt, "writes", acc[2]):
        return
    if layout.collective is not None and not layout.inplace and buf is BufferKind.INPUT:
        st.errors.append(
            f"{acc[2]}: writes i[{off}..{off + cnt}) out of place; the caller's send buffer "
            "is read-only"
        )
    name, shift = layout.base(rank, buf)
    mem, last_write, reads, unread, writer = st.mem, st.last_write, st.reads, st.unread, st.writer
    stored_only = buf is BufferKind.SCRATCH and step.type in _STORE_ONLY
    via = st.out_via if st.provenance else None
    u, ordinal = acc[0], acc[1]
    ordered: Access | None = None  # the last access found ordered before ``acc`` (same clock: still is)
    for k, value in zip(range(off, off + cnt), values):
        key = (rank, (name, k + shift))
        last = last_write.get(key)
        if last is not None and last is not ordered:
            if last[0] == u or clock[last[0]] >= last[1]:
                ordered = last
            else:
                _race_check(st, key, last, acc, clock, "write/write")
        readers = reads.pop(key, ())
        for read in readers:
            if read is not ordered:
                if read[0] == u or clock[read[0]] >= read[1]:
                    ordered = read
                else:
                    _race_check(st, key, read, acc, clock, "read/write")
        if last is not None and not readers and (last[0] != u or last[1] != ordinal):
            st.lost += 1
            if st.lost <= _MAX_RACES:
                st.errors.append(
                    f"{acc[2]}: overwrites gpu {rank} {key[1][0]}[{key[1][1]}] written by "
                    f"{last[2]} before anything read it"
                )
        last_write[key] = acc
        if stored_only:
            unread[key] = acc[2]
        mem[key] = value
        if via is not None:
            writer[key] = via[k - off] if k - off < len(via) else (acc[2],)


def _race_check(
    st: _State, key: tuple[int, Slot], earlier: Access, acc: Access, clock: np.ndarray, kind: str
) -> None:
    u, ordinal, place = earlier
    if u == acc[0] or clock[u] >= ordinal:
        return
    st.races += 1
    if st.races <= _MAX_RACES:
        rank, (buf, idx) = key
        why = ("no dependency on this GPU orders them (the program is too large to follow orderings "
               "through other GPUs)") if st.local_clocks else "no dependency orders them"
        st.errors.append(f"{acc[2]}: {kind} race on gpu {rank} {buf}[{idx}] with {place}: {why}")


def _postcondition(program: Program, st: _State, layout: Layout) -> list[str]:
    problems = []
    mode = "in place" if layout.inplace else "out of place"
    for gpu in program.gpus:
        for slot, want in sorted(layout.expected(gpu.id).items()):
            key = (gpu.id, slot)
            got = st.mem.get(key)
            if got != want:
                by = st.writer.get(key)
                tail = f" (written via {' -> '.join(by)})" if by else " (never written)"
                problems.append(
                    f"gpu {gpu.id} {slot[0]}[{slot[1]}]: {layout.collective} {mode} "
                    f"{describe_mismatch(want, got)}{tail}"
                )
    return problems
