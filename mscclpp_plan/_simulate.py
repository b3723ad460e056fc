"""Symbolic execution of a structurally valid plan: deadlocks, data races, bounds, postcondition.

Memory is modelled per *unit*: a chunk split into ``L`` equal parts, ``L`` the least common
multiple of the plan's thread-block-group sizes (1 without ``tbg_info``). A value is the set of
(rank, input unit) contributions it sums, or ``None`` for garbage. Threadblocks run one
operation at a time, each until it blocks (on a ``wait`` without a pending signal, a
``sem_acquire`` on a zero semaphore, a ``barrier`` not yet full, or a packet read whose packets
have not arrived); a state where none can move but some have not finished is a deadlock.

Races use happens-before, tracked as a bit set of the earlier events per event:

* in one threadblock, ``nop`` and ``barrier`` order everything before them before everything
  after them; control ops (signal, wait, semaphores, flush, port-channel puts: run by the first
  threads only) are ordered among themselves; nothing else is ordered, because other ops run
  on all threads with their own thread-to-data mapping;
* a ``signal`` (relaxed or not) happens before the ``wait`` that consumes it (FIFO per channel
  direction, channels paired by their connection order as in the executor); a ``sem_release``
  before the ``sem_acquire`` that consumes it; a packet write before a read of the packet;
  all arrivals at a barrier before all departures.

Two accesses to one unit, at least one a write, not ordered by happens-before, are a race.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from dataclasses import dataclass, field

from synth.collective import COLLECTIVES

from .limits import PACKET_OPS
from .model import BufferRef, Op, Plan
from ._structure import Resolved, canonical_collective, resolve

__all__ = ["Transfer", "simulate"]

Value = frozenset[tuple[int, int]] | None
Loc = tuple[int, str, int]  # (rank, space, unit); space i, o, s (data) or p (scratch as packets)

_MAX_ERRORS = 100


@dataclass(frozen=True, slots=True)
class Transfer:
    """``units`` units moved from ``src`` to ``dst`` by one op; ``full`` if every value moved was a
    complete sum over all ranks (an allreduce's copy phase)."""

    src: int
    dst: int
    units: int
    full: bool


@dataclass
class _Tb:
    ops: list[tuple[Op, str]]
    pc: int = 0
    run: int = 0
    sync: int = 0
    pending: int = 0
    ctrl: int = 0
    at_barrier: bool = False


@dataclass
class _State:
    plan: Plan
    res: Resolved
    L: int
    coll: str
    values: bool = True
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    mem: dict[Loc, Value] = field(default_factory=dict)
    pkt_writer: dict[Loc, tuple[int, int]] = field(default_factory=dict)  # (run, writer's mask incl. itself)
    last_write: dict[Loc, tuple[int, str]] = field(default_factory=dict)
    reads: dict[Loc, list[tuple[int, str]]] = field(default_factory=lambda: defaultdict(list))
    signals: dict[tuple[int, int, str, int], deque[int]] = field(default_factory=lambda: defaultdict(deque))
    sems: dict[tuple[int, int], deque[int]] = field(default_factory=dict)
    barriers: dict[tuple[int, int], list[tuple[int, int, int]]] = field(default_factory=lambda: defaultdict(list))
    transfers: list[Transfer] = field(default_factory=list)
    events: int = 0
    race_reported: set[Loc] = field(default_factory=set)
    scratch_kinds: set[str] = field(default_factory=set)
    # sources of port-channel puts the proxy may still read: loc -> (put's place, completing flush event)
    async_src: dict[Loc, tuple[str, int | None]] = field(default_factory=dict)
    unflushed: dict[tuple[int, int], list[Loc]] = field(default_factory=lambda: defaultdict(list))

    def error(self, msg: str) -> None:
        if len(self.errors) <= _MAX_ERRORS:
            self.errors.append(msg)


_LAUNCH = Op(name="launch")


def units_per_chunk(plan: Plan) -> int:
    """Units a chunk splits into: the lcm of the thread block group sizes of ``plan``'s ops (1 without)."""
    L = 1
    for gpu in plan.gpus:
        for tb in gpu.threadblocks:
            for op in tb.ops:
                for o in (op, *op.ops):
                    if o.tbg is not None:
                        L = math.lcm(L, o.tbg[1])
    return L


def simulate(plan: Plan, *, runs: int = 1) -> tuple[list[str], list[str], list[Transfer]]:
    """Run ``plan`` symbolically; return (errors, warnings, transfers).

    With ``runs=2`` the plan is launched twice back to back, as a training loop does: one
    GPU's second launch starts after all its threadblocks finished the first, but the GPUs are
    not synchronised, so a peer may still be in its first launch. Values are then not checked
    (inputs would be reduced twice); races, deadlocks and leftover signals are.
    """
    L = units_per_chunk(plan)
    if L > 4096:
        return [f"plan: thread block group sizes need {L} units per chunk, more than 4096"], [], []
    st = _State(plan=plan, res=resolve(plan), L=L, coll=canonical_collective(plan.collective), values=runs == 1)
    _init_memory(st)
    tbs: dict[tuple[int, int], _Tb] = {}
    for r, gpu in enumerate(plan.gpus):
        for k, v in enumerate(gpu.semaphores):
            st.sems[(r, k)] = deque([0] * v)
        for t, ptb in enumerate(gpu.threadblocks):
            flat: list[tuple[Op, str]] = []
            for run in range(runs):
                pre = f"launch {run + 1}: " if runs > 1 else ""
                if run:
                    flat.append((_LAUNCH, f"{pre}gpu {r} tb {t} launch"))
                for k, op in enumerate(ptb.ops):
                    if op.name == "pipeline":
                        flat.extend((o, f"{pre}gpu {r} tb {t} op {k}.{j} ({o.name})") for j, o in enumerate(op.ops))
                    else:
                        flat.append((op, f"{pre}gpu {r} tb {t} op {k} ({op.name})"))
            tbs[(r, t)] = _Tb(ops=flat)
    progress = True
    while progress:
        progress = False
        for key, cur in tbs.items():
            while cur.pc < len(cur.ops) and not cur.at_barrier:
                if not _step(st, key, cur, tbs):
                    break
                progress = True
            if len(st.errors) > _MAX_ERRORS:
                return st.errors, st.warnings, st.transfers
    stuck = [(k, tb) for k, tb in tbs.items() if tb.pc < len(tb.ops)]
    for (r, t), stb in stuck[:8]:
        sop, place = stb.ops[stb.pc]
        st.error(f"{place}: deadlock: {_blocked_reason(st, r, t, sop)}")
    if len(stuck) > 8:
        st.error(f"deadlock: {len(stuck) - 8} more threadblocks are stuck")
    if st.scratch_kinds == {"data", "packets"}:
        st.warnings.append("plan: scratch is used both as data and as packets (at twice the offset); "
                           "overlaps between the two views are not checked")
    if not stuck:
        _leftovers(st)
        if st.values:
            _postcondition(st)
    return st.errors, st.warnings, st.transfers


def _leftovers(st: _State) -> None:
    """Signals nobody waited for and unbalanced semaphores outlive the launch and corrupt the next."""
    for (a, b, ctype, tag), q in sorted(st.signals.items()):
        if q:
            st.error(f"gpu {a}: signals gpu {b} over {ctype} connection {tag} {len(q)} more time(s) than gpu {b} "
                     "waits (the next launch would consume them)")
    for r, gpu in enumerate(st.plan.gpus):
        for k, init in enumerate(gpu.semaphores):
            if len(st.sems[(r, k)]) != init:
                st.error(f"gpu {r}: semaphore {k} ends at {len(st.sems[(r, k)])}, not its initial value {init}")


# --- memory layout -------------------------------------------------------------------------


def _init_memory(st: _State) -> None:
    plan, L = st.plan, st.L
    for r, gpu in enumerate(plan.gpus):
        for u in range(gpu.input_chunks * L):
            st.mem[_canon(st, r, "i", u)] = frozenset({(r, u)})


def _canon(st: _State, rank: int, btype: str, unit: int) -> Loc:
    """The location a (rank, buffer type, unit) aliases in the plan's mode (in place or not)."""
    if not st.plan.inplace:
        return (rank, btype, unit)
    gpu = st.plan.gpus[rank]
    if st.coll == "allgather" and btype == "i":
        return (rank, "o", rank * gpu.input_chunks * st.L + unit)
    if st.coll == "reducescatter" and btype == "o":
        return (rank, "i", rank * gpu.output_chunks * st.L + unit)
    if st.coll in ("allreduce", "alltoall") and btype == "o":
        return (rank, "i", unit)
    return (rank, btype, unit)


def _size(st: _State, rank: int, btype: str) -> int:
    gpu = st.plan.gpus[rank]
    chunks = {"i": gpu.input_chunks, "o": gpu.output_chunks, "s": gpu.scratch_chunks}[btype]
    if st.plan.inplace and btype == "o" and st.coll in ("allreduce", "alltoall") and chunks == 0:
        chunks = gpu.input_chunks
    return chunks


# --- operand resolution ----------------------------------------------------------------------


def _units(st: _State, op: Op, b: BufferRef) -> range:
    lo, hi = b.index * st.L, (b.index + b.size) * st.L
    if op.tbg is not None:
        tb_id, g = op.tbg
        part = (hi - lo) // g
        lo, hi = lo + tb_id * part, lo + (tb_id + 1) * part
    return range(lo, hi)


def _operand(
    st: _State, r: int, t: int, op: Op, b: BufferRef, packet: bool, place: str, run: int = 0
) -> list[Loc] | None:
    """Locations of ``b``; None (after an error) if it is out of bounds or unresolvable."""
    if b.buffer_id is not None:
        ids = st.res.remote_refs.get((r, t, op.channel_type or ""), ())
        rb = st.plan.gpus[r].remote_buffers[ids[b.buffer_id]]
        owner, btype = rb.rank, rb.type
    else:
        owner, btype = r, b.type or "i"
    if packet and btype != "s":
        st.error(f"{place}: packets live in the scratch buffer, but this operand names buffer {btype!r}")
        return None
    size = _size(st, owner, btype)
    if b.index + b.size > size:
        st.error(f"{place}: {btype}[{b.index}..{b.index + b.size}) of gpu {owner} outside its {size} chunks")
        return None
    if btype == "s" and owner == r:
        st.scratch_kinds.add("packets" if packet else "data")
    if packet:  # a double scratch buffer alternates its halves between launches
        space = f"p{run % 2}" if st.plan.use_double_scratch_buffer else "p"
        return [(owner, space, u) for u in _units(st, op, b)]
    return [_canon(st, owner, btype, u) for u in _units(st, op, b)]


def _channel_peers(st: _State, r: int, t: int, op: Op) -> list[tuple[int, int]]:
    """(peer, connection ordinal to that peer) of each of the op's channels."""
    ctype = op.channel_type or ""
    gpu_ids = st.res.channels.get((r, t, ctype), ())
    out = []
    for cid in op.channel_ids or ():
        g = gpu_ids[cid]
        out.append(_connection(st, r, ctype, g))
    return out


def _connection(st: _State, r: int, ctype: str, g: int) -> tuple[int, int]:
    """Peer and tag of gpu ``r``'s ``g``-th channel of ``ctype``: the executor connects memory
    channels first, then port channels, numbering connections per peer."""
    gpu = st.plan.gpus[r]
    mem, port = gpu.flat_channels("memory"), gpu.flat_channels("port")
    if ctype == "memory":
        peer = mem[g]
        return peer, mem[:g].count(peer)
    peer = port[g]
    return peer, mem.count(peer) + port[:g].count(peer)


# --- one op --------------------------------------------------------------------------------


def _blocked_reason(st: _State, r: int, t: int, op: Op) -> str:
    if op.name in ("wait", "rlxwait"):
        return "waits for a signal that is never sent"
    if op.name == "sem_acquire":
        return f"acquires semaphore(s) {list(op.semaphore_ids or ())} that are never released"
    if op.name == "barrier":
        return f"barrier {op.barrier_id} never fills up with {op.num_threadblocks} threadblocks"
    return "reads packets that are never written"


def _step(st: _State, key: tuple[int, int], tb: _Tb, tbs: dict[tuple[int, int], _Tb]) -> bool:
    """Execute the threadblock's next op if it can run; return whether it ran."""
    r, t = key
    op, place = tb.ops[tb.pc]
    name = op.name
    extra = 0
    if name in ("wait", "rlxwait"):
        conns = _channel_peers(st, r, t, op)
        queues = [st.signals[(p, r, op.channel_type or "", tag)] for p, tag in conns]
        if not all(queues):
            return False
        for q in queues:
            extra |= q.popleft()
    elif name == "sem_acquire":
        sids = list(op.semaphore_ids or ())
        need: dict[int, int] = defaultdict(int)
        for s in sids:
            need[s] += 1
        if any(len(st.sems[(r, s)]) < c for s, c in need.items()):
            return False
        for s in sids:
            extra |= st.sems[(r, s)].popleft()
    elif name == "barrier":
        return _arrive(st, r, t, tb, op, tbs)
    elif name == "launch":
        return _arrive(st, r, t, tb, op, tbs)
    elif name in PACKET_OPS:
        ready = _packet_sources(st, r, t, op, place, tb.run)
        if ready is None:
            tb.pc += 1  # operand error already reported
            return True
        if any(st.pkt_writer.get(loc, (-1, 0))[0] != tb.run for loc in ready):
            return False
        for loc in ready:
            extra |= st.pkt_writer[loc][1]
    e = st.events
    st.events += 1
    bit = 1 << e
    if name == "nop":
        tb.sync = tb.sync | tb.pending | bit
        tb.pending = 0
        tb.ctrl = 0
        tb.pc += 1
        return True
    if op.is_control:
        pred = tb.sync | tb.ctrl | extra
        tb.ctrl = pred | bit
    else:
        pred = tb.sync | extra
    tb.pending |= pred | bit
    tb.pc += 1
    if name in ("signal", "rlxsignal"):
        for p, tag in _channel_peers(st, r, t, op):
            st.signals[(r, p, op.channel_type or "", tag)].append(pred | bit)
    elif name == "sem_release":
        for s in op.semaphore_ids or ():
            st.sems[(r, s)].append(pred | bit)
    elif name in ("wait", "rlxwait", "sem_acquire"):
        pass
    elif name == "flush":
        _flushed(st, r, t, op, e, place)
    else:
        _data(st, r, t, op, place, e, pred, tb.run)
        if op.channel_type == "port" and name in ("put", "pws", "pwsf", "ppkt"):
            _posted(st, r, t, op, e, place)
        if name in ("pws", "pwsf") and op.channel_type == "port":
            for p, tag in _channel_peers(st, r, t, op):
                st.signals[(r, p, "port", tag)].append(pred | bit)
    return True


def _port_channels(st: _State, r: int, t: int, op: Op) -> list[int]:
    ids = st.res.channels.get((r, t, "port"), ())
    return [ids[c] for c in op.channel_ids or ()]


def _posted(st: _State, r: int, t: int, op: Op, e: int, place: str) -> None:
    """A port put only posts a request: its source stays in use until the channel is flushed."""
    for k, (b, g) in enumerate(zip(op.src_buff, _port_channels(st, r, t, op))):
        locs = _operand(st, r, t, op, b, False, place) or []
        for loc in locs:
            st.async_src[loc] = (place, None)
            st.unflushed[(r, g)].append(loc)
        del k
    if op.name == "pwsf":
        _flushed(st, r, t, op, e, place)


def _flushed(st: _State, r: int, t: int, op: Op, e: int, place: str) -> None:
    for g in _port_channels(st, r, t, op):
        for loc in st.unflushed.pop((r, g), []):
            if loc in st.async_src and st.async_src[loc][1] is None:
                st.async_src[loc] = (st.async_src[loc][0], e)
    del place


def _arrive(st: _State, r: int, t: int, tb: _Tb, op: Op, tbs: dict[tuple[int, int], _Tb]) -> bool:
    if op.name == "launch":  # a new kernel launch on this GPU: all its threadblocks finished the last
        bid, want = -1, len(st.plan.gpus[r].threadblocks)
    else:
        bid, want = op.barrier_id or 0, op.num_threadblocks or 1
    group = st.barriers[(r, bid)]
    e = st.events
    st.events += 1
    group.append((t, e, want))
    tb.at_barrier = True
    if len(group) < want:
        return True
    if len({w for _, _, w in group}) > 1:
        st.error(f"gpu {r} barrier {bid}: arrivals disagree on num_threadblocks")
    mask = 0
    for t2, e2, _ in group:
        other = tbs[(r, t2)]
        mask |= other.sync | other.pending | (1 << e2)
    for t2, _, _ in group:
        other = tbs[(r, t2)]
        other.sync, other.pending, other.ctrl, other.at_barrier = mask, 0, 0, False
        other.pc += 1
        if bid == -1:
            other.run += 1
    group.clear()
    return True


def _packet_sources(st: _State, r: int, t: int, op: Op, place: str, run: int) -> list[Loc] | None:
    """Packet locations the op reads (it waits for their flags)."""
    name = op.name
    if name in ("upkt", "rppkt"):
        refs = list(op.src_buff[:1])
    elif name in ("respkt", "repkt", "recspkt", "recpkt"):
        refs = list(op.src_buff[1:])
    else:
        return []
    out: list[Loc] = []
    for b in refs:
        locs = _operand(st, r, t, op, b, True, place, run)
        if locs is None:
            return None
        out.extend(locs)
    return out


def _data(st: _State, r: int, t: int, op: Op, place: str, e: int, pred: int, run: int) -> None:
    """Reads, combines and writes of a data op, with race checks and transfer records."""
    name = op.name
    pk = name in PACKET_OPS
    # (src operands as (ref, is_packet)), (dst operands as (ref, is_packet))
    if name in ("put", "pws", "pwsf", "ppkt"):
        pairs = [((s, False), [(d, pk)]) for s, d in zip(op.src_buff, op.dst_buff)]
        for (s, _), dsts in pairs:
            _flow(st, r, t, op, place, e, pred, [s], [False], dsts, run)
        return
    srcs = list(op.src_buff)
    src_pk = [False] * len(srcs)
    dst_pk = [False] * len(op.dst_buff)
    if name in ("upkt", "rppkt"):
        src_pk[0] = True
    if name in ("respkt", "repkt", "recspkt", "recpkt"):
        src_pk[1:] = [True] * (len(srcs) - 1)
    if name in ("rppkt", "cpkt"):
        dst_pk = [True] * len(dst_pk) if name == "rppkt" else [True]
    if name in ("respkt", "repkt"):
        dst_pk[1:] = [True] * (len(dst_pk) - 1)
    if name in ("recspkt", "recpkt"):
        dst_pk[1:] = [True] * (len(dst_pk) - 1)
    _flow(st, r, t, op, place, e, pred, srcs, src_pk, list(zip(op.dst_buff, dst_pk)), run)


def _flow(
    st: _State, r: int, t: int, op: Op, place: str, e: int, pred: int,
    srcs: list[BufferRef], src_pk: list[bool], dsts: list[tuple[BufferRef, bool]], run: int,
) -> None:  # fmt: skip
    src_locs = [_operand(st, r, t, op, b, p, place, run) for b, p in zip(srcs, src_pk)]
    dst_locs = [_operand(st, r, t, op, b, p, place, run) for b, p in dsts]
    if any(x is None for x in src_locs) or any(x is None for x in dst_locs):
        return
    n = len(src_locs[0])  # type: ignore[arg-type]
    if op.channel_type == "port" and op.name in ("put", "pws", "pwsf", "ppkt"):
        k = op.dst_buff.index(dsts[0][0])
        peer = _channel_peers(st, r, t, op)[k][0]
        owner = dst_locs[0][0][0] if dst_locs[0] else peer  # type: ignore[index]
        if peer != owner:
            st.error(f"{place}: port channel {k} leads to gpu {peer} but the destination buffer is gpu {owner}'s")
            return
    values: list[Value] = []
    read_full = [True] * len(src_locs)
    for u in range(n):
        acc: Value = None
        for k, locs in enumerate(src_locs):
            assert locs is not None
            loc = locs[u]
            _access(st, loc, e, pred, False, place)
            v = st.mem.get(loc)
            read_full[k] = read_full[k] and _full(st, v)
            if k == 0:
                acc = v
            elif acc is None or v is None:
                acc = None
            elif acc & v:
                if st.values:
                    st.error(f"{place}: reduces contributions {sorted(acc & v)[:2]} twice (rank, unit)")
                acc = None
            else:
                acc = acc | v
        values.append(acc)
    for (_b, pkt), locs in zip(dsts, dst_locs):
        assert locs is not None
        for u, loc in enumerate(locs):
            _access(st, loc, e, pred, True, place)
            st.mem[loc] = values[u]
            if pkt:
                st.pkt_writer[loc] = (run, pred | (1 << e))
        owner = locs[0][0] if locs else r
        if owner != r:
            st.transfers.append(Transfer(r, owner, len(locs), all(_full(st, v) for v in values)))
    for k, locs in enumerate(src_locs):
        assert locs is not None
        if locs and locs[0][0] != r:
            st.transfers.append(Transfer(locs[0][0], r, len(locs), read_full[k]))


def _full(st: _State, v: Value) -> bool:
    return v is not None and len({q for q, _ in v}) == st.plan.nranks


def _access(st: _State, loc: Loc, e: int, pred: int, write: bool, place: str) -> None:
    prior = []
    w = st.last_write.get(loc)
    if w is not None and w[0] != e:
        prior.append(w)
    if write:
        prior.extend(x for x in st.reads[loc] if x[0] != e)
    if write and loc in st.async_src:
        put_place, done = st.async_src.pop(loc)
        if (done is None or not (pred >> done) & 1) and loc not in st.race_reported:
            st.race_reported.add(loc)
            st.error(f"{place}: race: overwrites gpu {loc[0]} {_loc_name(st, loc)}, the source of {put_place}, "
                     "which the proxy may still be reading (no flush ordered before this write)")
    for e2, place2 in prior:
        if not (pred >> e2) & 1 and loc not in st.race_reported:
            st.race_reported.add(loc)
            kind = "write" if write else "read"
            st.error(f"{place}: race: {kind} of gpu {loc[0]} {_loc_name(st, loc)} is not ordered after "
                     f"{place2}")
    if write:
        st.last_write[loc] = (e, place)
        st.reads[loc] = []
    else:
        st.reads[loc].append((e, place))


def _loc_name(st: _State, loc: Loc) -> str:
    _, space, unit = loc
    name = {"i": "input", "o": "output", "s": "scratch", "p": "scratch packets"}[space]
    chunk, part = divmod(unit, st.L)
    return f"{name} chunk {chunk}" + (f" part {part}/{st.L}" if st.L > 1 else "")


# --- postcondition ---------------------------------------------------------------------------


def _postcondition(st: _State) -> None:
    plan, L, coll = st.plan, st.L, st.coll
    n = plan.nranks
    if coll not in COLLECTIVES:
        st.warnings.append(f"plan: no postcondition is checked for collective {plan.collective!r}")
        return
    bad = 0
    for r, gpu in enumerate(plan.gpus):
        ic, oc = gpu.input_chunks, gpu.output_chunks
        outs = oc if oc else ic
        for u in range(outs * L):
            if coll == "allgather":
                j, x = divmod(u, ic * L)
                want = frozenset({(j, x)})
            elif coll == "reducescatter":
                want = frozenset((j, r * oc * L + u) for j in range(n))
            elif coll == "allreduce":
                want = frozenset((j, u) for j in range(n))
            else:
                b = ic // n * L
                j, x = divmod(u, b)
                want = frozenset({(j, r * b + x)})
            got = st.mem.get(_canon(st, r, "o" if oc else "i", u))
            if got != want:
                bad += 1
                if bad <= 5:
                    st.error(f"gpu {r}: postcondition: output {_loc_name(st, (r, 'o', u))} holds "
                             f"{_show(got)}, expected {_show(want)}")
    if bad > 5:
        st.error(f"postcondition: {bad - 5} more output units are wrong")


def _show(v: Value) -> str:
    if v is None:
        return "garbage"
    items = sorted(v)
    text = ", ".join(f"r{q}:{u}" for q, u in items[:4])
    return "{" + text + (f", ... {len(items)} in all" if len(items) > 4 else "") + "}"
