"""Compile an MSCCL program into per-rank round plans (pure Python, no torch).

Every rank compiles the *whole* program with the same deterministic algorithm, so all ranks agree on
which round each transfer runs in without talking to each other. The model (MSCCL step semantics):

* a threadblock runs its steps in order; ``depid``/``deps`` add a dependency on a step of another
  threadblock of the same rank (``nop`` steps only carry dependencies);
* the k-th send-type step from A to B on channel c matches the k-th receive-type step at B from A on c;
* channels and threadblocks are independent lanes: only these dependencies order them.

Time is counted in rounds. Round ``t`` first runs one batch of point-to-point transfers (every send's
matching receive is in the peer's batch of the same round; nothing in a batch depends on another op
of the batch) and then local compute (copies, reductions) in dependency order. A transfer runs in the
first round after both its sending step's data and its receiving step's predecessors are ready; a step
that receives and then sends (``rcs``, ``rrs``, ``rrcs``) forwards in a later round. Receives of ``r``
and ``rcs`` land directly in the destination; reducing receives land in a temporary region that a
compute op then folds into place. Consecutive transfers between one pair in one round whose regions are
contiguous on both ends are merged into one message.

Examples
--------
>>> from msccl_xml import lower
>>> from synth.schedule import Hop, Route, RouteKind, Schedule
>>> ag = Schedule("allgather", 2, 1, (
...     Route(RouteKind.OUT_TREE, 0, 1, (Hop(0, 1, ("gpu0", "gpu1")),)),
...     Route(RouteKind.OUT_TREE, 1, 1, (Hop(1, 0, ("gpu1", "gpu0")),))))
>>> plan = compile_program(lower(ag))
>>> plan.collective, plan.nranks, len(plan.ranks[0].rounds)
('allgather', 2, 1)
>>> rnd = plan.ranks[0].rounds[0]
>>> [(m.peer, m.regions) for m in rnd.sends], [(m.peer, m.regions) for m in rnd.recvs]
([(1, (('i', 0, 1),))], [(1, (('o', 1, 1),))])
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from msccl_xml import Program, StepType
from synth import COLLECTIVES as SYNTH_COLLECTIVES

from .errors import ExecutorError

__all__ = ["COLLECTIVES", "Message", "Op", "Plan", "RankPlan", "Round", "compile_program", "canonical_collective"]

#: Collectives the executor runs (MSCCL ``coll`` names after canonicalisation).
COLLECTIVES = SYNTH_COLLECTIVES

#: ``(buffer, chunk offset, chunk count)``; buffer ``i``/``o``/``s`` as in MSCCL, ``t`` the temp area.
Region = tuple[str, int, int]


def canonical_collective(coll: str) -> str:
    """MSCCL ``coll`` spelled the executor's way (``reduce_scatter`` -> ``reducescatter``).

    >>> canonical_collective("reduce_scatter")
    'reducescatter'
    """
    return "reducescatter" if coll == "reduce_scatter" else coll


@dataclass(frozen=True, slots=True)
class Message:
    """One point-to-point message of a round: the regions sent to / received from ``peer`` (group rank);
    ``reducing`` when the receiver folds it into a reduction (a partial sum: an AllReduce's ReduceScatter phase)."""

    peer: int
    regions: tuple[Region, ...]
    chunks: int
    reducing: bool = False


@dataclass(frozen=True, slots=True)
class Op:
    """A local op: ``copy`` (``dst = a``) or ``reduce`` (``dst = a (+) b``)."""

    kind: str
    dst: Region
    a: Region
    b: Region | None = None


@dataclass(frozen=True, slots=True)
class Round:
    """One round of one rank: a symmetric batch of messages, then local ops."""

    index: int
    sends: tuple[Message, ...]
    recvs: tuple[Message, ...]
    ops: tuple[Op, ...]


@dataclass(frozen=True, slots=True)
class RankPlan:
    """Everything one rank does: local ops before the first round, then its non-empty rounds in order."""

    rank: int
    pre_ops: tuple[Op, ...]
    rounds: tuple[Round, ...]
    scratch_chunks: int
    temp_chunks: int

    @property
    def sent_chunks_by_peer(self) -> tuple[tuple[int, int], ...]:
        """``(peer, chunks)`` this rank sends over all its rounds, by peer.

        >>> m = Message(1, (("o", 0, 2),), 2)
        >>> RankPlan(0, (), (Round(1, (m,), (), ()), Round(2, (m,), (), ())), 0, 0).sent_chunks_by_peer
        ((1, 4),)
        """
        totals: defaultdict[int, int] = defaultdict(int)
        for rnd in self.rounds:
            for m in rnd.sends:
                totals[m.peer] += m.chunks
        return tuple(sorted(totals.items()))


@dataclass(frozen=True, slots=True)
class Plan:
    """A compiled program: per-rank plans plus the header facts the executor needs."""

    collective: str
    nranks: int
    nchunks: int
    inplace: bool
    outofplace: bool
    min_bytes: int
    max_bytes: int
    ranks: tuple[RankPlan, ...]
    name: str | None = None

    @property
    def nrounds(self) -> int:
        """The last round index of any rank (0 when no rank has a round)."""
        return max((rp.rounds[-1].index for rp in self.ranks if rp.rounds), default=0)

    def accepts(self, nbytes: int) -> bool:
        """Whether a call of ``nbytes`` (MSCCL's size: the large buffer) falls in the program's range.

        >>> Plan("allreduce", 2, 2, True, False, 0, 0, ()).accepts(10**12)
        True
        """
        return nbytes >= self.min_bytes and (self.max_bytes <= 0 or nbytes <= self.max_bytes)


_StepKey = tuple[int, int, int]  # (rank, tb id, step index)


def compile_program(program: Program) -> Plan:
    """Compile ``program`` into a :class:`Plan` (deterministic; every rank gets the same plan).

    Raises
    ------
    ExecutorError
        If the collective is not one the executor runs, a step type is unsupported (``ra``), sends
        and receives do not match, or the dependencies cannot all be satisfied (a deadlock).
    """
    coll = canonical_collective(program.coll)
    if coll not in COLLECTIVES:
        raise ExecutorError(f"program {program.name!r}: collective {program.coll!r} is not one of {COLLECTIVES}")
    n = program.ngpus
    ranks = sorted(g.id for g in program.gpus)
    if ranks != list(range(n)):
        raise ExecutorError(f"program {program.name!r}: <gpu> ids {ranks} are not 0..{n - 1}")

    steps, tb_steps, by_s, sends, recvs = _index_steps(program)
    out_partner, in_partner = _match_transfers(steps, sends, recvs)
    preds = _predecessors(steps, tb_steps, by_s)
    finish: dict[_StepKey, int] = {}
    send_ready: dict[_StepKey, int] = {}
    t_in: dict[_StepKey, int] = {}
    order: list[_StepKey] = []
    pos = {k: 0 for k in tb_steps}
    pending = sorted(tb_steps)
    while pending:
        progressed = False
        still = []
        for tbk in pending:
            keys = tb_steps[tbk]
            while pos[tbk] < len(keys):
                key = keys[pos[tbk]]
                if not _advance(key, steps[key][0].type, preds, finish, send_ready, t_in, in_partner):
                    break
                order.append(key)
                pos[tbk] += 1
                progressed = True
            if pos[tbk] < len(keys):
                still.append(tbk)
        if still and not progressed:
            r, t = still[0]
            st = steps[tb_steps[still[0]][pos[still[0]]]][0]
            raise ExecutorError(f"program {program.name!r} deadlocks: gpu {r} tb {t} step {st.s} can never run")
        pending = still
    return _emit(program, coll, steps, order, finish, send_ready, t_in, out_partner)


def _index_steps(program: Program) -> tuple[dict[_StepKey, tuple], dict[tuple[int, int], list[_StepKey]],
                                            dict[tuple[int, int, int], _StepKey],
                                            dict[tuple[int, int, int], list[_StepKey]],
                                            dict[tuple[int, int, int], list[_StepKey]]]:
    """Every step by key, each threadblock's keys, keys by (rank, tb, ``s``), and the sending and receiving
    steps per connection (sender, receiver, channel)."""
    steps: dict[_StepKey, tuple] = {}  # key -> (step, tb)
    tb_steps: dict[tuple[int, int], list[_StepKey]] = {}
    by_s: dict[tuple[int, int, int], _StepKey] = {}
    sends: dict[tuple[int, int, int], list[_StepKey]] = defaultdict(list)
    recvs: dict[tuple[int, int, int], list[_StepKey]] = defaultdict(list)
    for gpu in program.gpus:
        for tb in gpu.threadblocks:
            keys = []
            for j, st in enumerate(tb.steps):
                if st.type is StepType.RES_ADD:
                    raise ExecutorError(f"gpu {gpu.id} tb {tb.id} step {st.s}: step type 'ra' is not supported")
                key = (gpu.id, tb.id, j)
                steps[key] = (st, tb)
                by_s[(gpu.id, tb.id, st.s)] = key
                keys.append(key)
                if st.type.sends:
                    if tb.send < 0:
                        raise ExecutorError(f"gpu {gpu.id} tb {tb.id} step {st.s}: sends but the tb has no send peer")
                    sends[(gpu.id, tb.send, tb.chan)].append(key)
                if st.type.receives:
                    if tb.recv < 0:
                        raise ExecutorError(f"gpu {gpu.id} tb {tb.id} step {st.s}: receives but the tb has no recv peer")
                    recvs[(tb.recv, gpu.id, tb.chan)].append(key)
            tb_steps[(gpu.id, tb.id)] = keys
    return steps, tb_steps, by_s, sends, recvs


def _match_transfers(steps: dict[_StepKey, tuple], sends: dict[tuple[int, int, int], list[_StepKey]],
                     recvs: dict[tuple[int, int, int], list[_StepKey]],
                     ) -> tuple[dict[_StepKey, tuple[_StepKey, tuple[int, int, int, int]]],
                                dict[_StepKey, tuple[_StepKey, tuple[int, int, int, int]]]]:
    """Each send's receive and each receive's send, with the transfer id (sender, receiver, channel, k)."""
    # FIFO matching per (sender, receiver, channel).
    out_partner: dict[_StepKey, tuple[_StepKey, tuple[int, int, int, int]]] = {}
    in_partner: dict[_StepKey, tuple[_StepKey, tuple[int, int, int, int]]] = {}
    for conn in sorted(set(sends) | set(recvs)):
        ss, rr = sends.get(conn, []), recvs.get(conn, [])
        if len(ss) != len(rr):
            raise ExecutorError(
                f"gpu {conn[0]} -> gpu {conn[1]} channel {conn[2]}: {len(ss)} sends but {len(rr)} receives")
        for k, (a, b) in enumerate(zip(ss, rr)):
            if steps[a][0].cnt != steps[b][0].cnt:
                raise ExecutorError(f"gpu {conn[0]} -> gpu {conn[1]} channel {conn[2]} transfer {k}: cnt differs")
            tid = (*conn, k)
            out_partner[a] = (b, tid)
            in_partner[b] = (a, tid)

    return out_partner, in_partner


def _predecessors(steps: dict[_StepKey, tuple], tb_steps: dict[tuple[int, int], list[_StepKey]],
                  by_s: dict[tuple[int, int, int], _StepKey]) -> dict[_StepKey, list[_StepKey]]:
    """Each step's predecessors: the step before it in its threadblock and its ``depid``/``deps`` step."""
    preds: dict[_StepKey, list[_StepKey]] = {}
    for (rank, tbid), keys in tb_steps.items():
        for j, key in enumerate(keys):
            st = steps[key][0]
            p = [keys[j - 1]] if j else []
            if st.depid >= 0:
                dep = by_s.get((rank, st.depid, st.deps))
                if dep is None:
                    raise ExecutorError(f"gpu {rank} tb {tbid} step {st.s}: depends on missing tb {st.depid} step {st.deps}")
                p.append(dep)
            preds[key] = p
    return preds


def _advance(key, typ, preds, finish, send_ready, t_in, in_partner) -> bool:
    """Schedule ``key`` if its predecessors (and the data it receives) are scheduled; True when done.

    Sends are buffered as in MSCCL: a sending step is done once its data is captured (the end of the
    round before it may first go out), so the receiver's progress never holds up the sender's
    threadblock. The transfer itself runs when the receiver is ready too (round ``t_in`` of the receiver).
    """
    if any(p not in finish for p in preds[key]):
        return False
    base = max((finish[p] for p in preds[key]), default=0)
    if typ.receives:
        src = in_partner[key][0]
        if src not in send_ready:
            return False
        t_in[key] = max(base + 1, send_ready[src])
        ready = t_in[key] + 1
    else:
        ready = base + 1
    if typ.sends:
        send_ready[key] = ready
        finish[key] = ready - 1
    elif typ.receives:
        finish[key] = t_in[key]
    else:
        finish[key] = base
    return True


def _emit(program, coll, steps, order, finish, send_ready, t_in, out_partner) -> Plan:
    n = program.ngpus
    temp_next = [0] * n
    recv_region: dict[_StepKey, Region] = {}
    send_region: dict[_StepKey, Region] = {}
    ops_at: dict[tuple[int, int], list[tuple[float, Op]]] = defaultdict(list)
    writes: list[dict[int, list[tuple[tuple, _StepKey]]]] = [defaultdict(list) for _ in range(n)]
    modes = [m for m, on in ((True, program.inplace), (False, program.outofplace is not False and
                                                          (program.outofplace or not program.inplace))) if on]
    c_per = program.nchunksperloop // n if coll != "allreduce" else program.nchunksperloop

    def mem(rank: int, reg: Region) -> set[tuple[bool, str, int]]:
        out = set()
        for inplace in modes:
            for k in range(reg[1], reg[1] + reg[2]):
                out.add((inplace, *_canonical(coll, inplace, rank, reg[0], k, c_per)))
        return out

    def note_write(key: _StepKey, reg: Region, when: tuple) -> None:
        if reg[0] != "t":
            for m in mem(key[0], reg):
                writes[key[0]][hash(m)].append((when, key))

    def temp(rank: int, cnt: int) -> Region:
        reg = ("t", temp_next[rank], cnt)
        temp_next[rank] += cnt
        return reg

    for p, key in enumerate(order):  # a topological order: local ops of one round run in it
        st, _tb = steps[key]
        rank = key[0]
        typ = st.type
        src: Region = (st.srcbuf.value, st.srcoff, st.cnt)
        dst: Region = (st.dstbuf.value, st.dstoff, st.cnt)
        if typ is StepType.SEND:
            send_region[key] = src
        elif typ in (StepType.RECV, StepType.RECV_COPY_SEND):
            recv_region[key] = dst
            note_write(key, dst, (t_in[key], 0, -1))
            if typ is StepType.RECV_COPY_SEND:
                send_region[key] = dst
        elif typ.receives:  # rrs, rrc, rrcs: land in a temp, then fold
            tmp = temp(rank, st.cnt)
            recv_region[key] = tmp
            target = tmp if typ is StepType.RECV_REDUCE_SEND else dst
            ops_at[(rank, t_in[key])].append((p, Op("reduce", target, tmp, src)))
            note_write(key, target, (t_in[key], 1, p))
            if typ.sends:
                send_region[key] = target
        elif typ is StepType.LOCAL_COPY:
            ops_at[(rank, finish[key])].append((p, Op("copy", dst, src)))
            note_write(key, dst, (finish[key], 1, p))
        elif typ is StepType.REDUCE:
            ops_at[(rank, finish[key])].append((p, Op("reduce", dst, dst, src)))
            note_write(key, dst, (finish[key], 1, p))
        # nop: nothing to do
    for w in writes:
        for lst in w.values():
            lst.sort()

    # A send's data is captured when the step runs (buffered, as in MSCCL) but leaves in the comm phase of
    # its transfer round. It sends its source in place only if no later step writes that memory in between
    # (local ops after it in its capture round, receives in the transfer round, anything in rounds between);
    # otherwise it sends a snapshot taken at capture time.
    position = {key: p for p, key in enumerate(order)}
    for a, (b, _tid) in out_partner.items():
        reg = send_region[a]
        if reg[0] == "t":
            continue
        rank = a[0]
        capture = (send_ready[a] - 1, 1, position[a])
        until = (t_in[b], 0, float("inf"))
        clash = False
        for m in mem(rank, reg):
            for when, who in writes[rank].get(hash(m), ()):
                if who != a and capture < when <= until:
                    clash = True
                    break
            if clash:
                break
        if clash:
            snap = temp(rank, reg[2])
            ops_at[(rank, send_ready[a] - 1)].append((position[a] + 0.5, Op("copy", snap, reg)))
            send_region[a] = snap

    # Transfers by (round, sender, receiver), in (channel, k) order on both ends.
    transfers: dict[tuple[int, int, int], list] = defaultdict(list)
    for a, (b, tid) in out_partner.items():
        reducing = steps[b][0].type not in (StepType.RECV, StepType.RECV_COPY_SEND)  # rrs, rrc, rrcs fold it in
        transfers[(t_in[b], tid[0], tid[1])].append((tid[2], tid[3], send_region[a], recv_region[b], reducing))

    sends_at: dict[tuple[int, int], list[Message]] = defaultdict(list)
    recvs_at: dict[tuple[int, int], list[Message]] = defaultdict(list)
    for (rnd, a, b), items in sorted(transfers.items()):
        items.sort(key=lambda x: (x[0], x[1]))
        merged: list[tuple[list[Region], list[Region], bool]] = []
        for _chan, _k, s_reg, r_reg, red in items:
            if merged and merged[-1][2] == red and _adjacent(merged[-1][0][-1], s_reg) \
                    and _adjacent(merged[-1][1][-1], r_reg):
                merged[-1][0][-1] = _join(merged[-1][0][-1], s_reg)
                merged[-1][1][-1] = _join(merged[-1][1][-1], r_reg)
            else:
                merged.append(([s_reg], [r_reg], red))
        for s_regs, r_regs, red in merged:
            cnt = sum(r[2] for r in s_regs)
            sends_at[(a, rnd)].append(Message(b, tuple(s_regs), cnt, red))
            recvs_at[(b, rnd)].append(Message(a, tuple(r_regs), cnt, red))

    def ops(rank: int, rnd: int) -> tuple[Op, ...]:
        return tuple(op for _p, op in sorted(ops_at.get((rank, rnd), ()), key=lambda x: x[0]))

    rank_plans = []
    for rank in range(n):
        rounds_idx = sorted({r for (k, r) in sends_at if k == rank} | {r for (k, r) in recvs_at if k == rank}
                            | {r for (k, r) in ops_at if k == rank and r > 0})
        rounds = [Round(r, tuple(sends_at.get((rank, r), ())), tuple(recvs_at.get((rank, r), ())), ops(rank, r))
                  for r in rounds_idx]
        rank_plans.append(RankPlan(rank, ops(rank, 0), tuple(rounds), program.gpu(rank).s_chunks, temp_next[rank]))
    return Plan(coll, n, program.nchunksperloop, bool(program.inplace), bool(program.outofplace),
                int(program.min_bytes or 0), int(program.max_bytes or 0), tuple(rank_plans), program.name)


def _canonical(coll: str, inplace: bool, rank: int, buf: str, k: int, c: int) -> tuple[str, int]:
    """The memory slot of chunk ``k`` of ``buf`` on ``rank`` with the API's in-place aliasing."""
    if inplace:
        if coll == "allgather" and buf == "i":
            return ("o", rank * c + k)
        if coll == "reducescatter" and buf == "o":
            return ("i", rank * c + k)
        if coll in ("allreduce", "alltoall") and buf == "o":
            return ("i", k)
    return (buf, k)


def _adjacent(a: Region, b: Region) -> bool:
    return a[0] == b[0] and a[1] + a[2] == b[1]


def _join(a: Region, b: Region) -> Region:
    return (a[0], a[1], a[2] + b[2])
