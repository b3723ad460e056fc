"""The memory model of :mod:`mscclpp_plan._simulate`'s symbolic execution: the shared state, the
memory layout (units, in-place aliasing), operand resolution, the data flow of one op with its race
checks and transfer records, and the postcondition on the output buffers.

Examples
--------
>>> _show(frozenset({(0, 1), (1, 0)}))
'{r0:1, r1:0}'
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field

from synth.collective import COLLECTIVES

from .limits import PACKET_OPS
from .model import BufferRef, Op, Plan
from ._structure import Resolved

__all__ = ["Transfer"]

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


# --- data flow of one op --------------------------------------------------------------------


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
