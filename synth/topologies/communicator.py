"""Communicators: the sub-topology on which a collective over a subset of a job's GPUs runs.

A job runs collectives on subsets of its GPUs (data-parallel rail groups, tensor-parallel hosts,
expert groups). :func:`communicator` turns a topology and the participating global ranks into a
topology whose GPUs are exactly the participants, re-ranked ``0..k-1`` in the order given, so
that every synthesizer, bound, baseline, the simulator and the MSCCL export work on it unchanged.

* ``relay=False`` (the default: GPUs outside a communicator do not relay its data): the other GPUs
  are dropped with their links.
* ``relay=True``: the other GPUs stay as switch nodes (they forward bytes but hold and reduce
  nothing), so paths through them remain usable.

In both cases switches (and relay GPUs) that cannot lie on a path between two participants are
dropped: those reached from no participant or reaching none, then, repeatedly, those left with a
single neighbour (a dead end carries nothing a simple path needs). Links keep their capacities
and latencies, down links (0 Gbit/s) included.

The mapping to global ranks is recorded in ``meta["communicator"]`` (``global_ranks``, ``relay``,
``parent`` name and ``parent_fingerprint``) and read back by :func:`global_ranks`; the meta of the
parent is not carried over (its facts, such as a named family's shape, describe the whole job).
Participants keep their node ids, so :attr:`Topology.fingerprint` tells communicators apart (by
subset, order and relaying). A communicator of a communicator maps to the original global ranks.

Examples
--------
>>> from synth.topologies import named_topology
>>> t = named_topology("ring:6")
>>> c = communicator(t, [4, 0, 2], relay=True)
>>> c.nranks, [n.id for n in c.gpus], global_ranks(c)
(3, ['gpu4', 'gpu0', 'gpu2'], (4, 0, 2))
>>> communicator(t, [0, 1]).nranks, len(communicator(t, [0, 1]).links)
(2, 2)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from synth._types import NodeId, Rank
from synth.errors import TopologyError, short_repr
from synth.topologies._core import T, TopologyCore
from synth.topologies.parts import Node, NodeKind

__all__ = ["COMMUNICATOR_META_KEY", "communicator", "communicator_meta", "global_ranks"]

#: Key of the communicator record in a topology's (and a schedule's) ``meta``.
COMMUNICATOR_META_KEY = "communicator"


def _check_ranks(topo: TopologyCore, ranks: Iterable[Rank]) -> list[Rank]:
    try:
        chosen = list(ranks)
    except TypeError:
        raise TopologyError(f"communicator ranks must be a sequence of integers, got {short_repr(ranks)}") from None
    for r in chosen:
        if isinstance(r, bool) or not isinstance(r, int):
            raise TopologyError(f"communicator rank {short_repr(r)} is not an integer")
        if not 0 <= r < topo.nranks:
            raise TopologyError(f"communicator rank {r} is not a rank of {short_repr(topo.name)} (ranks 0..{topo.nranks - 1})")
    dup = sorted({r for r in chosen if chosen.count(r) > 1})
    if dup:
        raise TopologyError(f"communicator ranks repeat {dup}")
    if len(chosen) < 2:
        raise TopologyError(f"a communicator needs at least 2 ranks, got {chosen}")
    return chosen


def _useful(nodes: Mapping[NodeId, Node], links: Iterable[tuple[NodeId, NodeId]]) -> set[NodeId]:
    """Node ids that can lie on a simple path between two GPUs (GPUs always kept)."""
    out: dict[NodeId, set[NodeId]] = {v: set() for v in nodes}
    inn: dict[NodeId, set[NodeId]] = {v: set() for v in nodes}
    for a, b in links:
        out[a].add(b)
        inn[b].add(a)
    gpus = [v for v, n in nodes.items() if n.is_gpu]

    def reach(adj: Mapping[NodeId, set[NodeId]]) -> set[NodeId]:
        seen = set(gpus)
        stack = list(gpus)
        while stack:
            for w in adj[stack.pop()]:
                if w not in seen:
                    seen.add(w)
                    stack.append(w)
        return seen

    keep = reach(out) & reach(inn)
    # Repeatedly drop non-GPU nodes with at most one neighbour left: a path entering one leaves it
    # the way it came, so no simple path between two GPUs crosses it.
    changed = True
    while changed:
        changed = False
        for v in sorted(keep):
            if nodes[v].is_gpu:
                continue
            nbrs = ((out[v] | inn[v]) & keep) - {v}
            if len(nbrs) <= 1:
                keep.discard(v)
                changed = True
    return keep


def communicator(topo: T, ranks: Iterable[Rank], *, relay: bool = False) -> T:
    """The sub-topology of the GPUs of ``ranks`` (global ranks of ``topo``), re-ranked in that order.

    See the module docstring for what is kept. Raises :class:`TopologyError` naming the culprit for
    a rank out of range or repeated, fewer than two ranks, or participants that cannot reach each
    other (without relays, suggesting ``relay=True``).
    """
    chosen = _check_ranks(topo, ranks)
    new_rank = {topo.gpu_id(r): i for i, r in enumerate(chosen)}
    nodes: dict[NodeId, Node] = {}
    for n in topo.nodes:
        if n.id in new_rank:
            nodes[n.id] = replace(n, rank=new_rank[n.id])
        elif not n.is_gpu:
            nodes[n.id] = n
        elif relay:
            nodes[n.id] = replace(n, kind=NodeKind.SWITCH, rank=None)
    links = [lk for lk in topo.links if lk.src in nodes and lk.dst in nodes]
    keep = _useful(nodes, (lk.key for lk in links if lk.gbps > 0))
    parent_ranks = global_ranks(topo)
    outer = topo.meta.get(COMMUNICATOR_META_KEY)
    outer = outer if isinstance(outer, Mapping) else {}
    record = {
        "global_ranks": [parent_ranks[r] for r in chosen],
        "relay": bool(relay) or bool(outer.get("relay", False)),
        "parent": str(outer.get("parent", topo.name)),
        "parent_fingerprint": str(outer.get("parent_fingerprint", topo.fingerprint)),
    }
    shown = ",".join(str(r) for r in chosen)
    name = f"{topo.name}[ranks={shown}{',relay' if relay else ''}]"
    try:
        return type(topo).create(
            name,
            (nodes[n.id] for n in topo.nodes if n.id in keep),
            (lk for lk in links if lk.src in keep and lk.dst in keep),
            {COMMUNICATOR_META_KEY: record},
            # Overrides between two participants whose nodes all remain keep routing them.
            (r for r in topo.routes if r[0] in new_rank and r[-1] in new_rank and all(v in keep for v in r)),
        )
    except TopologyError as exc:
        hint = "" if relay else "; pass relay=True (--relay) to let the other GPUs forward"
        raise TopologyError(f"communicator of ranks {chosen} on {short_repr(topo.name)}: {exc}{hint}") from exc


def global_ranks(topo: TopologyCore) -> tuple[Rank, ...]:
    """The global rank of each local rank: ``meta["communicator"]["global_ranks"]``, else ``0..N-1``.

    >>> from synth.topologies import named_topology
    >>> global_ranks(named_topology("ring:3"))
    (0, 1, 2)
    """
    record = topo.meta.get(COMMUNICATOR_META_KEY)
    if isinstance(record, Mapping):
        ranks = record.get("global_ranks")
        if isinstance(ranks, list) and len(ranks) == topo.nranks and all(isinstance(r, int) for r in ranks):
            return tuple(ranks)
    return tuple(range(topo.nranks))


def communicator_meta(topo: TopologyCore) -> dict[str, Any]:
    """The schedule-meta entries that record ``topo``'s communicator (empty for a whole topology).

    >>> from synth.topologies import named_topology
    >>> communicator_meta(named_topology("ring:3"))
    {}
    >>> communicator_meta(communicator(named_topology("ring:3"), [2, 1]))["global_ranks"]
    [2, 1]
    """
    record = topo.meta.get(COMMUNICATOR_META_KEY)
    if not isinstance(record, Mapping):
        return {}
    return {"global_ranks": list(global_ranks(topo)), COMMUNICATOR_META_KEY: dict(record)}
