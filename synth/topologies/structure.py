"""What a fabric is made of, read from its graph: switch roles, hosts and rails.

Nothing here looks at node ids, the topology's name or its ``meta``: a plain JSON copy of a
named fabric with random node ids has the same structure. The rules are in ``docs/topology.md``.

* :data:`ROLES` -- the closed set of switch roles (the optional ``role`` field of a switch node).
* :func:`switch_roles` -- every switch's role: the explicit ``role`` where set, else inferred.
* :func:`rail_layout` -- the rail-optimised layout (hosts × rails) NCCL would detect, or ``None``.

Examples
--------
>>> from synth.topologies import named_topology
>>> t = named_topology("hpn:1x2x4")
>>> switch_roles(t)["nvs0.1"], switch_roles(t)["tor0.3"]
('nvswitch', 'tor')
>>> rail_layout(t).hosts
((0, 1, 2, 3), (4, 5, 6, 7))
>>> rail_layout(named_topology("ring:4")) is None
True
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from functools import cached_property

from synth._types import NodeId, Rank
from synth.topologies._core import TopologyCore
from synth.topologies.parts import ROLES, Node

__all__ = ["NETWORK_ROLES", "ROLES", "RailLayout", "infer_role", "rail_layout", "switch_roles"]

#: Roles on the network side of a GPU (everything except the intra-host ``nvswitch``).
NETWORK_ROLES: tuple[str, ...] = ("nic", "tor", "spine")


def _host_key(node: Node) -> Hashable:
    """A GPU's host; a GPU without a ``host`` is alone in its own host."""
    return ("host", node.host) if node.host is not None else ("rank", node.rank)


def _neighbours(topo: TopologyCore, node_id: NodeId) -> set[NodeId]:
    """Nodes cabled to ``node_id`` in either direction (any capacity: the hardware, not its state)."""
    return {lk.dst for lk in topo.out_links(node_id)} | {lk.src for lk in topo.in_links(node_id)}


def infer_role(topo: TopologyCore, switch_id: NodeId) -> str:
    """The role the documented rule gives a switch (ignoring any explicit ``role``).

    1. no GPU cabled to it: ``spine``;
    2. GPUs of two or more hosts cabled to it: ``tor``;
    3. GPUs of one host, and another switch cabled to it: ``nic``;
    4. GPUs of one host and no other switch: ``nvswitch`` if it joins two or more GPUs, or its one GPU
       is alone in its host; else (one GPU of a larger host) ``nic``.

    >>> from synth.topologies import named_topology
    >>> t = named_topology("hpn:1x1x4")   # one host: the rail switches hold one GPU each
    >>> infer_role(t, "nvs0.0"), infer_role(t, "tor0.2")
    ('nvswitch', 'nic')
    """
    near = [topo.node(v) for v in _neighbours(topo, switch_id)]
    gpus = [n for n in near if n.is_gpu]
    if not gpus:
        return "spine"
    hosts = {_host_key(g) for g in gpus}
    if len(hosts) > 1:
        return "tor"
    if any(not n.is_gpu for n in near):
        return "nic"
    if len(gpus) >= 2:
        return "nvswitch"
    host = next(iter(hosts))
    alone = sum(1 for g in topo.gpus if _host_key(g) == host) == 1
    return "nvswitch" if alone else "nic"


def switch_roles(topo: TopologyCore) -> dict[NodeId, str]:
    """Role of every switch: its ``role`` field where given, else :func:`infer_role`."""
    return {s.id: s.role if s.role is not None else infer_role(topo, s.id) for s in topo.switches}


@dataclass(frozen=True)
class RailLayout:
    """A rail-optimised layout: ``hosts[h][i]`` is the rank of host h's GPU on rail i.

    Hosts are ordered by their lowest rank; rails by the rank order of the first host's GPUs.
    """

    hosts: tuple[tuple[Rank, ...], ...]

    @property
    def nhosts(self) -> int:
        return len(self.hosts)

    @property
    def gpus_per_host(self) -> int:
        return len(self.hosts[0])

    @cached_property
    def _where(self) -> dict[Rank, tuple[int, int]]:
        return {r: (h, i) for h, row in enumerate(self.hosts) for i, r in enumerate(row)}

    def host_of(self, rank: Rank) -> int:
        return self._where[rank][0]

    def rail_of(self, rank: Rank) -> int:
        return self._where[rank][1]


