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
from dataclasses import dataclass

from .limits import PACKET_OPS
from .model import Op, Plan
from ._sim_memory import (
    _MAX_ERRORS, Loc, Transfer, _State, _channel_peers, _data, _init_memory, _operand, _postcondition,
)
from ._structure import canonical_collective, resolve

__all__ = ["Transfer", "simulate"]


@dataclass
class _Tb:
    ops: list[tuple[Op, str]]
    pc: int = 0
    run: int = 0
    sync: int = 0
    pending: int = 0
    ctrl: int = 0
    at_barrier: bool = False


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
