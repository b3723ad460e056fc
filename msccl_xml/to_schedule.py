"""Recover the :class:`~synth.schedule.Schedule` IR from an MSCCL program (the inverse of lowering).

The program is executed symbolically (:func:`msccl_xml._simulate.trace`), which labels every
chunk a transfer moves with the contributions it holds. Grouped by what they carry, the transfers
of a program in the IR's shape form:

=============  ====================================================================================
allgather      per origin chunk ``(q, k)``: an out-tree from rank ``q`` (``OUT_TREE``)
alltoall       per block chunk ``q -> d``, ``k``: a simple path from ``q`` to ``d`` (``PATH``)
reducescatter  per chunk index ``j``: partial sums flowing into its owner ``j // c`` (``IN_TREE``)
allreduce      per chunk index ``j``: partial sums into one rank ``R`` (``IN_TREE``), then the full
               sum from ``R`` to every other rank (``OUT_TREE``)
=============  ====================================================================================

Identical trees (paths) are merged into one route with ``chunks`` = their multiplicity; each hop
gets the physical path of :func:`msccl_xml.algbw.switch_path`, as the bandwidth model of
:func:`msccl_xml.algbw.program_algbw_GBps` assumes, so both give the same algbw.

Examples
--------
>>> from msccl_xml import lower
>>> from synth.schedule import Hop, Route, RouteKind, Schedule
>>> from synth.topologies import load_topology
>>> def hop(a, b):
...     return Hop(a, b, (f"gpu{a}", f"gpu{b}"))
>>> ring = Schedule("allgather", 3, 2, tuple(
...     Route(RouteKind.OUT_TREE, r, 2, (hop(r, (r + 1) % 3), hop((r + 1) % 3, (r + 2) % 3)))
...     for r in range(3)))
>>> topo = load_topology("ring:3")
>>> back = program_to_schedule(lower(ring), topo)
>>> back.nchunks, len(back.routes), back.routes[0].chunks, back.algbw_GBps(topo) == ring.algbw_GBps(topo)
(2, 3, 2, True)
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from itertools import pairwise
from typing import cast

from synth import Collective
from synth.errors import XmlError, expect_type
from synth.schedule import Hop, Route, RouteKind, Schedule
from synth.topologies import Topology

from ._layout import POSTCONDITION_COLLS, Value, canonical_coll, layout_for
from ._matching import match_problems
from ._simulate import trace
from .algbw import switch_path
from .program import Program

__all__ = ["program_to_schedule"]

Edge = tuple[int, int]
Move = tuple[int, int, Value]  # (sender, receiver, value of one chunk)
Item = tuple[str, int, int | None, tuple[Edge, ...]]  # (route kind, root, dest, hops as rank pairs)


def program_to_schedule(program: Program, topology: Topology) -> Schedule:
    """The schedule whose routes move the same chunks over the same GPU pairs as ``program``.

    Parameters
    ----------
    program
        A program that delivers its collective (``allgather``, ``reducescatter`` or
        ``reduce_scatter``, ``alltoall``, ``allreduce``); runtime limits do not matter here.
    topology
        Topology with ``ngpus`` ranks; gives each hop its physical path through switches.

    Returns
    -------
    Schedule
        ``nchunks`` is the chunks per source (per block for alltoall) of the program's layout,
        ``nchunksperloop / ngpus``; ``meta["msccl_name"]`` is the program's ``name``.

    Raises
    ------
    XmlError
        If the collective has no schedule form, the rank counts differ, the program does not
        deliver its collective (naming the first problem), two GPUs that exchange data have no
        switch-only path, or the transfers have no route shape; the message names the chunk and
        the ranks (e.g. a chunk sent twice to one rank, or an allreduce that reduces every chunk
        at every rank, as one-shot allreduces do).

    Notes
    -----
    One symbolic execution (linear in steps times threadblocks), then linear work in the number
    of chunk transfers. Routes are sorted by (root, destination, hops).

    Examples
    --------
    >>> from msccl_xml import lower
    >>> from synth.schedule import Hop, Route, RouteKind, Schedule
    >>> from synth.topologies import load_topology
    >>> rs = Schedule("reducescatter", 2, 1, (
    ...     Route(RouteKind.IN_TREE, 0, 1, (Hop(1, 0, ("gpu1", "gpu0")),)),
    ...     Route(RouteKind.IN_TREE, 1, 1, (Hop(0, 1, ("gpu0", "gpu1")),))))
    >>> program_to_schedule(lower(rs), load_topology("ring:2")).routes == rs.routes
    True
    """
    expect_type(program, Program, "program", XmlError)
    expect_type(topology, Topology, "topology", XmlError)
    label = "program" if program.name is None else f"program {program.name!r}"
    coll = _validate(program, topology, label)
    layout, problem = layout_for(program, program.inplace == 1)
    if problem:
        raise XmlError(f"{label}: {problem}")
    transfers, errors = trace(program, layout)
    errors = match_problems(program) + errors
    if errors:
        raise XmlError(f"{label} does not deliver its {coll}: {errors[0]}")
    moves = [(t.sender, t.receiver, v) for t in transfers for v in t.values]
    n, c = program.ngpus, layout.per_rank
    try:
        if coll == "allgather":
            items = _allgather(moves, n, c)
        elif coll == "alltoall":
            items = _alltoall(moves, n, c)
        elif coll == "reducescatter":
            items = _reducescatter(moves, n, c)
        else:
            items, c = _allreduce(moves, n, program.nchunksperloop)
    except XmlError as exc:
        raise XmlError(f"{label}: {exc}") from None
    hop = _hop_maker(topology)
    routes = []
    for (kind, root, dest, edges), mult in sorted(Counter(items).items(), key=lambda kv: _order(kv[0])):
        hops = tuple(hop(a, b) for a, b in edges)
        routes.append(Route(RouteKind(kind), root, mult, hops, dest))
    return Schedule(cast(Collective, coll), n, c, tuple(routes), topology_fingerprint=topology.fingerprint,
                    meta={"msccl_name": program.name})  # fmt: skip


def _validate(program: Program, topology: Topology, label: str) -> str:
    coll = canonical_coll(program.coll)
    if coll not in POSTCONDITION_COLLS:
        raise XmlError(
            f"{label}: coll {program.coll!r} has no schedule form; expected one "
            f"of {sorted(POSTCONDITION_COLLS)}"
        )
    if topology.nranks != program.ngpus:
        raise XmlError(
            f"topology {topology.name!r} has {topology.nranks} ranks but the program has "
            f"ngpus={program.ngpus}"
        )
    return coll


def _order(key: Item) -> tuple[int, int, int, tuple[Edge, ...]]:
    kind, root, dest, edges = key
    return (["in_tree", "out_tree", "path"].index(kind), root, -1 if dest is None else dest, edges)


def _hop_maker(topology: Topology) -> Callable[[int, int], Hop]:
    cache: dict[Edge, Hop] = {}

    def hop(a: int, b: int) -> Hop:
        if (a, b) not in cache:
            cache[(a, b)] = Hop(a, b, switch_path(topology, topology.gpu_id(a), topology.gpu_id(b)))
        return cache[(a, b)]

    return hop


def _show(value: Value) -> str:
    if value is None:
        return "uninitialised data"
    parts = [f"rank {q} i[{k}]" for q, k in value[:4]]
    return "{" + ", ".join(parts) + (", ..." if len(value) > 4 else "") + "}"


def _single(coll: str, move: Move) -> tuple[int, int]:
    a, b, value = move
    if value is None or len(value) != 1:
        raise XmlError(
            f"{coll}: a transfer gpu {a}->gpu {b} carries {_show(value)}, not one input chunk"
        )
    return value[0]


def _index(coll: str, move: Move) -> int:
    a, b, value = move
    indices = {k for _, k in value or ()}
    if value is None or len(indices) != 1:
        raise XmlError(
            f"{coll}: a transfer gpu {a}->gpu {b} carries {_show(value)}, which mixes chunk "
            "indices or holds no data; a reduction tree combines one index"
        )
    return indices.pop()


def _allgather(moves: list[Move], n: int, c: int) -> list[Item]:
    edges: dict[tuple[int, int], list[Edge]] = defaultdict(list)
    for move in moves:
        edges[_single("allgather", move)].append(move[:2])
    return [
        ("out_tree", q, None, _out_tree(edges[(q, k)], q, n, f"allgather: rank {q}'s chunk {k}"))
        for q in range(n)
        for k in range(c)
    ]


def _alltoall(moves: list[Move], n: int, c: int) -> list[Item]:
    edges: dict[tuple[int, int], list[Edge]] = defaultdict(list)
    for move in moves:
        edges[_single("alltoall", move)].append(move[:2])
    items: list[Item] = []
    for q in range(n):
        for d in range(n):
            for k in range(c):
                what = f"alltoall: block {q}->{d} chunk {k} (rank {q} i[{d * c + k}])"
                got = edges.get((q, d * c + k), [])
                if d == q:
                    if got:
                        a, b = got[0]
                        raise XmlError(f"{what} stays at rank {q} but is sent gpu {a}->gpu {b}")
                    continue
                items.append(("path", q, d, _path(got, q, d, what)))
    return items


def _reducescatter(moves: list[Move], n: int, c: int) -> list[Item]:
    edges: dict[int, list[Edge]] = defaultdict(list)
    for move in moves:
        edges[_index("reducescatter", move)].append(move[:2])
    return [
        ("in_tree", j // c, None, _in_tree(edges[j], j // c, n, f"reducescatter: chunk {j}"))
        for j in range(n * c)
    ]


def _allreduce(moves: list[Move], n: int, total: int) -> tuple[list[Item], int]:
    partial: dict[int, list[Edge]] = defaultdict(list)
    full: dict[int, list[Edge]] = defaultdict(list)
    for move in moves:
        j = _index("allreduce", move)
        is_full = move[2] == tuple((q, j) for q in range(n))
        (full if is_full else partial)[j].append(move[:2])
    items: list[Item] = []
    roots: Counter[int] = Counter()
    for j in range(total):
        what = f"allreduce: chunk {j}"
        reducers = sorted(set(range(n)) - {b for _, b in full[j]})
        if len(reducers) != 1:
            raise XmlError(
                f"{what} is reduced at {len(reducers)} ranks {reducers}, not at one: each of "
                "them combines the contributions itself (as in a one-shot or allpairs allreduce "
                "where every rank reduces), which has no in-tree + out-tree (ReduceScatter + "
                "AllGather) form in the Schedule IR"
            )
        root = reducers[0]
        roots[root] += 1
        items.append(("in_tree", root, None, _in_tree(partial[j], root, n, what)))
        items.append(("out_tree", root, None, _out_tree(full[j], root, n, what + " (full sum)")))
    share, rest = divmod(total, n)
    odd = [r for r in range(n) if roots[r] != share]
    if rest or odd:
        r = odd[0] if odd else 0
        raise XmlError(
            f"allreduce: rank {r} is the reduction root of {roots[r]} of the {total} chunks, but "
            f"the Schedule IR needs every rank to root nchunksperloop/ngpus = {total}/{n} of them "
            "(a ReduceScatter + AllGather form)"
        )
    return items, share


def _out_tree(edges: list[Edge], root: int, n: int, what: str) -> tuple[Edge, ...]:
    """``edges`` as an out-tree from ``root`` spanning all ranks, parents first."""
    parent: dict[int, int] = {}
    for a, b in edges:
        if b == root or b in parent:
            first = "its origin" if b == root else f"rank {parent[b]}"
            raise XmlError(
                f"{what} reaches rank {b} more than once (from {first} and from rank {a}); a "
                "redundant transfer has no out-tree form in the Schedule IR"
            )
        parent[b] = a
    missing = sorted(set(range(n)) - set(parent) - {root})
    if missing:
        raise XmlError(f"{what} is never sent to rank(s) {missing}")
    kids: dict[int, list[int]] = defaultdict(list)
    for b, a in parent.items():
        kids[a].append(b)
    order: list[Edge] = []
    frontier = [root]
    while frontier:
        v = frontier.pop(0)
        for child in sorted(kids[v]):
            order.append((v, child))
            frontier.append(child)
    if len(order) != len(parent):
        raise XmlError(f"{what}: its transfers do not form a tree rooted at rank {root}")
    return tuple(order)


def _in_tree(edges: list[Edge], root: int, n: int, what: str) -> tuple[Edge, ...]:
    """``edges`` as an in-tree into ``root`` over all ranks, leaves first."""
    parent: dict[int, int] = {}
    for a, b in edges:
        if a == root:
            raise XmlError(
                f"{what}: rank {root}, where its reduction ends, sends a partial sum to rank {b}; "
                "an in-tree never sends from its root"
            )
        if a in parent:
            raise XmlError(
                f"{what}: rank {a} sends partial sums twice (to ranks {parent[a]} and {b}); an "
                "in-tree sends each rank's partial sum once"
            )
        parent[a] = b
    missing = sorted(set(range(n)) - set(parent) - {root})
    if missing:
        raise XmlError(f"{what}: rank(s) {missing} send no partial sum toward rank {root}")
    depth: dict[int, int] = {root: 0}
    for start in sorted(parent):
        v, chain = start, []
        while v not in depth:
            if v in chain:
                raise XmlError(f"{what}: its partial sums circle through rank {v}")
            chain.append(v)
            v = parent[v]
        for u in reversed(chain):
            depth[u] = depth[parent[u]] + 1
    return tuple(sorted(parent.items(), key=lambda e: (-depth[e[0]], e[0])))


def _path(edges: list[Edge], src: int, dest: int, what: str) -> tuple[Edge, ...]:
    """``edges`` as one simple path ``src -> dest``."""
    nxt: dict[int, int] = {}
    for a, b in edges:
        if a in nxt:
            raise XmlError(
                f"{what} leaves rank {a} twice (to ranks {nxt[a]} and {b}); a path route sends "
                "each chunk along one path"
            )
        nxt[a] = b
    path = [src]
    while path[-1] in nxt and nxt[path[-1]] not in path:
        path.append(nxt[path[-1]])
    if path[-1] != dest or len(path) - 1 != len(edges):
        extra = sorted({b for _, b in edges} - set(path))
        hint = f"; it also goes to rank(s) {extra}, off its path" if extra else ""
        raise XmlError(
            f"{what}: its transfers {sorted(edges)} are not one path from rank {src} to rank "
            f"{dest}{hint} (wasted or cyclic transfers have no PATH form in the Schedule IR)"
        )
    return tuple(pairwise(path))