def _switch_reach(topo: TopologyCore, switch: NodeId, skip: set[NodeId]) -> frozenset[NodeId]:
    """GPUs reachable from ``switch`` over live links through switches not in ``skip``."""
    seen = {switch}
    found: set[NodeId] = set()
    queue = deque([switch])
    while queue:
        u = queue.popleft()
        for lk in topo.out_links(u):
            v = lk.dst
            if lk.gbps <= 0 or v in seen or v in skip:
                continue
            seen.add(v)
            if topo.node(v).is_gpu:
                found.add(v)
            else:
                queue.append(v)
    return frozenset(found)


def _reaches(topo: TopologyCore, skip: set[NodeId]) -> Callable[[NodeId], tuple[set[NodeId], bool]]:
    """GPUs a GPU reaches over live links through switches not in ``skip``, and whether it crossed
    a switch; one search per first switch rather than per GPU (GPUs
    are never passed through, so a GPU reaches what its switches reach, and its GPU neighbours)."""
    memo: dict[NodeId, frozenset[NodeId]] = {}

    def reach(src: NodeId) -> tuple[set[NodeId], bool]:
        found: set[NodeId] = set()
        crossed = False
        for lk in topo.out_links(src):
            v = lk.dst
            if lk.gbps <= 0 or v == src or v in skip:
                continue
            if topo.node(v).is_gpu:
                found.add(v)
                continue
            crossed = True
            if v not in memo:
                memo[v] = _switch_reach(topo, v, skip)
            found |= memo[v]
        found.discard(src)
        return found, crossed

    return reach


def rail_layout(topo: TopologyCore) -> RailLayout | None:
    """The rail layout NCCL would find, or ``None`` where the fabric has no rail structure.

    Hosts come from the GPUs' ``host`` field. A GPU's rail is the set of GPUs it reaches over live
    links through network switches only (every role except ``nvswitch``). The fabric is
    rail-optimised when every GPU reaches at least one network switch, rails partition the GPUs
    (reaching is mutual), every host has the same number of GPUs, every rail holds exactly one
    GPU of every host, and the GPUs of a host reach each other through switches.
    """
    roles = switch_roles(topo)
    intra = {s for s, role in roles.items() if role == "nvswitch"}
    by_host: dict[Hashable, list[Node]] = {}
    for gpu in topo.gpus:
        by_host.setdefault(_host_key(gpu), []).append(gpu)
    sizes = {len(members) for members in by_host.values()}
    if len(sizes) != 1:
        return None
    rail: dict[NodeId, frozenset[NodeId]] = {}
    canon: dict[frozenset[NodeId], frozenset[NodeId]] = {}
    reach_rail = _reaches(topo, intra)
    for gpu in topo.gpus:
        found, crossed = reach_rail(gpu.id)
        if not crossed:
            return None
        group = frozenset(found | {gpu.id})
        rail[gpu.id] = canon.setdefault(group, group)  # one object per distinct rail: identity below
    if any(rail[v] is not group for group in canon for v in group):
        return None  # reaching is not mutual, or rails overlap
    nhosts = len(by_host)
    host_of = {g.id: key for key, members in by_host.items() for g in members}
    if any(len(group) != nhosts or len({host_of[v] for v in group}) != nhosts for group in rail.values()):
        return None
    reach_any = _reaches(topo, set())
    for members in by_host.values():
        ids = {g.id for g in members}
        for g in members:
            found, _ = reach_any(g.id)
            if not ids - {g.id} <= found:
                return None
    hosts = sorted(by_host.values(), key=lambda members: min(g.rank or 0 for g in members))
    first = sorted(hosts[0], key=lambda g: g.rank or 0)
    rail_index = {group: i for i, group in enumerate(rail[g.id] for g in first)}
    table: list[tuple[Rank, ...]] = []
    for members in hosts:
        row: list[Rank] = [0] * len(first)
        for g in members:
            row[rail_index[rail[g.id]]] = topo.rank_of(g.id)
        table.append(tuple(row))
    return RailLayout(tuple(table))
