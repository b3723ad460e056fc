"""Lowering, first pass: routes of a Schedule -> per-GPU operations ordered by a global key.

Every operation gets a key ``(time, route, first chunk, phase)``. A transfer sent at time ``t`` is
received at time ``t + 1``; a relay step (``rcs``, ``rrs``) receives at ``t`` and sends at ``t``.
So on every connection both ends see the transfers in the same key order (FIFO matching holds),
and every wait (previous step, matching send, data dependency) points to a strictly smaller key,
which rules out deadlock. Operations of one relay chain share a ``chain`` id: they must sit on one
channel. When no channel can hold a whole chain, :meth:`Ops.halves` cuts a fused relay step into
its receive half (``r``, or ``rrc`` into scratch) and a send half (``s``) one phase later in the
key order, so the chain can continue on another channel (the runtime orders the two by a
dependency).

Buffers (N ranks, K = nchunks, C = N·K): allgather source r chunk k is ``i[k]`` (in place
``o[r·K+k]``) and lands in ``o[r·K+k]``; reducescatter/allreduce block r chunk k is index
``r·K+k`` of every input; reducescatter ends in ``o[k]`` (in place ``i[r·K+k]``); allreduce in
``o[r·K+k]`` (in place ``i``); alltoall block s->d chunk k goes from ``i[d·K+k]`` to ``o[s·K+k]``.
Partial sums and relayed alltoall chunks live in fresh scratch chunks.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from synth.schedule import Route, RouteKind, Schedule

from .program import BufferKind, StepType

__all__ = ["RELAY_TYPES", "Op", "Ops", "build_ops"]

Key = tuple[int, int, int, int]
Ref = tuple[BufferKind, int]
_I, _O, _S = BufferKind.INPUT, BufferKind.OUTPUT, BufferKind.SCRATCH
RELAY_TYPES = frozenset({StepType.RECV_COPY_SEND, StepType.RECV_REDUCE_SEND})


@dataclass(slots=True)
class Op:
    """One future step on ``gpu``: peers, local operands, chunk count, ordering key, chain."""

    gpu: int
    type: StepType
    send: int
    recv: int
    src: Ref | None
    dst: Ref | None
    cnt: int
    key: Key
    chain: int


@dataclass(slots=True)
class Ops:
    """All operations of a lowering plus per-GPU scratch sizes and chain count."""

    ops: list[Op] = field(default_factory=list)
    scratch: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    chains: int = 0
    _halves: dict[tuple[int, Key], tuple[Op, Op]] = field(default_factory=dict)

    def halves(self, op: Op) -> tuple[Op, Op]:
        """(receive half, send half) of a fused relay step; the same pair for the same step.

        ``rcs`` -> ``r`` into its destination + ``s`` from there; ``rrs`` -> ``rrc`` into its
        scratch operand (or a fresh scratch chunk when the operand is the input) + ``s`` from it.
        """
        got = self._halves.get((op.gpu, op.key))
        if got is not None:
            return got
        send_key = (*op.key[:3], op.key[3] + 1)
        if op.type is StepType.RECV_COPY_SEND:
            assert op.dst is not None
            store = op.dst
            recv = Op(op.gpu, StepType.RECV, -1, op.recv, None, store, op.cnt, op.key, op.chain)
        elif op.type is StepType.RECV_REDUCE_SEND:
            assert op.src is not None
            store = op.src if op.src[0] is _S else self.alloc(op.gpu, op.cnt)
            recv = Op(op.gpu, StepType.RECV_REDUCE_COPY, -1, op.recv, op.src, store, op.cnt, op.key, op.chain)
        else:  # pragma: no cover - callers pass relay steps only
            raise ValueError(f"not a relay step: {op.type}")
        pair = (recv, Op(op.gpu, StepType.SEND, op.send, -1, store, None, op.cnt, send_key, op.chain))
        self._halves[(op.gpu, op.key)] = pair
        return pair

    def new_chain(self) -> int:
        self.chains += 1
        return self.chains - 1

    def alloc(self, gpu: int, cnt: int) -> Ref:
        start = self.scratch[gpu]
        self.scratch[gpu] += cnt
        return (_S, start)


def _pieces(schedule: Schedule, max_cnt: int) -> list[tuple[int, Route, int, int]]:
    """(route index, route, first chunk index, cnt) with cnt <= max_cnt, chunk indices per source
    (or per block) assigned to the routes in order."""
    nxt: dict[tuple[str, int, int | None], int] = defaultdict(int)
    out = []
    for idx, route in enumerate(schedule.routes):
        key = (route.kind.value, route.root, route.dest)
        start = nxt[key]
        nxt[key] += route.chunks
        for k in range(start, start + route.chunks, max_cnt):
            out.append((idx, route, k, min(max_cnt, start + route.chunks - k)))
    return out


def build_ops(schedule: Schedule, *, inplace: bool, max_cnt: int) -> Ops:
    """All operations for ``schedule`` in the given mode (see the module docstring)."""
    n, nchunks, coll = schedule.nranks, schedule.nchunks, schedule.collective
    acc = Ops()
    pieces = _pieces(schedule, max_cnt)
    in_tree_end = 1 + max(
        (_heights(r)[r.root] for _, r, _, _ in pieces if r.kind is RouteKind.IN_TREE), default=0
    )
    for idx, route, k0, cnt in pieces:
        j0 = route.root * nchunks + k0
        if coll == "allgather":
            src = (_O, j0) if inplace else (_I, k0)
            _out_tree(acc, route, idx, k0, cnt, src, (_O, j0), base=0)
        elif coll == "alltoall":
            assert route.dest is not None
            _path(acc, route, idx, k0, cnt, (_I, route.dest * nchunks + k0),
                  (_O, route.root * nchunks + k0))  # fmt: skip
        elif route.kind is RouteKind.IN_TREE:
            if coll == "reducescatter":
                final = (_I, j0) if inplace else (_O, k0)
            else:
                final = (_I if inplace else _O, j0)
            _in_tree(acc, route, idx, k0, cnt, (_I, j0), final)
        else:  # allreduce broadcast phase
            buf = (_I if inplace else _O, j0)
            _out_tree(acc, route, idx, k0, cnt, buf, buf, base=in_tree_end)
    if not inplace and coll in ("allgather", "alltoall"):
        for rank in range(n):
            src_base = 0 if coll == "allgather" else rank * nchunks
            for k in range(0, nchunks, max_cnt):
                cnt = min(max_cnt, nchunks - k)
                acc.ops.append(Op(rank, StepType.LOCAL_COPY, -1, -1, (_I, src_base + k),
                                  (_O, rank * nchunks + k), cnt, (0, -1, k, 0), -1))  # fmt: skip
    return acc


def _children(route: Route) -> dict[int, list[int]]:
    """Children in the tree: data flows parent -> child in out-trees, child -> parent in in-trees."""
    kids: dict[int, list[int]] = defaultdict(list)
    for hop in route.hops:
        if route.kind is RouteKind.IN_TREE:
            kids[hop.dst].append(hop.src)
        else:
            kids[hop.src].append(hop.dst)
    return kids


def _subtree_sizes(kids: dict[int, list[int]]) -> dict[int, int]:
    """Nodes in the subtree of every node of ``kids`` (itself included), children before parents."""
    sizes: dict[int, int] = {}
    entered: set[int] = set()  # a node is expanded once (a route is a tree; a cycle cannot loop here)
    for top in kids:
        stack = [(top, False)]
        while stack:
            v, done = stack.pop()
            if done:
                sizes[v] = 1 + sum(sizes.get(c, 0) for c in kids.get(v, ()))
            elif v not in entered:
                entered.add(v)
                stack.append((v, True))
                stack.extend((c, False) for c in kids.get(v, ()) if c not in entered)
    return sizes


def _out_tree(acc: Ops, route: Route, idx: int, k0: int, cnt: int, src: Ref, dst: Ref, *, base: int) -> None:
    """Broadcast from the root: root sends ``src``; every other node stores into ``dst`` and
    forwards with ``rcs`` to its largest child and plain sends to the others."""
    kids = _children(route)
    sizes = _subtree_sizes(kids)
    for v in kids:
        kids[v].sort(key=lambda c: (-sizes[c], c))
    # (node, depth, parent, chain arriving at node or -1 for the root)
    stack = [(route.root, 0, -1, -1)]
    while stack:
        v, depth, parent, chain = stack.pop()
        t = base + depth
        children = kids.get(v, [])
        first_chain = chain
        if parent >= 0:
            if children:
                acc.ops.append(Op(v, StepType.RECV_COPY_SEND, children[0], parent, None, dst, cnt,
                                  (t, idx, k0, 0), chain))  # fmt: skip
            else:
                acc.ops.append(Op(v, StepType.RECV, -1, parent, None, dst, cnt, (t, idx, k0, 0), chain))
        here = src if parent < 0 else dst
        for pos, child in enumerate(children):
            if parent >= 0 and pos == 0:
                child_chain = first_chain
            else:
                child_chain = acc.new_chain()
                acc.ops.append(Op(v, StepType.SEND, child, -1, here, None, cnt,
                                  (t, idx, k0, 1 + pos), child_chain))  # fmt: skip
            stack.append((child, depth + 1, v, child_chain))


def _heights(route: Route) -> dict[int, int]:
    kids = _children(route)
    memo: dict[int, int] = {}

    def h(v: int) -> int:
        if v not in memo:
            memo[v] = 1 + max((h(c) for c in kids.get(v, ())), default=-1)
        return memo[v]

    h(route.root)
    return memo


def _in_tree(acc: Ops, route: Route, idx: int, k0: int, cnt: int, own: Ref, final: Ref) -> None:
    """Reduce into the root: leaves send ``own``; inner nodes fold children in with ``rrc`` into
    a scratch accumulator and pass the sum on with ``rrs``; the root folds into ``final``."""
    kids = _children(route)
    height = _heights(route)
    parent = {hop.src: hop.dst for hop in route.hops}
    chain_of: dict[int, int] = {}  # chain of the transfer child -> parent, keyed by child
    for v in sorted(height, key=lambda x: (height[x], x)):
        children = sorted(kids.get(v, []), key=lambda c: (height[c], c))
        if v != route.root and not children:
            chain_of[v] = acc.new_chain()
            acc.ops.append(Op(v, StepType.SEND, parent[v], -1, own, None, cnt,
                              (height[v], idx, k0, 0), chain_of[v]))  # fmt: skip
            continue
        # the child with the greatest height (ties: highest rank) is fused into the rrs
        folded = children if v == route.root else children[:-1]
        target = final if v == route.root else (acc.alloc(v, cnt) if folded else own)
        operand = own
        for phase, c in enumerate(folded):
            acc.ops.append(Op(v, StepType.RECV_REDUCE_COPY, -1, c, operand, target, cnt,
                              (height[c] + 1, idx, k0, phase), chain_of[c]))  # fmt: skip
            operand = target
        if v != route.root:
            last = children[-1]
            chain_of[v] = chain_of[last]
            acc.ops.append(Op(v, StepType.RECV_REDUCE_SEND, parent[v], last, operand, None, cnt,
                              (height[v], idx, k0, len(folded)), chain_of[last]))  # fmt: skip


def _path(acc: Ops, route: Route, idx: int, k0: int, cnt: int, src: Ref, dst: Ref) -> None:
    """Point to point along the path: source sends, relays ``rcs`` through scratch, dest stores."""
    chain = acc.new_chain()
    hops = route.hops
    acc.ops.append(Op(route.root, StepType.SEND, hops[0].dst, -1, src, None, cnt, (0, idx, k0, 0), chain))
    for t, hop in enumerate(hops, start=1):
        if t < len(hops):
            acc.ops.append(Op(hop.dst, StepType.RECV_COPY_SEND, hops[t].dst, hop.src, None,
                              acc.alloc(hop.dst, cnt), cnt, (t, idx, k0, 0), chain))  # fmt: skip
        else:
            acc.ops.append(Op(hop.dst, StepType.RECV, -1, hop.src, None, dst, cnt, (t, idx, k0, 0), chain))
